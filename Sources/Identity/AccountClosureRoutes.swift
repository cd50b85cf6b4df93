import Crypto
import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import Mail
import PostgresClient

/// Closing an account (`POST /v1/me/closure`, `account:write`), after a fresh proof that it is the
/// person: the password, a code of the second factor (or a recovery code), or an ID token of a
/// linked Apple or Google sign-in issued in the last ten minutes. In one transaction:
/// every session ends (refresh tokens are `invalid_grant` from then on), the push registrations
/// and the mail contact are deleted, the account's rows go (password hash, links, second factor),
/// its id is kept in `identity_closed_accounts` so no new account gets it, Apple's refresh tokens
/// wait in `identity_apple_revocations` for the identity role to revoke them at Apple
/// (`AppleRevocations`), and `account_closed` tells the other tiers. What stays is in
/// docs/identity.md ("Closing an account").
public enum AccountClosureRoutes {
    static let type = "account-closures"
    /// How old an ID token may be to prove a fresh sign-in.
    static let freshness: TimeInterval = 600

    /// `hasher`: the password's; `appleClientId`: for Apple refresh tokens kept before their client
    /// was (the first of `INBOX_APPLE_CLIENT_IDS`).
    public static func routes(
        client: PostgresClient, hasher: PasswordHasher, social: SocialTokenVerifier?, secrets: SecretsKey?, validator: EventValidator?,
        limit: AttemptLimit = IdentityConfiguration().signInPerAccount, appleClientId: String? = nil,
        now: @escaping @Sendable () -> Date = { Date() }
    ) -> [Route] {
        let limits = RateLimits()
        let body = Schema.resourceDocument(
            type: type,
            attributes: [
                "password": Schema.string(maximumLength: 1024), "code": Schema.string(maximumLength: 64),
                "provider": Schema.choice(["apple", "google"]), "idToken": Schema.string(maximumLength: 8192), "nonce": Schema.string(maximumLength: 512),
                "erase": Schema.boolean,
            ], required: [], id: false)
        return [
            Route(
                .post, "/v1/me/closure", access: .signedIn(scope: .accountWrite),
                describedAs: .noContent(
                    "Closes the account, proven with the password, a second-factor or recovery code, or a fresh ID token of a linked sign-in: every session ends, devices and contact are deleted.",
                    body: body)
            ) { context in
                let personId = context.token?.subject ?? ""
                let data = try context.resourceDocument()
                try AccountRoutes.requireType(data, type)
                let fields = try AccountRoutes.Fields(data, allowed: ["password", "code", "provider", "idToken", "nonce", "erase"])
                // With `erase`, the person's data is erased too (`PersonErasure`): their key goes.
                let erase = try fields.bool("erase") ?? false
                if erase && PersonalDataKeys.current == nil {
                    throw APIError(
                        status: 422, code: .invalidField, detail: "This server seals no personal data, so it cannot erase it: close without erase.",
                        source: .pointer("/data/attributes/erase"))
                }
                let take = {
                    try limits.takeForAccount("code", personId, limit: limit, now: now(), client: client, tooMany: "Too many codes tried for this account")
                }
                let proof = try Self.proof(fields, social: social, now: now(), take: take)
                let account = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in try Accounts.find(personId: personId, on: connection) }
                guard let account else { throw MeRoutes.noAccount }
                if case .password(let password) = proof {
                    guard account.passwordHash != nil else {
                        throw APIError(status: 422, code: .invalidField, detail: "This account has no password.", source: .pointer("/data/attributes/password"))
                    }
                    guard try hasher.verify(password, against: account.passwordHash) else {
                        throw APIError(status: 422, code: .invalidField, detail: "The password is not the account's.", source: .pointer("/data/attributes/password"))
                    }
                }
                try client.withConnectionBlocking { connection in
                    try connection.transaction { connection in
                        // The account's row, locked: a password changed since it was checked is no proof.
                        guard let hash = try connection.query(
                            "SELECT password_hash FROM identity_accounts WHERE person_id = $1 FOR UPDATE", personId
                        ).first.map({ try $0.decode(String?.self, "password_hash") }) else { throw MeRoutes.noAccount }
                        switch proof {
                        case .password:
                            guard hash == account.passwordHash else {
                                throw APIError(status: 409, code: APIError.Code("password_changed"), detail: "The password changed meanwhile: try again.")
                            }
                        case .code(let code):
                            guard account.hasSecondFactor else {
                                throw APIError(status: 422, code: .invalidField, detail: "This account has no second factor.", source: .pointer("/data/attributes/code"))
                            }
                            guard try Accounts.acceptSecondFactor(personId: personId, otp: code, secrets: secrets, now: now(), on: connection) else {
                                throw SecondFactorRoutes.wrongCode
                            }
                        case .provider(let claims):
                            guard try Accounts.linked(provider: claims.provider, subject: claims.subject, on: connection)?.personId == personId else {
                                throw APIError(
                                    status: 422, code: .invalidField, detail: "This \(claims.provider.rawValue) sign-in is not linked to your account.",
                                    source: .pointer("/data/attributes/idToken"))
                            }
                        }
                        if erase {
                            var metadata = context.identity.metadata
                            metadata.service = "identity"
                            metadata.actor = personId
                            _ = try PersonErasure.erase(personId, metadata: metadata, appleClientId: appleClientId, validator: validator, on: connection)
                        } else {
                            try Self.close(personId, appleClientId: appleClientId, on: connection)
                            try MeRoutes.append(AccountClosed(personId: personId), by: personId, context, validator, on: connection)
                        }
                    }
                }
                return HTTPResponse(status: 204)
            }
        ]
    }

    enum Proof {
        case password(String)
        case code(String)
        case provider(SocialClaims)
    }

    /// The one proof the document gives, its limit attempt taken.
    static func proof(_ fields: AccountRoutes.Fields, social: SocialTokenVerifier?, now: Date, take: () throws -> Void) throws -> Proof {
        let password = try fields.string("password").flatMap { $0.isEmpty ? nil : $0 }
        let code = try fields.string("code").flatMap { $0.isEmpty ? nil : $0 }
        let provider = try fields.string("provider") ?? fields.string("idToken") ?? fields.string("nonce")
        guard [password != nil, code != nil, provider != nil].filter({ $0 }).count == 1 else {
            throw APIError(
                status: 422, code: .missingField,
                detail: "Prove it is you with one of: password; code (the authenticator's or a recovery code); provider, idToken and nonce of a linked sign-in.",
                source: .pointer("/data/attributes"))
        }
        if let password {
            guard password.utf8.count <= 1024 else {
                throw APIError(status: 422, code: .invalidField, detail: "password is at most 1,024 bytes.", source: .pointer("/data/attributes/password"))
            }
            try take()
            return .password(password)
        }
        if let code {
            guard code.unicodeScalars.count <= 64 else {
                throw APIError(status: 422, code: .invalidField, detail: "code is at most 64 characters.", source: .pointer("/data/attributes/code"))
            }
            try take()
            return .code(code)
        }
        let claims = try LinkedSignInRoutes.verifiedClaims(fields, social: social, now: now, take: take)
        guard let issued = claims.issuedAt, now.timeIntervalSince(issued) <= freshness else {
            throw APIError(
                status: 422, code: .invalidField, detail: "The ID token is older than ten minutes: sign in with \(claims.provider.rawValue) again.",
                source: .pointer("/data/attributes/idToken"))
        }
        return .provider(claims)
    }

    /// Everything closing does, in the caller's transaction (but the event).
    static func close(_ personId: String, appleClientId: String?, on connection: PostgresConnection) throws {
        _ = try connection.query(
            """
            INSERT INTO identity_apple_revocations (person_id, client_id, token)
            SELECT person_id, coalesce(apple_client_id, $2), apple_refresh_token FROM identity_social_links
            WHERE person_id = $1 AND provider = 'apple' AND apple_refresh_token IS NOT NULL AND coalesce(apple_client_id, $2) IS NOT NULL
            """, personId, appleClientId)
        _ = try connection.query("DELETE FROM devices WHERE person_id = $1", personId)
        _ = try Contacts.delete(personId: personId, on: connection)
        // Sessions, refresh tokens, links, the second factor and challenges go with it (ON DELETE CASCADE).
        _ = try connection.query("DELETE FROM identity_accounts WHERE person_id = $1", personId)
        _ = try connection.query("INSERT INTO identity_closed_accounts (person_id) VALUES ($1) ON CONFLICT DO NOTHING", personId)
    }
}
