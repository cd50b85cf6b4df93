import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import Lifecycle
import PlantedSlowdown
import PostgresClient

/// `POST /oauth/token` (app guide sections 3 and 4): the password grant with its second factor,
/// Apple and Google, guest tokens and refreshes; and `POST /oauth/apple/return`, the end of Apple's
/// web flow. Every answer is OAuth's shape (RFC 6749 §5), never JSON:API; docs/identity.md has
/// every outcome and the reasons for each choice.
public final class TokenEndpoint: Sendable {
    public static let grantPassword = "urn:wristler:native-login"
    public static let grantSocial = "urn:wristler:social"
    public static let grantGuest = "urn:wristler:guest"
    public static let grantRefresh = "refresh_token"

    /// The largest body the endpoint reads (an ID token is a few KiB); larger is `413` in OAuth's shape.
    public static let maximumBodyBytes = 16 * 1024
    /// The bounds of the fields that may be long; every other field is at most 1 KiB.
    static let fieldLimits: [String: Int] = ["id_token": SocialTokenVerifier.maximumTokenBytes, "authorization_code": 2048, "user": 2048]

    public let configuration: IdentityConfiguration
    let client: PostgresClient
    let keys: SigningKeys
    let hasher: PasswordHasher
    let social: SocialTokenVerifier?
    let appleCodes: AppleCodeExchanger?
    let gate: AppVersionGate?
    let validator: EventValidator?
    let limits = RateLimits()
    let localLimits = LocalRateLimits()
    let log: Logger?
    let now: @Sendable () -> Date

    public init(
        configuration: IdentityConfiguration, client: PostgresClient, keys: SigningKeys, hasher: PasswordHasher, social: SocialTokenVerifier?,
        appleCodes: AppleCodeExchanger? = nil, gate: AppVersionGate?, validator: EventValidator?, log: Logger? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.configuration = configuration
        self.client = client
        self.keys = keys
        self.hasher = hasher
        self.social = social
        self.appleCodes = appleCodes
        self.gate = gate
        self.validator = validator
        self.log = log
        self.now = now
    }

    /// Who is asking, as the grants need it.
    struct Caller {
        var identity: AppIdentity
        var address: String
        var language: Language
        var device: String?
        /// The app installation's stable id (`installation_id`), when the app sends one.
        var installation: String?
        var client: OAuthClient
        var now: Date
    }

    // MARK: The token endpoint

    /// Answers a request to `/oauth/token`; never throws, every failure is an OAuth answer.
    public func token(_ request: HTTPRequest) -> HTTPResponse {
        answering(request) { () throws(OAuthError) -> HTTPResponse in
            let (form, caller) = try read(request)
            switch form["grant_type"] {
            case nil: throw OAuthError.invalidRequest("grant_type is missing.")
            case Self.grantPassword: return try form["challenge"] == nil ? passwordStep(form, caller) : codeStep(form, caller)
            case Self.grantSocial: return try socialGrant(form, caller)
            case Self.grantGuest: return try guestGrant(form, caller)
            case Self.grantRefresh: return try refreshGrant(form, caller)
            case let other?:
                throw OAuthError(400, .unsupportedGrantType, "grant_type \(other.prefix(100)) is not one this server knows.")
            }
        }
    }

    /// `POST /oauth/revoke` (RFC 7009): a refresh token of the calling client ends its session at
    /// once (the app's "sign out" where it has no access token left); `200` with no body whether
    /// or not the token was one (§2.2: an unknown token is no error, so nothing can be learned). An
    /// access token cannot be revoked: it runs out within its hour (`unsupported_token_type`).
    public func revoke(_ request: HTTPRequest) -> HTTPResponse {
        answering(request) { () throws(OAuthError) -> HTTPResponse in
            let (form, caller) = try read(request)
            guard let token = form["token"] else { throw OAuthError.invalidRequest("token is missing.") }
            if form["token_type_hint"] == "access_token" || token.split(separator: ".", omittingEmptySubsequences: false).count == 3 {
                throw OAuthError(
                    400, .unsupportedTokenType, "Access tokens are not revoked: they run out within the hour. Revoke the refresh token.")
            }
            try localLimits.take("refresh", address: caller.address, limit: configuration.refreshPerAddress, now: caller.now)
            _ = try database { connection in try Sessions.revoke(token, clientId: caller.client.id, now: caller.now, on: connection) }
            return HTTPResponse(status: 200, headers: [("Cache-Control", "no-store")])
        }
    }

