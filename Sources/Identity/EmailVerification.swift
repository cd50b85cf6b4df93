import Crypto
import Encodings
import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import Mail
import Mailer
import PostgresClient

/// Verifying an address by the mail sent to it. A change of address (`PATCH /v1/me` with `email`)
/// changes nothing until the link of the mail sent to the new address is followed; the account's
/// own unverified address is verified the same way (`POST /v1/me/email-verification` sends the
/// mail again, for the change waiting or the address itself).
///
/// The link is `<INBOX_PUBLIC_URL>/mail/verify?token=...`: a random 256-bit token, kept as its
/// SHA-256 only, good once for 24 hours, dead as soon as a newer one is sent or the account is
/// closed (a signature alone could not be taken back). `GET` shows a page with a button (link
/// checkers open links); its `POST` verifies: the address becomes the account's, verified, the
/// contact's address follows when it was the old one, and `email_changed` is appended (the bell
/// and a push on the person's devices say so). Mails are limited per account (`limit`, 429).
public struct EmailVerification: Sendable {
    static let path = "/mail/verify"
    static let lifetime: TimeInterval = 86_400

    /// `<public URL>/mail/verify`.
    let base: String
    let limit: AttemptLimit
    let limits = RateLimits()

    /// `publicURL`: where the API is reached from the internet (`INBOX_PUBLIC_URL`).
    public init(publicURL: String, limit: AttemptLimit = AttemptLimit(3, per: 3600)) {
        base = (publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL) + Self.path
        self.limit = limit
    }

    /// One of the account's mails, or `429`.
    func take(_ personId: String, now: Date, client: PostgresClient) throws {
        try limits.takeForAccount("verification-mail", personId, limit: limit, now: now, client: client, tooMany: "Too many verification mails for this account")
    }

    /// Starts verifying `email` for `personId` in the caller's transaction: a new token (the older
    /// one dies) and its mail, in `language`. Returns when the link expires.
    @discardableResult
    func start(_ personId: String, email: String, language: Language, now: Date, on connection: PostgresConnection) throws -> Date {
        let secret = OpaqueSecret.generate()
        let expires = now.addingTimeInterval(Self.lifetime)
        _ = try connection.query(
            """
            INSERT INTO identity_email_verifications (person_id, email, digest, expires_at) VALUES ($1, $2, $3, $4)
            ON CONFLICT (person_id) DO UPDATE SET email = excluded.email, digest = excluded.digest, expires_at = excluded.expires_at,
                created_at = clock_timestamp()
            """, personId, email, secret.digest, expires)
        try TransactionalMail.queueVerification(
            personId: personId, recipient: email, language: language, link: base + "?token=" + secret.text, expiresAt: expires, on: connection)
        return expires
    }

    /// The language of `personId`'s mail: the contact's, else what the request accepts.
    static func language(_ personId: String, _ context: RequestContext, on connection: PostgresConnection) throws -> Language {
        try Contacts.get(personId: personId, on: connection)?.language ?? Language.negotiate(context.request.header("Accept-Language"))
    }

    /// The address waiting for its link, and when the link expires.
    static func pending(_ personId: String, now: Date, on connection: PostgresConnection) throws -> (email: String, expiresAt: Date)? {
        try connection.query(
            "SELECT email, expires_at FROM identity_email_verifications WHERE person_id = $1 AND expires_at > $2", personId, now
        ).first.map { (try $0.decode(String.self, "email"), try $0.decode(Date.self, "expires_at")) }
    }

