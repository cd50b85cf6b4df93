import Crypto
import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import PostgresClient

/// The person's own second factor and recovery codes (`account-security:write`), beside `/v1/me`:
///
/// - `POST /v1/me/second-factor`: starts enrolling: a new secret as an `otpauth://` URI (and the
///   secret in base32, for typing), good for ten minutes; `409` while one is on.
/// - `POST /v1/me/second-factor/confirmation` with `code`: a code from the authenticator turns it
///   on and answers ten recovery codes, shown this once; five wrong codes end the enrolment.
/// - `POST /v1/me/second-factor/removal` with `code` (the authenticator's or a recovery code):
///   turns it off.
/// - `POST /v1/me/recovery-codes` with `code`: ten new recovery codes, the old ones dead.
///
/// Turning it on or off is `second_factor_enabled` / `second_factor_disabled` in the log, in the
/// same transaction (the bell and a push follow). Every code is counted against the account's
/// code limit (`429` with `Retry-After`), as the sign-in's second step is.
public enum SecondFactorRoutes {
    static let type = "second-factors"
    static let enrolmentLifetime: TimeInterval = 600
    static let enrolmentAttempts = 5

    public static func routes(
        client: PostgresClient, secrets: SecretsKey?, validator: EventValidator?, codeLimit: AttemptLimit = IdentityConfiguration().signInPerAccount,
        now: @escaping @Sendable () -> Date = { Date() }
    ) -> [Route] {
        let limits = RateLimits()
        let codeBody = Schema.resourceDocument(
            type: type, attributes: ["code": Schema.string(maximumLength: 64, pattern: "^[^\\u0000-\\u001F\\u007F-\\u009F]+$")], required: ["code"],
            id: false)
        /// The code of the document, one attempt of the account's code limit taken.
        @Sendable func code(_ context: RequestContext, _ personId: String) throws -> String {
            let data = try context.resourceDocument()
            try AccountRoutes.requireType(data, type)
            let fields = try AccountRoutes.Fields(data, allowed: ["code"])
            guard let code = try fields.string("code"), !code.isEmpty, code.unicodeScalars.count <= 64 else {
                throw APIError(
                    status: 422, code: .missingField, detail: "code is required: the authenticator's six digits or a recovery code.",
                    source: .pointer("/data/attributes/code"))
            }
            try limits.takeForAccount("code", personId, limit: codeLimit, now: now(), client: client, tooMany: "Too many codes tried for this account")
            return code
        }
        /// `body` in one transaction once the document's code is the account's current TOTP code
        /// or an unused recovery code (spent then); `409` when no second factor is on.
        @Sendable func withCurrentCode<T>(_ context: RequestContext, _ body: (String, PostgresConnection) throws -> T) throws -> T {
            let personId = context.token?.subject ?? ""
            let given = try code(context, personId)
            return try client.withConnectionBlocking { connection in
                try connection.transaction { connection in
                    guard let account = try Accounts.find(personId: personId, on: connection) else { throw MeRoutes.noAccount }
                    guard account.hasSecondFactor else {
                        throw APIError(status: 409, code: APIError.Code("second_factor_off"), detail: "No second factor is on.")
                    }
                    guard try Accounts.acceptSecondFactor(personId: personId, otp: given, secrets: secrets, now: now(), on: connection) else {
                        throw Self.wrongCode
                    }
                    return try body(personId, connection)
                }
            }
        }
        return [
            Route(
                .post, "/v1/me/second-factor", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: RouteDescription(
                    "Starts enrolling a second factor: the otpauth:// URI for the authenticator, for ten minutes.",
                    responses: [201: .document(Schema.document)]).returning(Self.document)
            ) { context in
                let personId = context.token?.subject ?? ""
                let secret = TOTP.newSecret()
                let account = try client.withConnectionBlocking { connection in
                    try connection.transaction { connection -> Account in
                        guard let account = try Accounts.find(personId: personId, on: connection) else { throw MeRoutes.noAccount }
                        guard !account.hasSecondFactor else {
                            throw APIError(
                                status: 409, code: APIError.Code("second_factor_enabled"),
                                detail: "A second factor is on: turn it off first (POST /v1/me/second-factor/removal).")
                        }
                        let stored = try secrets.map { try $0.seal(secret, for: Self.purpose(personId)) } ?? secret
                        _ = try connection.query(
                            """
                            INSERT INTO identity_totp_pending (person_id, secret, sealed, attempts_left, expires_at) VALUES ($1, $2, $3, $4, $5)
                            ON CONFLICT (person_id) DO UPDATE SET secret = excluded.secret, sealed = excluded.sealed,
                                attempts_left = excluded.attempts_left, expires_at = excluded.expires_at
                            """, personId, Data(stored), secrets != nil, enrolmentAttempts, now().addingTimeInterval(enrolmentLifetime))
                        return account
                    }
                }
                let totp = TOTP(secret: secret)
                return JSONAPI.response(
                    status: 201,
                    .object([
                        "data": .object([
                            "type": .string(type), "id": .string(context.person),
                            "attributes": .object([
                                "enabled": .bool(false), "otpauthUri": .string(totp.uri(account: account.email)), "secret": .string(Base32.encode(secret)),
                                "expiresAt": .string(MeRoutes.timestamp(now().addingTimeInterval(enrolmentLifetime))),
                            ]),
                        ])
                    ]))
            },
            Route(
                .post, "/v1/me/second-factor/confirmation", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: RouteDescription("Turns the second factor on with a code from the authenticator; answers the recovery codes, once.", body: codeBody).returning(Self.document)
            ) { context in
                let personId = context.token?.subject ?? ""
                let given = try code(context, personId)
                let outcome = try client.withConnectionBlocking { connection in
                    try connection.transaction { connection -> Result<[String], APIError> in
                        guard let row = try connection.query(
                            """
                            UPDATE identity_totp_pending SET attempts_left = attempts_left - 1
                            WHERE person_id = $1 AND expires_at > $2 AND attempts_left > 0 RETURNING secret, sealed, attempts_left
                            """, personId, now()
                        ).first else {
                            return .failure(APIError(
                                status: 409, code: APIError.Code("no_enrolment"),
                                detail: "No enrolment is waiting (none started, it expired, or its attempts are spent): start again."))
                        }
                        var secret = Array(try row.decode(Data.self, "secret"))
                        if try row.decode(Bool.self, "sealed") {
                            guard let secrets else { throw Accounts.SecretsUnavailable(description: "The enrolment is sealed; INBOX_SECRETS_KEY_FILE is not set here.") }
                            secret = try secrets.open(secret, for: Self.purpose(personId))
                        }
                        guard TOTP(secret: secret).match(given, at: now(), after: 0) != nil else {
                            let left = try row.decode(Int.self, "attempts_left")
                            if left == 0 { _ = try connection.query("DELETE FROM identity_totp_pending WHERE person_id = $1", personId) }
                            return .failure(APIError(
                                status: 422, code: .invalidField, detail: "The code is not the authenticator's current one.",
                                source: .pointer("/data/attributes/code"), meta: ["attemptsRemaining": .integer(Int64(left))]))
                        }
                        _ = try connection.query("DELETE FROM identity_totp_pending WHERE person_id = $1", personId)
                        let codes = try Accounts.enableSecondFactor(personId: personId, secret: secret, secrets: secrets, now: now(), on: connection)
                        try MeRoutes.append(SecondFactorEnabled(personId: personId), by: personId, context, validator, on: connection)
                        return .success(codes)
                    }
                }
                let codes = try outcome.get()
                return JSONAPI.response(.object(["data": Self.resource(person: context.person, enabled: true, recoveryCodes: codes)]))
            },
            Route(
                .post, "/v1/me/second-factor/removal", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: RouteDescription("Turns the second factor off, with the authenticator's current code or a recovery code.", body: codeBody).returning(Self.document)
            ) { context in
                try withCurrentCode(context) { personId, connection in
                    _ = try Accounts.disableSecondFactor(personId: personId, on: connection)
                    try MeRoutes.append(SecondFactorDisabled(personId: personId), by: personId, context, validator, on: connection)
                }
                return JSONAPI.response(.object(["data": Self.resource(person: context.person, enabled: false, recoveryCodes: nil)]))
            },
            Route(
                .post, "/v1/me/recovery-codes", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: RouteDescription("Ten new recovery codes, shown once; the old ones stop working. Needs a current code.", body: codeBody).returning(Self.document)
            ) { context in
                let codes = try withCurrentCode(context) { personId, connection in
                    let codes = try Accounts.replaceRecoveryCodes(personId: personId, on: connection)
                    try MeRoutes.append(RecoveryCodesRenewed(personId: personId), by: personId, context, validator, on: connection)
                    return codes
                }
                return JSONAPI.response(.object(["data": Self.resource(person: context.person, enabled: true, recoveryCodes: codes)]))
            },
        ]
    }