    /// The request as a form and a caller: no query, the app identified and let through by
    /// version, a form body, a known client.
    func read(_ request: HTTPRequest) throws(OAuthError) -> (FormBody, Caller) {
        guard request.query.isEmpty else {
            throw OAuthError.invalidRequest("Parameters go in the form body, never in the URL (it is logged and cached on the way).")
        }
        let identity: AppIdentity
        do {
            identity = try AppIdentity.parse(request.header(AppIdentity.headerName))
        } catch {
            throw OAuthError.invalidRequest(error.detail ?? "X-Wristler-App is malformed.")
        }
        try checkVersion(identity)
        let form = try Self.form(request)
        guard let clientId = form["client_id"] else { throw OAuthError.invalidRequest("client_id is missing.") }
        guard let client = configuration.clients[clientId] else {
            throw OAuthError(400, .invalidClient, "client_id \(clientId.prefix(100)) is not a client of this server.")
        }
        let device = form["device"].map { String($0.prefix(100)) }
        let installation = form["installation_id"]
        if let installation {
            guard (8...128).contains(installation.utf8.count),
                installation.utf8.allSatisfy({ (48...58).contains($0) || (65...90).contains($0) || (97...122).contains($0) || $0 == 45 || $0 == 46 || $0 == 95 })
            else {
                throw OAuthError.invalidRequest("installation_id is 8 to 128 characters of letters, digits, '-', '_', '.' and ':'.")
            }
        }
        let caller = Caller(
            identity: identity, address: clientAddress(request), language: Language.negotiate(request.header("Accept-Language")),
            device: device, installation: installation, client: client, now: now())
        return (form, caller)
    }

    /// The address the rate limits count a request against: the connection's, or behind a trusted
    /// proxy the rightmost address of `X-Forwarded-For` that is not one of the proxies (the ones
    /// left of it were written by the client and prove nothing).
    func clientAddress(_ request: HTTPRequest) -> String {
        let peer = request.clientAddress ?? "unknown"
        guard configuration.trustedProxies.contains(peer), let forwarded = request.header("X-Forwarded-For") else { return peer }
        let hops = forwarded.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        return hops.last(where: { !configuration.trustedProxies.contains($0) }).map { String($0.prefix(64)) } ?? peer
    }

    /// The body as a form: `application/x-www-form-urlencoded` only (with `charset=utf-8` at most);
    /// a JSON body, which the app guide says arrives empty, is refused as such.
    static func form(_ request: HTTPRequest) throws(OAuthError) -> FormBody {
        let parts = (request.header("Content-Type") ?? "").split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard parts.first == "application/x-www-form-urlencoded" else {
            if parts.first?.hasSuffix("json") == true || parts.first?.hasSuffix("+json") == true {
                throw OAuthError.invalidRequest("The body must be application/x-www-form-urlencoded (OAuth 2.0); a JSON body is not read.")
            }
            throw OAuthError.invalidRequest("The body must be application/x-www-form-urlencoded (OAuth 2.0).")
        }
        for parameter in parts.dropFirst() where parameter != "charset=utf-8" && parameter != "charset=\"utf-8\"" {
            throw OAuthError.invalidRequest("The form must be UTF-8, not \(parameter.prefix(50)).")
        }
        do {
            return try FormBody(request.body, limits: fieldLimits)
        } catch {
            throw OAuthError.invalidRequest(error.description)
        }
    }

    /// `426 app_update_required` below the platform's minimum: signing in is gated too (app guide
    /// section 2). The answer is OAuth's shape and also carries the JSON:API `errors` member the
    /// app switches on for every other request, so one handler serves both.
    func checkVersion(_ identity: AppIdentity) throws(OAuthError) {
        do {
            try gate?.check(identity)
        } catch {
            var item: [String: JSONValue] = [
                "status": .string(String(error.status)), "code": .string(error.code.rawValue), "title": .string(error.title),
            ]
            if let detail = error.detail { item["detail"] = .string(detail) }
            if !error.meta.isEmpty { item["meta"] = .object(error.meta) }
            throw OAuthError(error.status, .appUpdateRequired, error.detail, members: ["errors": .array([.object(item)])])
        }
    }

    // MARK: Email and password