    public func routes(client: PostgresClient, validator: EventValidator?, now: @escaping @Sendable () -> Date = { Date() }) -> [Route] {
        let query = [QueryParameter("token", Schema.string(maximumLength: 100), "The token of the verification mail's link.")]
        return [
            Route(
                .post, "/v1/me/email-verification", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: .noContent("Sends the verification mail again: for the change of address waiting, or the account's unverified address.")
            ) { context in
                let personId = context.token?.subject ?? ""
                let (account, pending) = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in
                    (try Accounts.find(personId: personId, on: connection), try Self.pending(personId, now: now(), on: connection))
                }
                guard let account else { throw MeRoutes.noAccount }
                guard pending != nil || !account.emailVerified else {
                    throw APIError(status: 409, code: APIError.Code("already_verified"), detail: "The address is verified, and no change of it waits.")
                }
                try take(personId, now: now(), client: client)
                try client.withConnectionBlocking { connection in
                    try connection.transaction { connection in
                        let language = try Self.language(personId, context, on: connection)
                        // A change waiting since the read above, or the address itself.
                        let email = try Self.pending(personId, now: now(), on: connection)?.email ?? account.email
                        try start(personId, email: email, language: language, now: now(), on: connection)
                    }
                }
                return HTTPResponse(status: 204)
            },
            Route(
                .get, Self.path, access: .open,
                describedAs: RouteDescription(
                    "A page asking to confirm the address of a verification mail (changes nothing: link checkers open links).", query: query,
                    responses: [200: UnsubscribeRoutes.html, 400: UnsubscribeRoutes.html])
            ) { context in
                let language = Language.negotiate(context.request.header("Accept-Language"))
                guard let (_, email) = try Self.find(context, now: now(), client: client) else { return Self.invalid(language) }
                let action = HTML.escape(Self.path + "?token=" + (context.query("token") ?? ""))
                return UnsubscribeRoutes.page(
                    language, status: 200, heading: Texts.words(Texts.confirm, language).replacingOccurrences(of: "%@", with: HTML.escape(email)),
                    body: "<form method=\"post\" action=\"\(action)\"><button type=\"submit\">\(Texts.words(Texts.button, language))</button></form>")
            },
            Route(
                .post, Self.path, access: .open,
                describedAs: RouteDescription(
                    "Verifies the address of a verification mail's link: a change of address takes effect (email_changed).", query: query,
                    responses: [200: UnsubscribeRoutes.html, 400: UnsubscribeRoutes.html, 409: UnsubscribeRoutes.html])
            ) { context in
                let language = Language.negotiate(context.request.header("Accept-Language"))
                guard let token = context.query("token"), let digest = Self.digest(token) else { return Self.invalid(language) }
                var metadata = EventMetadata(origin: .web, correlationId: context.requestId, service: "identity")
                let outcome = try client.withConnectionBlocking { connection in
                    try connection.transaction { connection -> Outcome in
                        guard let row = try connection.query(
                            "DELETE FROM identity_email_verifications WHERE digest = $1 AND expires_at > $2 RETURNING person_id, email", digest, now()
                        ).first else { return .invalid }
                        let personId = try row.decode(String.self, "person_id")
                        let email = try row.decode(String.self, "email")
                        guard let account = try connection.query(
                            "SELECT email FROM identity_accounts WHERE person_id = $1 FOR UPDATE", personId
                        ).first.map({ try $0.decode(String.self, "email") }) else { return .invalid }
                        guard account.lowercased() != email.lowercased() else {
                            _ = try connection.query("UPDATE identity_accounts SET email_verified = true, updated_at = $2 WHERE person_id = $1", personId, now())
                            return .verified(email)
                        }
                        if try Accounts.find(email: email, on: connection) != nil { return .taken }
                        do {
                            try connection.withSavepoint {
                                _ = try connection.query(
                                    "UPDATE identity_accounts SET email = $2, email_verified = true, updated_at = $3 WHERE person_id = $1", personId, email, now())
                            }
                        } catch let error as PostgresError where error.sqlState == .uniqueViolation {
                            return .taken
                        }
                        // Mail follows the address when it went to the old one.
                        if let contact = try Contacts.get(personId: personId, on: connection), contact.address.address.lowercased() == account.lowercased(),
                            let address = try? MailAddress(email)
                        {
                            try Contacts.set(personId: personId, address: address, language: contact.language, on: connection)
                        }
                        metadata.actor = personId
                        _ = try EventStore.append([try NewEvent(EmailChanged(personId: personId), metadata: metadata)], validator: validator, on: connection)
                        return .verified(email)
                    }
                }
                switch outcome {
                case .invalid: return Self.invalid(language)
                case .taken: return UnsubscribeRoutes.page(language, status: 409, heading: Texts.words(Texts.taken, language), body: "")
                case .verified(let email):
                    return UnsubscribeRoutes.page(
                        language, status: 200, heading: Texts.words(Texts.done, language).replacingOccurrences(of: "%@", with: HTML.escape(email)), body: "")
                }
            },
        ]
    }

    enum Outcome {
        case invalid
        case taken
        case verified(String)
    }

    /// The SHA-256 of a token of the right form, nil for anything else.
    static func digest(_ token: String) -> Data? {
        guard token.utf8.count <= 100, OpaqueSecret.isWellFormed(token) else { return nil }
        return OpaqueSecret(text: token).digest
    }

    /// The person and address of a link still good.
    static func find(_ context: RequestContext, now: Date, client: PostgresClient) throws -> (String, String)? {
        guard let token = context.query("token"), let digest = digest(token) else { return nil }
        return try client.withConnectionBlocking { connection in
            try connection.query(
                "SELECT person_id, email FROM identity_email_verifications WHERE digest = $1 AND expires_at > $2", digest, now
            ).first.map { (try $0.decode(String.self, "person_id"), try $0.decode(String.self, "email")) }
        }
    }

    static func invalid(_ language: Language) -> HTTPResponse {
        UnsubscribeRoutes.page(language, status: 400, heading: Texts.words(Texts.invalid, language), body: "")
    }

    /// The pages' words, in the order of `Language.allCases`: en, nl, de, fr.
    enum Texts {
        static func words(_ texts: [String], _ language: Language) -> String { texts[Language.allCases.firstIndex(of: language) ?? 0] }

        static let confirm = [
            "Confirm that %@ is your address on Wristler?", "Bevestigen dat %@ je adres op Wristler is?",
            "Bestätigen, dass %@ deine Adresse bei Wristler ist?", "Confirmer que %@ est votre adresse sur Wristler ?",
        ]
        static let button = ["Confirm", "Bevestigen", "Bestätigen", "Confirmer"]
        static let done = [
            "%@ is confirmed as your address.", "%@ is bevestigd als je adres.", "%@ ist als deine Adresse bestätigt.",
            "%@ est confirmée comme votre adresse.",
        ]
        static let invalid = [
            "This link does not work: it was used, it expired, or a newer mail replaced it.",
            "Deze link werkt niet: hij is gebruikt, verlopen of door een nieuwere mail vervangen.",
            "Dieser Link funktioniert nicht: Er wurde benutzt, ist abgelaufen oder wurde durch eine neuere Mail ersetzt.",
            "Ce lien ne fonctionne pas : il a été utilisé, il a expiré, ou un mail plus récent l'a remplacé.",
        ]
        static let taken = [
            "Another account uses this address now.", "Een ander account gebruikt dit adres nu.", "Ein anderes Konto nutzt diese Adresse jetzt.",
            "Un autre compte utilise cette adresse maintenant.",
        ]
    }
}