    static let wrongCode = APIError(
        status: 422, code: .invalidField, detail: "The code is neither the authenticator's current one nor an unused recovery code.",
        source: .pointer("/data/attributes/code"))

    /// What seals a pending secret: the table and the person.
    static func purpose(_ personId: String) -> String { "identity_totp_pending/\(personId)" }

    /// The person's second factor (one per person: its id is theirs).
    static func resource(person: String, enabled: Bool, recoveryCodes: [String]?) -> JSONValue {
        var attributes: [String: JSONValue] = ["enabled": .bool(enabled)]
        if let recoveryCodes { attributes["recoveryCodes"] = .array(recoveryCodes.map(JSONValue.string)) }
        return .object(["type": .string(type), "id": .string(person), "attributes": .object(attributes)])
    }

    /// The documents of its answers: an enrolment's secret and URI, or the state and new codes.
    static let document = Schema.single(
        Schema.resource(
            "SecondFactor", type: type,
            attributes: [
                "enabled": Schema.boolean, "otpauthUri": Schema.text, "secret": Schema.text, "expiresAt": Schema.timestamp,
                "recoveryCodes": Schema.array(Schema.text),
            ], optional: ["otpauthUri", "secret", "expiresAt", "recoveryCodes"]))

    /// An account's limit as the API's `429`, `detail` saying what was tried too often.
    static func limited(_ detail: String, _ body: () throws -> Void) throws {
        do {
            try body()
        } catch let error as OAuthError where error.status == 429 {
            throw APIError(
                status: 429, code: .tooManyRequests, detail: "\(detail); try again later.",
                headers: error.headers.filter { $0.name == "Retry-After" })
        }
    }
}