    func passwordStep(_ form: FormBody, _ caller: Caller) throws(OAuthError) -> HTTPResponse {
        guard let username = form["username"], let password = form["password"] else {
            throw OAuthError.invalidRequest("The password grant needs username and password (or, after mfa_required, challenge and otp).")
        }
        guard username.utf8.count <= 254 else { throw OAuthError.invalidRequest("username is at most 254 bytes.") }
        let scopes = try allowed(form["scope"], for: caller.client)
        let email = Accounts.normalized(username)
        let trustedBy = TrustedSignIns.keys(email: email, installation: caller.installation, address: caller.address)
        try database { connection in
            try limits.take("sign-in", .address(caller.address), limit: configuration.signInPerAddress, now: caller.now, on: connection)
            // An installation or address that signed in to this account before has a budget of its
            // own: a guesser elsewhere who spends the account's cannot lock the owner out.
            let trusted = try TrustedSignIns.trusted(trustedBy, now: caller.now, on: connection)
            try limits.take(
                "sign-in", trusted.map { .trusted($0) } ?? .account(email.lowercased()), limit: configuration.signInPerAccount, now: caller.now,
                on: connection)
        }
        let account = try database { connection in try Accounts.find(email: email, on: connection) }
        // One hash whatever the account: against a dummy when there is no account or no password.
        guard try hasher.verify(password, against: account?.passwordHash), let account else {
            try countFailure(email: email, personId: account?.personId, caller)
            throw OAuthError.wrongCredentials
        }
        guard !account.isBlocked else { throw OAuthError.accountBlocked(language: caller.language, contactURL: configuration.contactURL) }
        if let stored = account.passwordHash, hasher.needsRehash(stored), let rehashed = try? hasher.hash(password) {
            // The cost setting changed: the password is at hand only now.
            try database { connection in try Accounts.setPasswordHash(personId: account.personId, hash: rehashed, now: caller.now, on: connection) }
        }
        if account.hasSecondFactor {
            let challenge = try database { connection in
                try Challenges.create(
                    personId: account.personId, clientId: caller.client.id, scopes: scopes, attempts: configuration.challengeAttempts,
                    lifetime: configuration.challengeLifetime, now: caller.now, on: connection)
            }
            throw OAuthError(
                401, .mfaRequired, nil,
                members: ["challenge": .string(challenge.text), "challenge_expires_in": .integer(Int64(configuration.challengeLifetime))])
        }
        try database { connection in try TrustedSignIns.remember(trustedBy, now: caller.now, on: connection) }
        return try signIn(account.personId, scopes: scopes, method: "password", caller)
    }

    /// A wrong password for `email` counted (`FailedSignIns`, the same work whether or not it has
    /// an account); at the fifth within an hour its person is told once (`sign_in_attempts_failed`,
    /// the bell and a push), saying nothing of the passwords tried.
    func countFailure(email: String, personId: String?, _ caller: Caller) throws(OAuthError) {
        var metadata = caller.identity.metadata
        metadata.service = "identity"
        try database { [validator] connection in
            try connection.transaction { connection in
                guard let failures = try FailedSignIns.count(email: email, now: caller.now, on: connection), let personId else { return }
                let event = try NewEvent(SignInAttemptsFailed(personId: personId, attempts: failures), metadata: metadata)
                _ = try EventStore.append([event], validator: validator, on: connection)
            }
        }
    }

