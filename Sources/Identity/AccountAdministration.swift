import Crypto
import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// What the website's sign-up (through `/internal/v1/accounts`) and operators (`inbox account`) do
/// to accounts. Each change and the security event that tells the rest of the tier of it
/// (`password_changed`, `second_factor_enabled`/`disabled`, `account_blocked`) are one transaction.
public struct AccountAdministration: Sendable {
    public static let minimumPasswordCharacters = 8

    let client: PostgresClient
    let hasher: PasswordHasher
    let validator: EventValidator?
    let now: @Sendable () -> Date
    /// Who made the change, for the events' metadata (`identity`, `website`, `operator`).
    let service: String

    /// Seals the TOTP secrets it writes (`INBOX_SECRETS_KEY_FILE`); nil: in the clear.
    let secrets: SecretsKey?

    public init(
        client: PostgresClient, hasher: PasswordHasher, validator: EventValidator?, secrets: SecretsKey? = nil, service: String = "identity",
        now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.secrets = secrets
        self.client = client
        self.hasher = hasher
        self.validator = validator
        self.service = service
        self.now = now
    }

    /// A password as accounts may have one: 8 characters at least (NIST SP 800-63B §3.1.1.2), at
    /// most `Argon2id.maximumPasswordBytes` bytes, no U+0000.
    public static func checkPassword(_ password: String) throws {
        guard password.count >= minimumPasswordCharacters else {
            throw AccountError.invalid("A password is at least \(minimumPasswordCharacters) characters.")
        }
        guard password.utf8.count <= 1024, !password.utf8.contains(0) else { throw AccountError.invalid("A password is at most 1024 bytes, without U+0000.") }
    }

    public func create(
        email: String, password: String?, givenName: String = "", familyName: String = "", emailVerified: Bool = false, personId: String? = nil,
        origin: String = "web"
    ) throws -> Account {
        if let password { try Self.checkPassword(password) }
        let hash = try password.map { password in
            do { return try hasher.hash(password) } catch { throw AccountError.invalid((error as? OAuthError)?.description ?? "The password could not be hashed.") }
        }
        let account = NewAccount(
            personId: personId, email: email, emailVerified: emailVerified, passwordHash: hash, givenName: givenName, familyName: familyName, origin: origin)
        return try client.transactionBlocking { connection in try Accounts.create(account, on: connection) }
    }

    public func find(personId: String) throws -> Account? { try client.withConnectionBlocking { try Accounts.find(personId: personId, on: $0) } }

    public func find(email: String) throws -> Account? { try client.withConnectionBlocking { try Accounts.find(email: email, on: $0) } }

    /// A new password: every session ends (whoever knew the old one is signed out), `password_changed`.
    public func setPassword(personId: String, password: String) throws {
        try Self.checkPassword(password)
        let hash: String
        do { hash = try hasher.hash(password) } catch { throw AccountError.invalid(error.description ?? "The password could not be hashed.") }
        try change(personId) { connection, now in
            try Accounts.setPasswordHash(personId: personId, hash: hash, now: now, on: connection)
            try Sessions.endAll(personId: personId, reason: "password_changed", now: now, on: connection)
            return [try NewEvent(PasswordChanged(personId: personId), metadata: metadata(personId))]
        }
    }

    /// Blocks the account: no sign-in or refresh works from now on, `account_blocked` (once).
    public func block(personId: String, reason: String?) throws {
        try change(personId) { connection, now in
            guard try Accounts.block(personId: personId, reason: reason.map { String($0.prefix(1000)) }, now: now, on: connection) else { return [] }
            try Sessions.endAll(personId: personId, reason: "blocked", now: now, on: connection)
            return [try NewEvent(AccountBlocked(personId: personId, reason: reason.map { String($0.prefix(1000)) }), metadata: metadata(personId))]
        }
    }

    /// Lifts a block. The catalogue has no event for it: the log keeps the block (people's shop
    /// reminders go on skipping the person; docs/identity.md).
    public func unblock(personId: String) throws {
        try change(personId) { connection, now in
            _ = try Accounts.unblock(personId: personId, now: now, on: connection)
            return []
        }
    }

    public func setEmailVerified(personId: String, _ verified: Bool) throws {
        try change(personId) { connection, now in
            try Accounts.setEmailVerified(personId: personId, verified, now: now, on: connection)
            return []
        }
    }

    /// A new authenticator: its secret (for the `otpauth://` URI) and ten recovery codes, shown
    /// this once; `second_factor_enabled`.
    public func enableSecondFactor(personId: String) throws -> (totp: TOTP, recoveryCodes: [String]) {
        let secret = TOTP.newSecret()
        var codes: [String] = []
        try change(personId) { connection, now in
            codes = try Accounts.enableSecondFactor(personId: personId, secret: secret, secrets: secrets, now: now, on: connection)
            return [try NewEvent(SecondFactorEnabled(personId: personId), metadata: metadata(personId))]
        }
        return (TOTP(secret: secret), codes)
    }

    public func disableSecondFactor(personId: String) throws {
        try change(personId) { connection, _ in
            guard try Accounts.disableSecondFactor(personId: personId, on: connection) else { return [] }
            return [try NewEvent(SecondFactorDisabled(personId: personId), metadata: metadata(personId))]
        }
    }

    private func metadata(_ personId: String) -> EventMetadata {
        EventMetadata(origin: .api, actor: service, service: "identity")
    }

    /// `body` and the events it answers in one transaction, on an account that exists.
    private func change(_ personId: String, _ body: (PostgresConnection, Date) throws -> [NewEvent]) throws {
        let now = self.now()
        try client.transactionBlocking { connection in
            guard try Accounts.find(personId: personId, on: connection) != nil else { throw AccountError.notFound }
            let events = try body(connection, now)
            if !events.isEmpty { _ = try EventStore.append(events, validator: validator, on: connection) }
        }
    }
}
