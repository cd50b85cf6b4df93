import Crypto
import Encodings
import Foundation
import HTTPServer
import Identity
import InboxAPI
import InboxDomain
import Threads

/// Apple and Google as the sign-in sees them, on a local socket: each publishes a JWKS of RSA keys
/// (`/apple/keys`, `/google/keys`, with `Cache-Control: max-age`) and signs ID tokens with them
/// (RS256, `kid`, the claims each provider puts in: Apple's `email_verified` as a string, Google's
/// names); Apple's token endpoint (`/apple/token`) exchanges authorization codes as Apple does,
/// checking the client secret our team key signed (ES256, `iss` the team, `sub` the client id).
final class ProviderServer: Sendable {
    static let appleBundle = "eu.wristler.app"
    static let appleServices = "eu.wristler.web"
    static let googleClient = "1234-ios.apps.googleusercontent.com"
    static let teamId = "TEAMID1234"
    static let appleKeyId = "SIWAKEY123"

    let apple: RS256PrivateKey
    let google: RS256PrivateKey
    /// Our Sign in with Apple key, whose public half Apple holds.
    let appleClientKey: ES256PrivateKey
    private let server: HTTPServer
    private let state: Locked<State>

    struct State {
        var keyFetches: [String: Int] = [:]
        var exchanges: [[String: String]] = []
        /// The revocations Apple took (`/apple/revoke`), and how many to refuse with a 503 first.
        var revocations: [[String: String]] = []
        var revocationsToRefuse = 0
        /// Keys published besides the signing one, by provider (a rotation).
        var extraKeys: [String: [(kid: String, key: RS256PrivateKey)]] = [:]
    }

    /// Made once per test run: RSA keys take a while to make, and every social test starts a server.
    private static let keys: (apple: RS256PrivateKey, google: RS256PrivateKey)? = try? (RS256PrivateKey.generate(), RS256PrivateKey.generate())

    init() throws {
        guard let keys = Self.keys else { throw CryptoError("Cannot make the providers' RSA keys.") }
        (apple, google) = keys
        appleClientKey = try ES256PrivateKey.generate()
        let state = Locked(State())
        self.state = state
        let jwks: @Sendable (String, String, RS256PrivateKey) throws -> [UInt8] = { provider, kid, key in
            let extra = state.withLock { $0.extraKeys[provider] ?? [] }
            var keys: [JSONValue] = []
            for (kid, key) in [(kid, key)] + extra.map({ ($0.kid, $0.key) }) {
                let (n, e) = try key.publicKey.components
                keys.append(
                    .object([
                        "kty": .string("RSA"), "kid": .string(kid), "use": .string("sig"), "alg": .string("RS256"),
                        "n": .string(Base64URL.encode(n)), "e": .string(Base64URL.encode(e)),
                    ]))
            }
            return JSONAPI.bytes(.object(["keys": .array(keys)]))
        }
        let (apple, google, clientKey) = (apple, google, try appleClientKey.publicKey)
        server = try HTTPServer(configuration: .init(port: 0, threads: 1, blockingThreads: 2)) { request in
            do {
                switch (request.method, request.path) {
                case (.get, "/apple/keys"), (.get, "/google/keys"):
                    let provider = request.path == "/apple/keys" ? "apple" : "google"
                    state.withLock { $0.keyFetches[provider, default: 0] += 1 }
                    let body = try jwks(provider, "\(provider)-1", provider == "apple" ? apple : google)
                    return HTTPResponse(status: 200, headers: [("Content-Type", "application/json"), ("Cache-Control", "public, max-age=3600")], body: body)
                case (.post, "/apple/token"):
                    let form = try FormBody(request.body, limits: ["client_secret": 2048])
                    state.withLock { $0.exchanges.append(form.fields) }
                    guard let secret = form["client_secret"], let clientId = form["client_id"],
                        Self.clientSecretIsValid(secret, clientId: clientId, key: clientKey)
                    else { return Self.json(400, ["error": .string("invalid_client")]) }
                    guard form["grant_type"] == "authorization_code", let code = form["code"], code.hasPrefix("good-") else {
                        return Self.json(400, ["error": .string("invalid_grant")])
                    }
                    return Self.json(200, ["access_token": .string("a"), "refresh_token": .string("apple-refresh-for-\(code)"), "token_type": .string("Bearer")])
                case (.post, "/apple/revoke"):
                    // Apple's revoke endpoint: the client secret as for the token endpoint; 200 with no body.
                    let form = try FormBody(request.body, limits: ["client_secret": 2048, "token": 2048])
                    guard let secret = form["client_secret"], let clientId = form["client_id"],
                        Self.clientSecretIsValid(secret, clientId: clientId, key: clientKey)
                    else { return Self.json(400, ["error": .string("invalid_client")]) }
                    guard form["token"] != nil else { return Self.json(400, ["error": .string("invalid_request")]) }
                    let refused = state.withLock { state -> Bool in
                        if state.revocationsToRefuse > 0 {
                            state.revocationsToRefuse -= 1
                            return true
                        }
                        state.revocations.append(form.fields)
                        return false
                    }
                    return refused ? HTTPResponse(status: 503) : HTTPResponse(status: 200)
                default:
                    return HTTPResponse(status: 404)
                }
            } catch {
                return HTTPResponse(status: 500, contentType: "text/plain", body: "\(error)")
            }
        }
    }