    /// The code after `mfa_required`: the challenge stands for the right password.
    func codeStep(_ form: FormBody, _ caller: Caller) throws(OAuthError) -> HTTPResponse {
        guard let challengeText = form["challenge"], let otp = form["otp"] else {
            throw OAuthError.invalidRequest("The code step needs challenge and otp.")
        }
        guard form["password"] == nil else { throw OAuthError.invalidRequest("The code step takes no password: send challenge and otp only.") }
        let expired = OAuthError.invalidGrant("The challenge is unknown, expired or used up; sign in with the password again.")
        try database { connection in
            try limits.take("sign-in", .address(caller.address), limit: configuration.signInPerAddress, now: caller.now, on: connection)
        }
        guard let challenge = try database({ connection in try Challenges.attempt(challengeText, now: caller.now, on: connection) }) else {
            throw expired
        }
        guard challenge.clientId == caller.client.id else { throw expired }
        try database { connection in
            try limits.take("code", .account(challenge.personId), limit: configuration.signInPerAccount, now: caller.now, on: connection)
        }
        guard let account = try database({ connection in try Accounts.find(personId: challenge.personId, on: connection) }) else { throw expired }
        if account.isBlocked {
            // Blocked between the two steps: the password was right, so the person is told.
            _ = try database { connection in try Challenges.destroy(challengeText, on: connection) }
            throw OAuthError.accountBlocked(language: caller.language, contactURL: configuration.contactURL)
        }
        let right = try database { connection in
            try Accounts.acceptSecondFactor(personId: account.personId, otp: otp, secrets: configuration.secrets, now: caller.now, on: connection)
        }
        guard right else {
            if challenge.attemptsLeft == 0 {
                _ = try database { connection in try Challenges.destroy(challengeText, on: connection) }
                throw expired
            }
            throw OAuthError(
                401, .invalidOTP, "The code is not right; the challenge is still good.",
                members: ["attempts_remaining": .integer(Int64(challenge.attemptsLeft))])
        }
        // Used once: of two right codes racing, one signs in.
        guard try database({ connection in try Challenges.destroy(challengeText, on: connection) }) else { throw expired }
        // What the password step asked for; only when it asked for nothing does this step's scope count.
        let scopes = challenge.scopes.isEmpty ? try allowed(form["scope"], for: caller.client) : challenge.scopes
        let trustedBy = TrustedSignIns.keys(email: Accounts.normalized(account.email), installation: caller.installation, address: caller.address)
        try database { connection in try TrustedSignIns.remember(trustedBy, now: caller.now, on: connection) }
        return try signIn(account.personId, scopes: scopes, method: "password", caller)
    }

    // MARK: Apple and Google

    func socialGrant(_ form: FormBody, _ caller: Caller) throws(OAuthError) -> HTTPResponse {
        guard let providerName = form["provider"] else { throw OAuthError.invalidRequest("provider is missing (apple or google).") }
        guard let provider = SocialProvider(rawValue: providerName) else {
            throw OAuthError.invalidRequest("provider must be apple or google, not \(providerName.prefix(50)).")
        }
        guard let social, social.isConfigured(provider) else {
            throw OAuthError.invalidRequest("Sign in with \(provider.rawValue) is not configured on this server.")
        }
        guard let nonce = form["nonce"] else {
            throw OAuthError.invalidRequest("nonce is missing: generate a fresh one per sign-in, give it to the SDK and to us.")
        }
        let idToken = form["id_token"]
        let handoffText = form["handoff"]
        guard (idToken == nil) != (handoffText == nil) else {
            throw OAuthError.invalidRequest("Send either id_token or handoff.")
        }
        if handoffText != nil && provider != .apple { throw OAuthError.invalidRequest("A handoff is Apple's web flow: provider must be apple.") }
        let scopes = try allowed(form["scope"], for: caller.client)
        try database { connection in
            try limits.take("sign-in", .address(caller.address), limit: configuration.signInPerAddress, now: caller.now, on: connection)
        }
        var claims: SocialClaims
        var code = provider == .apple ? form["authorization_code"] : nil
        if let idToken {
            claims = try social.verify(idToken, provider: provider, now: caller.now)
            claims.givenName = form["given_name"] ?? claims.givenName
            claims.familyName = form["family_name"] ?? claims.familyName
        } else {
            guard let handoff = try database({ connection in try Handoffs.take(handoffText!, now: caller.now, on: connection) }) else {
                throw OAuthError.invalidGrant("The handoff is unknown, expired or used; sign in with Apple again.")
            }
            claims = handoff.claims
            code = handoff.authorizationCode
        }
        // Exactly as sent: no hashing, no trimming (app guide, "Generate a fresh nonce").
        guard let tokenNonce = claims.nonce, tokenNonce.utf8.elementsEqual(nonce.utf8) else {
            throw OAuthError.invalidGrant("The token's nonce is not the one sent with it.")
        }
        // Once: an ID token that signed somebody in, captured with its nonce, does not sign in again.
        if let idToken, let expiresAt = claims.expiresAt {
            guard try database({ connection in try UsedIDTokens.use(idToken, expiresAt: expiresAt, on: connection) }) else {
                throw OAuthError.invalidGrant("This ID token has signed in already; sign in with \(provider == .apple ? "Apple" : "Google") again.")
            }
        }
        let personId = try accountOf(claims, caller)
        let response = try signIn(personId, scopes: scopes, method: provider.rawValue, caller)
        if let code, let appleCodes {
            appleCodes.exchangeLater(code: code, clientId: claims.audience, subject: claims.subject, webFlow: idToken == nil)
        }
        return response
    }

