import Crypto
import Foundation
import PostgresClient

/// An account as the identity role keeps it (`identity_accounts`).
public struct Account: Sendable, Hashable {
    public var personId: String
    public var email: String
    public var emailVerified: Bool
    /// Argon2id PHC string; nil: the account has no password (made by Apple or Google).
    public var passwordHash: String?
    public var givenName: String
    public var familyName: String
    public var blockedAt: Date?
    /// Whether a TOTP authenticator is set: the password step then asks for a code.
    public var hasSecondFactor: Bool
    /// Where and when it was made: `app:ios`, `app:android`, `web`, `api` (or `service:<name>`),
    /// and the app's version when an app made it.
    public var origin: String = "api"
    public var appVersion: String? = nil
    public var createdAt: Date = Date(timeIntervalSince1970: 0)

    public var isBlocked: Bool { blockedAt != nil }
}

/// What a new account is made of.
public struct NewAccount: Sendable {
    public var personId: String?
    public var email: String
    public var emailVerified: Bool
    public var passwordHash: String?
    public var givenName: String
    public var familyName: String
    public var origin: String
    public var appVersion: String?

    public init(
        personId: String? = nil, email: String, emailVerified: Bool = false, passwordHash: String? = nil, givenName: String = "", familyName: String = "",
        origin: String = "api", appVersion: String? = nil
    ) {
        self.appVersion = appVersion
        self.personId = personId
        self.email = email
        self.emailVerified = emailVerified
        self.passwordHash = passwordHash
        self.givenName = givenName
        self.familyName = familyName
        self.origin = origin
    }
}

public enum AccountError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Another account has the address (in any letter case).
    case emailTaken
    /// Another account has the person id.
    case personIdTaken
    case notFound
    case invalid(String)

    public var description: String {
        switch self {
        case .emailTaken: "An account with this e-mail address exists."
        case .personIdTaken: "An account with this person id exists."
        case .notFound: "There is no such account."
        case .invalid(let reason): reason
        }
    }
}

/// The accounts' table and what belongs to an account: its authenticator, recovery codes and
/// linked Apple and Google sign-ins. Every function runs on the caller's connection, inside the
/// caller's transaction when there is one.
public enum Accounts {
    static let columns = """
        a.person_id, a.email, a.email_verified, a.password_hash, a.given_name, a.family_name, a.blocked_at, a.origin, a.app_version, a.created_at,
        EXISTS (SELECT 1 FROM identity_totp t WHERE t.person_id = a.person_id) AS has_second_factor
        """

    static func decode(_ row: PostgresRow) throws -> Account {
        Account(
            personId: try row.decode(String.self, "person_id"), email: try row.decode(String.self, "email"),
            emailVerified: try row.decode(Bool.self, "email_verified"), passwordHash: try row.decode(String?.self, "password_hash"),
            givenName: try row.decode(String.self, "given_name"), familyName: try row.decode(String.self, "family_name"),
            blockedAt: try row.decode(Date?.self, "blocked_at"), hasSecondFactor: try row.decode(Bool.self, "has_second_factor"),
            origin: try row.decode(String.self, "origin"), appVersion: try row.decode(String?.self, "app_version"),
            createdAt: try row.decode(Date.self, "created_at"))
    }

    /// The address as accounts are keyed: without surrounding spaces, compared in any letter case.
    public static func normalized(_ email: String) -> String { email.trimmingCharacters(in: .whitespaces) }

    /// Whether `email` is plausibly an address: one `@` with something either side, no spaces or
    /// control characters, at most 254 bytes (RFC 5321's path limit). Not a full RFC 5322 parser:
    /// the address is proven by the mail sent to it, not by its syntax.
    /// `isPlausibleEmail` (after `normalized`) as the OpenAPI document's pattern: no space or
    /// control byte, one `@` between two non-empty parts, the domain not starting or ending with a dot.
    public static let emailPattern =
        "^[ \\t]*[^\\u0000-\\u0020\\u007F@]+@[^\\u0000-\\u0020\\u007F@.]([^\\u0000-\\u0020\\u007F@]*[^\\u0000-\\u0020\\u007F@.])?[ \\t]*$"