    func stop() { server.shutdown(gracePeriod: .seconds(1)) }

    func url(_ path: String) -> String { "http://127.0.0.1:\(server.port)\(path)" }

    var keyFetches: [String: Int] { state.withLock { $0.keyFetches } }
    var exchanges: [[String: String]] { state.withLock { $0.exchanges } }
    var revocations: [[String: String]] { state.withLock { $0.revocations } }

    /// Apple answers the next `count` revocations with a 503.
    func refuseRevocations(_ count: Int) { state.withLock { $0.revocationsToRefuse = count } }

    /// Publishes `key` as `kid` of `provider` besides its signing key (a rotation in progress).
    func publish(_ key: RS256PrivateKey, kid: String, for provider: String) {
        state.withLock { $0.extraKeys[provider, default: []].append((kid, key)) }
    }

    /// An ID token as the provider makes one. `claims` are added to (or replace) the usual ones.
    func idToken(
        _ provider: SocialProvider, subject: String, audience: String? = nil, nonce: String?, email: String? = nil, emailVerified: Bool = true,
        expiresIn: TimeInterval = 600, claims extra: [String: JSONValue] = [:], signedBy key: RS256PrivateKey? = nil, kid: String? = nil
    ) throws -> String {
        let now = Int64(Date().timeIntervalSince1970)
        var claims: [String: JSONValue] = [
            "iss": .string(provider == .apple ? "https://appleid.apple.com" : "https://accounts.google.com"),
            "aud": .string(audience ?? (provider == .apple ? Self.appleBundle : Self.googleClient)), "sub": .string(subject),
            "iat": .integer(now), "exp": .integer(now + Int64(expiresIn)),
            // Each token the providers make differs (Google's carry a jti); used once, it is remembered by its digest.
            "jti": .string(UUID().uuidString),
        ]
        if let nonce { claims["nonce"] = .string(nonce) }
        if let email {
            claims["email"] = .string(email)
            // Apple writes it as a string, Google as a boolean.
            claims["email_verified"] = provider == .apple ? .string(emailVerified ? "true" : "false") : .bool(emailVerified)
        }
        if provider == .apple { claims["nonce_supported"] = .bool(true) }
        claims.merge(extra) { $1 }
        let header = Base64URL.encode(JSONAPI.bytes(.object(["alg": .string("RS256"), "kid": .string(kid ?? "\(provider.rawValue)-1")])))
        let payload = Base64URL.encode(JSONAPI.bytes(.object(claims)))
        let signature = try (key ?? (provider == .apple ? apple : google)).sign(Array("\(header).\(payload)".utf8))
        return "\(header).\(payload).\(Base64URL.encode(signature))"
    }

    static func json(_ status: Int, _ object: [String: JSONValue]) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", "application/json")], body: JSONAPI.bytes(.object(object)))
    }

    /// Apple's check of a client secret: ES256 by the team's key, `iss` the team, `sub` the client,
    /// `aud` Apple, not expired.
    static func clientSecretIsValid(_ secret: String, clientId: String, key: ES256PublicKey) -> Bool {
        let parts = secret.split(separator: ".")
        guard parts.count == 3, let signature = Base64URL.decode(String(parts[2])), let payload = Base64URL.decode(String(parts[1])),
            key.verify(signature: signature, data: Array("\(parts[0]).\(parts[1])".utf8)),
            let claims = try? JSONDecoder().decode(JSONValue.self, from: Data(payload))
        else { return false }
        return claims["iss"]?.stringValue == teamId && claims["sub"]?.stringValue == clientId
            && claims["aud"]?.stringValue == "https://appleid.apple.com" && (claims["exp"]?.doubleValue ?? 0) > Date().timeIntervalSince1970
    }
}