    /// The account a verified token is for: the one linked to its subject; else the one with its
    /// address when we verified that address too, now linked; else a new one. Names only fill
    /// what is empty. An address of an account we have not verified is refused, never linked.
    func accountOf(_ claims: SocialClaims, _ caller: Caller) throws(OAuthError) -> String {
        let unverified = OAuthError.invalidGrant(
            "An account with this e-mail address exists and its address is not verified yet: sign in with e-mail and password.")
        let blocked = OAuthError.accountBlocked(language: caller.language, contactURL: configuration.contactURL)
        let origin = caller.identity.metadata.origin.rawValue
        enum Outcome: Sendable {
            case account(String)
            case blocked, unverified, noAddress
        }
        // Twice at most: a first sign-in racing another with the same address finds its account the second time.
        for attempt in 1...2 {
            do {
                let outcome = try client.transactionBlocking { connection -> Outcome in
                    if let linked = try Accounts.linked(provider: claims.provider, subject: claims.subject, on: connection) {
                        if linked.isBlocked { return .blocked }
                        try Accounts.fillNames(
                            personId: linked.personId, givenName: claims.givenName, familyName: claims.familyName, now: caller.now, on: connection)
                        return .account(linked.personId)
                    }
                    guard let email = claims.email, claims.emailVerified, Accounts.isPlausibleEmail(email) else { return .noAddress }
                    if let existing = try Accounts.find(email: email, on: connection) {
                        guard existing.emailVerified else { return .unverified }
                        if existing.isBlocked { return .blocked }
                        try Accounts.link(provider: claims.provider, subject: claims.subject, personId: existing.personId, now: caller.now, on: connection)
                        try Accounts.fillNames(
                            personId: existing.personId, givenName: claims.givenName, familyName: claims.familyName, now: caller.now, on: connection)
                        return .account(existing.personId)
                    }
                    let made = try Accounts.create(
                        NewAccount(
                            email: email, emailVerified: true, givenName: claims.givenName, familyName: claims.familyName, origin: origin,
                            appVersion: caller.identity.metadata.appVersion),
                        on: connection)
                    try Accounts.link(provider: claims.provider, subject: claims.subject, personId: made.personId, now: caller.now, on: connection)
                    return .account(made.personId)
                }
                switch outcome {
                case .account(let personId): return personId
                case .blocked: throw blocked
                case .unverified: throw unverified
                case .noAddress: throw OAuthError.invalidGrant("The token carries no address \(claims.provider.rawValue) verified, and no account is linked to it.")
                }
            } catch let error as OAuthError {
                throw error
            } catch AccountError.emailTaken where attempt == 1 {
                continue
            } catch {
                throw Self.serverError(error)
            }
        }
        throw OAuthError(503, .temporarilyUnavailable, "Try again in a moment.", headers: [("Retry-After", "1")])
    }

    // MARK: Apple's web flow

    /// `POST /oauth/apple/return`: Apple's `form_post` after its web flow. Answers `303` to the
    /// app's link with a one-time `handoff` and Apple's `state`, or `error` and `state`: the ID token
    /// never travels in a URL. No app header here: it is the system browser posting.
    public func appleReturn(_ request: HTTPRequest) -> HTTPResponse {
        answering(request) { () throws(OAuthError) -> HTTPResponse in
            guard let link = configuration.appleReturnURL, let social, social.isConfigured(.apple) else {
                throw OAuthError(404, .invalidRequest, "Sign in with Apple's web flow is not configured on this server.")
            }
            let form = try Self.form(request)
            let state = form["state"]
            func redirect(_ fields: [(String, String)]) -> HTTPResponse {
                let query = FormBody.encode(fields + (state.map { [("state", $0)] } ?? []))
                return HTTPResponse(
                    status: 303, headers: [("Location", link + (link.contains("?") ? "&" : "?") + query), ("Cache-Control", "no-store")])
            }
            if let error = form["error"] { return redirect([("error", String(error.prefix(100)))]) }
            guard let idToken = form["id_token"] else { return redirect([("error", "invalid_request")]) }
            let current = now()
            do throws(OAuthError) {
                try database { connection in
                    try limits.take("sign-in", .address(clientAddress(request)), limit: configuration.signInPerAddress, now: current, on: connection)
                }
                var claims = try social.verify(idToken, provider: .apple, now: current)
                // Used here once: the same token sent to the token endpoint as well is refused there.
                if let expiresAt = claims.expiresAt {
                    guard try database({ connection in try UsedIDTokens.use(idToken, expiresAt: expiresAt, on: connection) }) else {
                        throw OAuthError.invalidGrant("This ID token has signed in already.")
                    }
                }
                let names = Self.appleUserNames(form["user"])
                claims.givenName = names.given
                claims.familyName = names.family
                let handoff = try database { connection in
                    try Handoffs.create(
                        Handoff(claims: claims, authorizationCode: form["code"]), lifetime: configuration.handoffLifetime, now: current, on: connection)
                }
                return redirect([("handoff", handoff.text)])
            } catch {
                return redirect([("error", error.code.rawValue)])
            }
        }
    }