    public static func isPlausibleEmail(_ email: String) -> Bool {
        let bytes = Array(email.utf8)
        guard (3...254).contains(bytes.count), !bytes.contains(where: { $0 <= 0x20 || $0 == 0x7F }) else { return false }
        let parts = email.split(separator: "@", omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && !parts[1].isEmpty && !parts[1].hasPrefix(".") && !parts[1].hasSuffix(".")
    }

    public static func find(email: String, on connection: PostgresConnection) throws -> Account? {
        try connection.query("SELECT \(columns) FROM identity_accounts a WHERE lower(a.email) = lower($1)", normalized(email)).first.map(decode)
    }

    public static func find(personId: String, on connection: PostgresConnection) throws -> Account? {
        try connection.query("SELECT \(columns) FROM identity_accounts a WHERE a.person_id = $1", personId).first.map(decode)
    }

    /// Makes the account; its person id is `account.personId` or a new UUID.
    public static func create(_ account: NewAccount, on connection: PostgresConnection) throws -> Account {
        let email = normalized(account.email)
        guard isPlausibleEmail(email) else { throw AccountError.invalid("The e-mail address is not one (name@example.com, at most 254 bytes).") }
        let personId = account.personId ?? UUID().uuidString.lowercased()
        guard (1...200).contains(personId.utf8.count), !personId.utf8.contains(0) else { throw AccountError.invalid("A person id is 1 to 200 bytes.") }
        do {
            // A savepoint: a refused insert leaves the caller's transaction usable.
            return try connection.withSavepoint {
                // A closed account's id is never given again: the log still names it.
                if try connection.query("SELECT 1 FROM identity_closed_accounts WHERE person_id = $1", personId).count > 0 {
                    throw AccountError.personIdTaken
                }
                _ = try connection.query(
                    """
                    INSERT INTO identity_accounts (person_id, email, email_verified, password_hash, given_name, family_name, origin, app_version)
                    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                    """, personId, email, account.emailVerified, account.passwordHash, String(account.givenName.prefix(200)),
                    String(account.familyName.prefix(200)), account.origin, account.appVersion.map { String($0.prefix(50)) })
                guard let made = try find(personId: personId, on: connection) else { throw AccountError.notFound }
                return made
            }
        } catch let error as PostgresError where error.sqlState == .uniqueViolation {
            throw error.constraint == "identity_accounts_pkey" ? AccountError.personIdTaken : AccountError.emailTaken
        }
    }

    public static func setPasswordHash(personId: String, hash: String, now: Date, on connection: PostgresConnection) throws {
        _ = try connection.query("UPDATE identity_accounts SET password_hash = $2, updated_at = $3 WHERE person_id = $1", personId, hash, now)
    }

    /// Blocks the account; false when it was blocked already (or does not exist).
    public static func block(personId: String, reason: String?, now: Date, on connection: PostgresConnection) throws -> Bool {
        try connection.query(
            "UPDATE identity_accounts SET blocked_at = $2, blocked_reason = $3, updated_at = $2 WHERE person_id = $1 AND blocked_at IS NULL RETURNING 1",
            personId, now, reason
        ).count == 1
    }

    public static func unblock(personId: String, now: Date, on connection: PostgresConnection) throws -> Bool {
        try connection.query(
            "UPDATE identity_accounts SET blocked_at = NULL, blocked_reason = NULL, updated_at = $2 WHERE person_id = $1 AND blocked_at IS NOT NULL RETURNING 1",
            personId, now
        ).count == 1
    }

    public static func setEmailVerified(personId: String, _ verified: Bool, now: Date, on connection: PostgresConnection) throws {
        _ = try connection.query("UPDATE identity_accounts SET email_verified = $2, updated_at = $3 WHERE person_id = $1", personId, verified, now)
    }

    /// Fills the given and family names that are still empty; never renames.
    public static func fillNames(personId: String, givenName: String, familyName: String, now: Date, on connection: PostgresConnection) throws {
        let given = String(givenName.trimmingCharacters(in: .whitespaces).prefix(200))
        let family = String(familyName.trimmingCharacters(in: .whitespaces).prefix(200))
        guard !given.isEmpty || !family.isEmpty else { return }
        _ = try connection.query(
            """
            UPDATE identity_accounts SET
                given_name = CASE WHEN given_name = '' THEN $2 ELSE given_name END,
                family_name = CASE WHEN family_name = '' THEN $3 ELSE family_name END,
                updated_at = $4
            WHERE person_id = $1 AND ((given_name = '' AND $2 <> '') OR (family_name = '' AND $3 <> ''))
            """, personId, given, family, now)
    }

    // MARK: The second factor

    /// Sets a new TOTP secret and ten new recovery codes (the old ones stop working), and answers
    /// the codes: the only time they are seen, since only their digests are kept.
    /// With `secrets` the secret is stored sealed under it.
    public static func enableSecondFactor(
        personId: String, secret: [UInt8], secrets: SecretsKey? = nil, now: Date, on connection: PostgresConnection
    ) throws -> [String] {
        let stored = try secrets.map { try $0.seal(secret, for: totpPurpose(personId)) } ?? secret
        _ = try connection.query(
            """
            INSERT INTO identity_totp (person_id, secret, sealed, enabled_at) VALUES ($1, $2, $3, $4)
            ON CONFLICT (person_id) DO UPDATE SET secret = excluded.secret, sealed = excluded.sealed, last_step = 0, enabled_at = excluded.enabled_at
            """, personId, Data(stored), secrets != nil, now)
        return try replaceRecoveryCodes(personId: personId, on: connection)
    }

    /// Ten new recovery codes for an account with a second factor, the old ones deleted; answered
    /// this once (only digests are kept).
    public static func replaceRecoveryCodes(personId: String, on connection: PostgresConnection) throws -> [String] {
        _ = try connection.query("DELETE FROM identity_recovery_codes WHERE person_id = $1", personId)
        let codes = (0..<RecoveryCode.count).map { _ in RecoveryCode.generate() }
        for code in codes {
            _ = try connection.query("INSERT INTO identity_recovery_codes (person_id, digest) VALUES ($1, $2)", personId, RecoveryCode.digest(code)!)
        }
        return codes
    }

    /// What seals a person's TOTP secret: the table and the person.
    static func totpPurpose(_ personId: String) -> String { "identity_totp/\(personId)" }

    /// A sealed secret on a node without the key to open it.
    public struct SecretsUnavailable: Error, CustomStringConvertible {
        public var description: String
    }

    /// Seals the TOTP secrets written in the clear (before `INBOX_SECRETS_KEY_FILE` was set), a
    /// thousand rows a transaction, skipping rows another node is sealing; returns how many.
    @discardableResult
    public static func sealPlainSecondFactors(client: PostgresClient, secrets: SecretsKey) throws -> Int {
        var sealed = 0
        while true {
            let done = try client.transactionBlocking { connection in
                let rows = try connection.query(
                    "SELECT person_id, secret FROM identity_totp WHERE NOT sealed LIMIT 1000 FOR UPDATE SKIP LOCKED"
                ).map { (try $0.decode(String.self, "person_id"), Array(try $0.decode(Data.self, "secret"))) }
                for (person, secret) in rows {
                    _ = try connection.query(
                        "UPDATE identity_totp SET secret = $2, sealed = true WHERE person_id = $1", person,
                        Data(try secrets.seal(secret, for: totpPurpose(person))))
                }
                return rows.count
            }
            sealed += done
            if done < 1000 { return sealed }
        }
    }

    /// Removes the authenticator and the recovery codes; false when there was none.
    public static func disableSecondFactor(personId: String, on connection: PostgresConnection) throws -> Bool {
        _ = try connection.query("DELETE FROM identity_recovery_codes WHERE person_id = $1", personId)
        return try connection.query("DELETE FROM identity_totp WHERE person_id = $1 RETURNING 1", personId).count == 1
    }

    /// Whether `otp` is the account's current TOTP code (never one of a step accepted before) or one
    /// of its unused recovery codes; the code is spent when it is.
    /// A sealed secret opens only with `secrets`: without it (or with another key) this throws,
    /// rather than refuse a right code as if it were wrong.
    public static func acceptSecondFactor(
        personId: String, otp: String, secrets: SecretsKey? = nil, now: Date, on connection: PostgresConnection
    ) throws -> Bool {
        let trimmed = otp.trimmingCharacters(in: .whitespaces)
        if trimmed.utf8.count == TOTP.digits && trimmed.utf8.allSatisfy({ (48...57).contains($0) }) {
            guard let row = try connection.query("SELECT secret, sealed, last_step FROM identity_totp WHERE person_id = $1", personId).first else {
                return false
            }
            var secret = Array(try row.decode(Data.self, "secret"))
            if try row.decode(Bool.self, "sealed") {
                guard let secrets else {
                    throw SecretsUnavailable(description: "The second factor of \(personId) is sealed, and INBOX_SECRETS_KEY_FILE is not set on this node.")
                }
                secret = try secrets.open(secret, for: totpPurpose(personId))
            }
            let totp = TOTP(secret: secret)
            guard let step = totp.match(trimmed, at: now, after: try row.decode(Int64.self, "last_step")) else { return false }
            // Only one request can move the step past this one: a code raced twice is accepted once.
            return try connection.query(
                "UPDATE identity_totp SET last_step = $2 WHERE person_id = $1 AND last_step < $2 RETURNING 1", personId, step
            ).count == 1
        }
        guard let digest = RecoveryCode.digest(trimmed) else { return false }
        return try connection.query(
            "UPDATE identity_recovery_codes SET used_at = $3 WHERE person_id = $1 AND digest = $2 AND used_at IS NULL RETURNING 1", personId, digest, now
        ).count == 1
    }

    // MARK: Apple and Google

    /// The account linked to the provider's subject.
    public static func linked(provider: SocialProvider, subject: String, on connection: PostgresConnection) throws -> Account? {
        try connection.query(
            "SELECT \(columns) FROM identity_social_links l JOIN identity_accounts a USING (person_id) WHERE l.provider = $1 AND l.subject = $2",
            provider.rawValue, subject
        ).first.map(decode)
    }

    public static func link(provider: SocialProvider, subject: String, personId: String, now: Date, on connection: PostgresConnection) throws {
        _ = try connection.query(
            "INSERT INTO identity_social_links (provider, subject, person_id, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            provider.rawValue, subject, personId, now)
    }

    /// Keeps Apple's refresh token of a linked sign-in, to revoke at the account's deletion.
    /// `clientId`: the client the code was made for, the one Apple revokes the token for.
    public static func setAppleRefreshToken(subject: String, token: String, clientId: String, on connection: PostgresConnection) throws {
        _ = try connection.query(
            "UPDATE identity_social_links SET apple_refresh_token = $2, apple_client_id = $3 WHERE provider = 'apple' AND subject = $1", subject,
            String(token.prefix(2048)), String(clientId.prefix(255)))
    }
}

extension PostgresConnection {
    /// Runs `body` behind a savepoint when a transaction is open (a failure then undoes only what
    /// `body` did), or as it is otherwise.
    func withSavepoint<T>(_ body: () throws -> T) throws -> T {
        guard isInTransaction else { return try body() }
        _ = try execute("SAVEPOINT identity_step")
        do {
            let value = try body()
            _ = try execute("RELEASE SAVEPOINT identity_step")
            return value
        } catch {
            _ = try? execute("ROLLBACK TO SAVEPOINT identity_step")
            throw error
        }
    }
}
