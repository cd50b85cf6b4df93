import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import Mail
import PostgresClient

/// The person's own account over the JSON:API (app guide, Scopes): `GET /v1/me` needs only a
/// signed-in token, `PATCH /v1/me` `account:write`, the sign-in list and signing out
/// `account-security:write`. Served by every API node (they read and write only PostgreSQL).
///
/// ```
/// GET /v1/me
/// {"data": {"type": "people", "id": "p1", "attributes": {"email": "anna@example.com", "emailVerified": true,
///   "givenName": "Anna", "familyName": "Jansen", "hasPassword": true, "secondFactor": false, "providers": ["apple"],
///   "language": "nl", "createdAt": "…", "createdWith": {"origin": "app:ios", "appVersion": "2.4.0"}}}}
/// ```
public enum MeRoutes {
    static let type = "people"
    static let sessionType = "sessions"
    /// The mail languages (`Contacts`).
    static let languages = ["en", "nl", "de", "fr"]

    /// `validator`: the catalogue's, for the `signed_out` event signing others out appends.
    /// `verification`: how a change of address is verified; without it `email` is not taken.
    public static func routes(
        client: PostgresClient, validator: EventValidator? = EventValidator(registry: InboxCatalogue.registry), verification: EmailVerification? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) -> [Route] {
        var attributes: [String: JSONValue] = [
            "givenName": Self.nameSchema, "familyName": Self.nameSchema, "language": Schema.choice(languages),
        ]
        if verification != nil { attributes["email"] = Schema.string(maximumLength: 254, pattern: Accounts.emailPattern) }
        return [
            Route(
                .get, "/v1/me", access: .signedIn(scope: nil),
                describedAs: RouteDescription("The signed-in person's account: names, address, how they sign in, where it was made.").returning(Self.person)
            ) { context in
                let personId = context.token?.subject ?? ""
                let (account, providers, language, pending) = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in
                    (try Accounts.find(personId: personId, on: connection), try Self.providers(personId, on: connection),
                     try Self.language(personId, on: connection), try EmailVerification.pending(personId, now: now(), on: connection))
                }
                guard let account else { throw Self.noAccount }
                return JSONAPI.response(.object(["data": Self.resource(account, providers: providers, language: language, pending: pending)]))
            },
            Route(
                .patch, "/v1/me", access: .signedIn(scope: .accountWrite),
                describedAs: RouteDescription(
                    "Changes the names and the language mail is written in; a new email starts its verification (the address changes when its link is followed).",
                    body: Schema.resourceDocument(type: type, attributes: attributes, required: [], id: false)).returning(Self.person)
            ) { context in
                let personId = context.token?.subject ?? ""
                let data = try context.resourceDocument()
                try AccountRoutes.requireType(data, type)
                if let id = data["id"]?.stringValue, id != personId {
                    throw APIError(status: 409, code: .idMismatch, detail: "The document's id is not yours.", source: .pointer("/data/id"))
                }
                let fields = try AccountRoutes.Fields(data, allowed: verification == nil ? ["givenName", "familyName", "language"] : ["givenName", "familyName", "language", "email"])
                let given = try Self.name(fields, "givenName")
                let family = try Self.name(fields, "familyName")
                let language = try fields.string("language")
                let email = try fields.string("email").map(Accounts.normalized)
                if let email, !Accounts.isPlausibleEmail(email) {
                    throw APIError(
                        status: 422, code: .invalidField, detail: "email is not an address (name@example.com, at most 254 bytes).",
                        source: .pointer("/data/attributes/email"))
                }
                if let language, !languages.contains(language) {
                    throw APIError(
                        status: 422, code: .invalidField, detail: "language is one of \(languages.joined(separator: ", ")).",
                        source: .pointer("/data/attributes/language"))
                }
                // A change of address costs one of the account's verification mails (429 past them).
                var changesEmail = false
                if let email, let verification {
                    let current = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in try Accounts.find(personId: personId, on: connection) }
                    guard let current else { throw Self.noAccount }
                    changesEmail = current.email.lowercased() != email.lowercased()
                    if changesEmail { try verification.take(personId, now: now(), client: client) }
                }
                let (account, providers, stored, pending) = try client.withConnectionBlocking { connection in
                    try connection.transaction { connection in
                        guard let account = try Accounts.find(personId: personId, on: connection) else { throw Self.noAccount }
                        if changesEmail, let email, let verification {
                            if let owner = try Accounts.find(email: email, on: connection), owner.personId != personId {
                                throw APIError(
                                    status: 409, code: APIError.Code("email_taken"), detail: "An account with this e-mail address exists.",
                                    source: .pointer("/data/attributes/email"))
                            }
                            try verification.start(
                                personId, email: email, language: try EmailVerification.language(personId, context, on: connection), now: now(), on: connection)
                        }
                        if given != nil || family != nil {
                            _ = try connection.query(
                                """
                                UPDATE identity_accounts SET given_name = coalesce($2, given_name), family_name = coalesce($3, family_name), updated_at = $4
                                WHERE person_id = $1
                                """, personId, given, family, now())
                        }
                        if let language, let language = Language(rawValue: language) {
                            // Mail goes on to the contact's address; without one, to the account's.
                            let contact = try Contacts.get(personId: personId, on: connection)
                            guard let address = contact?.address ?? (try? MailAddress(account.email)) else {
                                throw APIError(
                                    status: 422, code: .invalidField, detail: "The account's address cannot be mailed, so it has no mail language.",
                                    source: .pointer("/data/attributes/language"))
                            }
                            try Contacts.set(personId: personId, address: address, language: language, on: connection)
                        }
                        return (
                            try Accounts.find(personId: personId, on: connection) ?? account, try Self.providers(personId, on: connection),
                            try Self.language(personId, on: connection), try EmailVerification.pending(personId, now: now(), on: connection)
                        )
                    }
                }
                return JSONAPI.response(.object(["data": Self.resource(account, providers: providers, language: stored, pending: pending)]))
            },
            Route(
                .get, "/v1/me/sessions", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: RouteDescription("The sign-ins still open, newest first, never paged; `current` marks this one.").returning(Schema.list(Self.session, links: false))
            ) { context in
                let token = context.token
                let sessions = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in
                    try Self.openSessions(token?.subject ?? "", now: now(), on: connection)
                }
                return JSONAPI.response(.object(["data": .array(sessions.map { Self.resource($0, current: token?.sessionId) })]))
            },
            Route(
                .delete, "/v1/me/sessions/{id}", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: .noContent("Signs one session out (this one too): its refresh token is refused from now on.")
            ) { context in
                let personId = context.token?.subject ?? ""
                guard let id = UUID(uuidString: context.parameters["id"] ?? "") else { throw Self.noSession }
                let current = context.token?.sessionId.flatMap(UUID.init(uuidString:))
                let ended = try client.withConnectionBlocking { connection in
                    try connection.transaction { connection in
                        let ended = try connection.query(
                            """
                            UPDATE identity_sessions SET ended_at = $3, end_reason = 'signed_out' WHERE id = $1 AND person_id = $2 AND ended_at IS NULL
                            RETURNING id
                            """, id, personId, now()
                        ).map { try $0.decode(UUID.self, "id") }
                        // Signing this session out is the app's own sign-out: nothing to tell.
                        try Self.tell(personId, ended.filter { $0 != current }, context, validator, on: connection)
                        return ended.count
                    }
                }
                guard ended == 1 else { throw Self.noSession }
                return HTTPResponse(status: 204)
            },
            Route(
                .delete, "/v1/me/sessions", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: .noContent("Signs out every session but this one: their refresh tokens are refused from now on.")
            ) { context in
                let personId = context.token?.subject ?? ""
                let current = context.token?.sessionId.flatMap(UUID.init(uuidString:))
                try client.withConnectionBlocking { connection in
                    try connection.transaction { connection in
                        let ended = try connection.query(
                            """
                            UPDATE identity_sessions SET ended_at = $3, end_reason = 'signed_out_elsewhere'
                            WHERE person_id = $1 AND ended_at IS NULL AND ($2::uuid IS NULL OR id <> $2::uuid)
                            RETURNING id
                            """, personId, current, now()
                        ).map { try $0.decode(UUID.self, "id") }
                        try Self.tell(personId, ended, context, validator, on: connection)
                    }
                }
                return HTTPResponse(status: 204)
            },
        ]
    }

    /// At most 200 characters, none of them a control character (what `name` refuses).
    static let nameSchema = Schema.string(maximumLength: 200, pattern: "^[^\\u0000-\\u001F\\u007F-\\u009F]*$")

    /// `signed_out` in the same transaction as the sessions it ended, so the bell and the push
    /// (security: locked on) follow: somebody signed out of their other devices is told on them.
    static func tell(
        _ personId: String, _ ended: [UUID], _ context: RequestContext, _ validator: EventValidator?, on connection: PostgresConnection
    ) throws {
        guard !ended.isEmpty else { return }
        try append(SignedOut(personId: personId, signInIds: ended.map { $0.uuidString.lowercased() }.sorted()), by: personId, context, validator, on: connection)
    }

    /// A security event the person caused through the API, in the caller's transaction: from the
    /// app that asked (`origin`, `appVersion`), by the person, through the identity role.
    static func append(
        _ event: some CatalogueEvent, by personId: String, _ context: RequestContext, _ validator: EventValidator?, on connection: PostgresConnection
    ) throws {
        var metadata = context.identity.metadata
        metadata.service = "identity"
        metadata.actor = personId
        _ = try EventStore.append([try NewEvent(event, metadata: metadata)], validator: validator, on: connection)
    }

    static let noAccount = APIError(status: 404, code: .notFound, detail: "There is no account for this person.")
    static let noSession = APIError(status: 404, code: .notFound, detail: "There is no open session of yours with this id.")

    /// A name from the document: at most 200 characters (code points, as JSON Schema and PostgreSQL
    /// count them), no control characters; nil when absent.
    static func name(_ fields: AccountRoutes.Fields, _ key: String) throws(APIError) -> String? {
        guard let value = try fields.string(key) else { return nil }
        guard value.unicodeScalars.count <= 200, !value.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw APIError(
                status: 422, code: .invalidField, detail: "\(key) is at most 200 characters, without control characters.",
                source: .pointer("/data/attributes/\(key)"))
        }
        return value.trimmingCharacters(in: .whitespaces)
    }

    /// ISO 8601 in UTC with microseconds, as every date of the API.
    static func timestamp(_ date: Date) -> String { date.postgresText ?? "" }

    static func providers(_ personId: String, on connection: PostgresConnection) throws -> [String] {
        try connection.query("SELECT DISTINCT provider FROM identity_social_links WHERE person_id = $1 ORDER BY 1", personId).map {
            try $0.decode(String.self, "provider")
        }
    }

    static func language(_ personId: String, on connection: PostgresConnection) throws -> String? {
        try Contacts.get(personId: personId, on: connection)?.language.rawValue
    }

    /// `pending`: a change of address waiting for its link (`emailChange`, null without).
    static func resource(_ account: Account, providers: [String], language: String?, pending: (email: String, expiresAt: Date)? = nil) -> JSONValue {
        var createdWith: [String: JSONValue] = ["origin": .string(account.origin)]
        createdWith["appVersion"] = account.appVersion.map(JSONValue.string) ?? .null
        return .object([
            "type": .string(type), "id": .string(account.personId),
            "attributes": .object([
                "email": .string(account.email), "emailVerified": .bool(account.emailVerified), "givenName": .string(account.givenName),
                "familyName": .string(account.familyName), "hasPassword": .bool(account.passwordHash != nil),
                "secondFactor": .bool(account.hasSecondFactor), "providers": .array(providers.map(JSONValue.string)),
                "language": language.map(JSONValue.string) ?? .null, "createdAt": .string(Self.timestamp(account.createdAt)),
                "createdWith": .object(createdWith),
                "emailChange": pending.map { .object(["email": .string($0.email), "expiresAt": .string(Self.timestamp($0.expiresAt))]) } ?? .null,
            ]),
            "links": .object(["self": .string("/v1/me")]),
        ])
    }

    /// An open sign-in as the list shows it.
    struct OpenSession {
        var id: UUID
        var createdAt: Date
        var lastUsedAt: Date
        var platform: String
        var appVersion: String?
        var method: String?
        var device: String?
    }

    /// The sign-in list shows at most this many, the newest: a person who signed in more often
    /// than that in 90 days ends the rest with `DELETE /v1/me/sessions`.
    static let maximumListed = 100

    static func openSessions(_ personId: String, now: Date, on connection: PostgresConnection) throws -> [OpenSession] {
        try connection.query(
            """
            SELECT id, created_at, refreshed_at, platform, app_version, method, device FROM identity_sessions
            WHERE person_id = $1 AND ended_at IS NULL AND expires_at > $2 ORDER BY created_at DESC, id LIMIT $3
            """, personId, now, maximumListed
        ).map { row in
            OpenSession(
                id: try row.decode(UUID.self, "id"), createdAt: try row.decode(Date.self, "created_at"),
                lastUsedAt: try row.decode(Date.self, "refreshed_at"), platform: try row.decode(String.self, "platform"),
                appVersion: try row.decode(String?.self, "app_version"), method: try row.decode(String?.self, "method"),
                device: try row.decode(String?.self, "device"))
        }
    }

    static func resource(_ session: OpenSession, current: String?) -> JSONValue {
        let id = session.id.uuidString.lowercased()
        return .object([
            "type": .string(sessionType), "id": .string(id),
            "attributes": .object([
                "signedInAt": .string(Self.timestamp(session.createdAt)), "lastUsedAt": .string(Self.timestamp(session.lastUsedAt)),
                "platform": .string(session.platform), "appVersion": session.appVersion.map(JSONValue.string) ?? .null,
                "method": session.method.map(JSONValue.string) ?? .null, "device": session.device.map(JSONValue.string) ?? .null,
                "current": .bool(current?.lowercased() == id),
            ]),
        ])
    }
}

extension MeRoutes {
    /// The person's own account as `resource` writes it.
    static let person = Schema.single(
        Schema.resource(
            "Person", type: type,
            attributes: [
                "email": Schema.text, "emailVerified": Schema.boolean, "givenName": Schema.text, "familyName": Schema.text, "hasPassword": Schema.boolean,
                "secondFactor": Schema.boolean, "providers": Schema.array(Schema.choice(["apple", "google"])), "language": Schema.nullable(Schema.text),
                "createdAt": Schema.timestamp, "createdWith": Schema.record(["origin": Schema.text, "appVersion": Schema.nullable(Schema.text)]),
                "emailChange": Schema.nullable(Schema.record(["email": Schema.text, "expiresAt": Schema.timestamp])),
            ], links: true))
    static let session = Schema.resource(
        "Session", type: sessionType,
        attributes: [
            "signedInAt": Schema.timestamp, "lastUsedAt": Schema.timestamp, "platform": Schema.text, "appVersion": Schema.nullable(Schema.text),
            "method": Schema.nullable(Schema.text), "device": Schema.nullable(Schema.text), "current": Schema.boolean,
        ])
}