    /// The name in Apple's `user` field (`{"name": {"firstName", "lastName"}, "email"}`), sent on
    /// the first authorization only.
    static func appleUserNames(_ user: String?) -> (given: String, family: String) {
        guard let user, let value = try? JSONDecoder().decode(JSONValue.self, from: Data(user.utf8)), let name = value["name"] else { return ("", "") }
        return (String((name["firstName"]?.stringValue ?? "").prefix(200)), String((name["lastName"]?.stringValue ?? "").prefix(200)))
    }

    // MARK: Guests and refreshes

    func guestGrant(_ form: FormBody, _ caller: Caller) throws(OAuthError) -> HTTPResponse {
        let asked = try ScopeList.parse(form["scope"])
        let scopes = asked.isEmpty ? Scope.guest.filter(caller.client.scopes.contains) : asked
        if let outside = scopes.first(where: { !Scope.guest.contains($0) || !caller.client.scopes.contains($0) }) {
            throw OAuthError(400, .invalidScope, "A guest token reads only what everybody may (catalogue:read content:read), not \(outside).")
        }
        try localLimits.take("guest", address: caller.address, limit: configuration.guestPerAddress, now: caller.now)
        let token = try issue {
            try keys.accessToken(
                subject: nil, scopes: scopes, clientId: caller.client.id, sessionId: nil, guest: true, lifetime: configuration.guestTokenLifetime,
                issuer: configuration.issuer, audience: configuration.audience, now: caller.now)
        }
        return Self.tokenResponse(access: token, refresh: nil, scopes: scopes, lifetime: configuration.guestTokenLifetime)
    }

    func refreshGrant(_ form: FormBody, _ caller: Caller) throws(OAuthError) -> HTTPResponse {
        Planted.spend(.refresh)
        guard let token = form["refresh_token"] else { throw OAuthError.invalidRequest("refresh_token is missing.") }
        let narrowed = try ScopeList.parse(form["scope"])
        try localLimits.take("refresh", address: caller.address, limit: configuration.refreshPerAddress, now: caller.now)
        var metadata = caller.identity.metadata
        metadata.service = "identity"
        let outcome = try database { [validator] connection in
            try Sessions.refresh(
                token, clientId: caller.client.id, narrowedTo: narrowed, lifetime: configuration.refreshTokenLifetime, now: caller.now, on: connection
            ) { personId, sessionId, connection in
                // A copy of the token is out there: the person is told, in the transaction that ends the
                // sign-in. Nobody known did it: no actor.
                let event = try NewEvent(RefreshTokenReused(personId: personId, signInId: sessionId.uuidString.lowercased()), metadata: metadata)
                _ = try EventStore.append([event], validator: validator, on: connection)
            }
        }
        switch outcome {
        case .refused:
            throw OAuthError.invalidGrant("The session is over: sign in again.")
        case .scopeNotGiven(let outside):
            throw OAuthError(400, .invalidScope, "The session was not given \(outside); the refresh token is still good.")
        case .reused:
            log?.warning("a used refresh token was presented again: its session is ended", metadata: ["address": .string(caller.address)])
            throw OAuthError.invalidGrant("The session is over: sign in again.")
        case .renewed(let session, let refresh):
            // A narrower scope for this access token only; the session keeps what it was given.
            let scopes = narrowed.isEmpty ? session.scopes : narrowed
            let access = try issue {
                try keys.accessToken(
                    subject: session.personId, scopes: scopes, clientId: session.clientId, sessionId: session.id, guest: false,
                    lifetime: configuration.accessTokenLifetime, issuer: configuration.issuer, audience: configuration.audience, now: caller.now)
            }
            return Self.tokenResponse(access: access, refresh: refresh.text, scopes: scopes, lifetime: configuration.accessTokenLifetime)
        }
    }

    // MARK: Signing in

    /// A new session for the person, the `signed_in` event in the same transaction (so the bell
    /// and the push follow), and the tokens.
    func signIn(_ personId: String, scopes: [Scope], method: String, _ caller: Caller) throws(OAuthError) -> HTTPResponse {
        let platform = caller.identity.metadata.origin.rawValue
        var metadata = caller.identity.metadata
        metadata.service = "identity"
        metadata.actor = personId
        let (session, refresh) = try database { [configuration, validator] connection in
            try connection.transaction { connection in
                let (session, refresh) = try Sessions.start(
                    personId: personId, clientId: caller.client.id, scopes: scopes, platform: platform, device: caller.device,
                    appVersion: caller.identity.metadata.appVersion, method: method, lifetime: configuration.refreshTokenLifetime, now: caller.now,
                    on: connection)
                let event = try NewEvent(
                    SignedIn(personId: personId, signInId: session.id.uuidString.lowercased(), platform: platform, device: caller.device),
                    metadata: metadata)
                _ = try EventStore.append([event], validator: validator, on: connection)
                return (session, refresh)
            }
        }
        let access = try issue {
            try keys.accessToken(
                subject: personId, scopes: scopes, clientId: caller.client.id, sessionId: session.id, guest: false,
                lifetime: configuration.accessTokenLifetime, issuer: configuration.issuer, audience: configuration.audience, now: caller.now)
        }
        return Self.tokenResponse(access: access, refresh: refresh.text, scopes: scopes, lifetime: configuration.accessTokenLifetime)
    }

    static func tokenResponse(access: String, refresh: String?, scopes: [Scope], lifetime: TimeInterval) -> HTTPResponse {
        var body: [String: JSONValue] = [
            "token_type": .string("Bearer"), "expires_in": .integer(Int64(lifetime)), "access_token": .string(access),
            "scope": .string(ScopeList.text(scopes)),
        ]
        if let refresh { body["refresh_token"] = .string(refresh) }
        return OAuthResponse.json(200, .object(body))
    }

    /// The scopes of `text`, each one the client was registered for; otherwise `invalid_scope`
    /// naming the first that is not (never silently dropped).
    func allowed(_ text: String?, for client: OAuthClient) throws(OAuthError) -> [Scope] {
        let scopes = try ScopeList.parse(text)
        if let outside = scopes.first(where: { !client.scopes.contains($0) }) {
            throw OAuthError(400, .invalidScope, "The client \(client.id) is not registered for the scope \(outside).")
        }
        return scopes
    }

    // MARK: Plumbing

    /// Runs `body` on a pooled connection of the calling (blocking) thread; a database failure is
    /// `503 temporarily_unavailable` or `500 server_error`, an `OAuthError` thrown inside passes.
    func database<T>(_ body: (PostgresConnection) throws -> T) throws(OAuthError) -> T {
        do {
            return try client.withConnectionBlocking(body)
        } catch let error as OAuthError {
            throw error
        } catch {
            throw Self.serverError(error)
        }
    }

    func issue(_ body: () throws -> String) throws(OAuthError) -> String {
        do {
            return try body()
        } catch {
            throw OAuthError(500, .serverError, "The token could not be signed; try again.", cause: "\(error)")
        }
    }

    static func serverError(_ error: any Error) -> OAuthError {
        if let error = error as? PostgresError, error.isTransient || error.isConnectionError || error.sqlState == .queryCanceled {
            return OAuthError(
                503, .temporarilyUnavailable, "The sign-in cannot be completed just now; try again in a moment.", headers: [("Retry-After", "1")],
                cause: "\(error)")
        }
        return OAuthError(500, .serverError, "The sign-in failed on our side; try again.", cause: "\(error)")
    }

    /// Every failure as its OAuth answer; a server error is logged with its cause, which the answer never shows.
    func answering(_ request: HTTPRequest, _ body: () throws(OAuthError) -> HTTPResponse) -> HTTPResponse {
        do {
            return try body()
        } catch {
            if error.status >= 500, let cause = error.cause {
                log?.error("the token endpoint failed", metadata: ["path": .string(request.path), "status": .int(error.status), "error": .string(cause)])
            }
            return error.response
        }
    }
}
