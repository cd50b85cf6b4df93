import Crypto
import Encodings
import EventLog
import Foundation
import Identity
import InboxAPI
import InboxDomain
import InboxTesting
import PasswordHashing
import PostgresClient
import Testing

/// TOTP secrets under the key-encryption key: written sealed, accepted with the key, never opened
/// without it; and those written in the clear before the key was set are sealed by the role.
@Suite struct SealedSecretsTests {
    @Test func aSecondFactorIsKeptSealedAndStillAcceptsItsCodes() async throws {
        try await withTestDatabase { db in
            let key = try SecretsKey(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) })
            let hasher = try PasswordHasher(cost: IdentityHarness.testCost, concurrency: 1)
            let sealing = AccountAdministration(client: db.client, hasher: hasher, validator: EventValidator(registry: InboxCatalogue.registry), secrets: key)
            let plain = AccountAdministration(client: db.client, hasher: hasher, validator: EventValidator(registry: InboxCatalogue.registry))
            let anna = try sealing.create(email: "anna@example.com", password: "correct horse battery", emailVerified: true)
            let ben = try plain.create(email: "ben@example.com", password: "correct horse battery", emailVerified: true)
            let (annaTOTP, _) = try sealing.enableSecondFactor(personId: anna.personId)
            let (benTOTP, _) = try plain.enableSecondFactor(personId: ben.personId)

            func stored(_ person: String) async throws -> (secret: [UInt8], sealed: Bool) {
                let secret = try await db.scalar("SELECT encode(secret, 'hex') FROM identity_totp WHERE person_id = '\(person)'", String.self)
                return (Hex.decode(secret) ?? [], try await db.scalar("SELECT sealed FROM identity_totp WHERE person_id = '\(person)'", Bool.self))
            }
            let annaRow = try await stored(anna.personId)
            #expect(annaRow.sealed && annaRow.secret != annaTOTP.secret && annaRow.secret.count == annaTOTP.secret.count + 29)
            #expect(try await stored(ben.personId).sealed == false)

            let now = Date()
            let code = annaTOTP.code(step: TOTP.step(at: now))
            let connection = try db.connect()
            defer { connection.close() }
            #expect(throws: Accounts.SecretsUnavailable.self) {
                try Accounts.acceptSecondFactor(personId: anna.personId, otp: code, now: now, on: connection)
            }
            let other = try SecretsKey(bytes: [UInt8](repeating: 1, count: 32))
            #expect(throws: CryptoError.self) { try Accounts.acceptSecondFactor(personId: anna.personId, otp: code, secrets: other, now: now, on: connection) }
            #expect(try Accounts.acceptSecondFactor(personId: anna.personId, otp: code, secrets: key, now: now, on: connection))

            // The clear one is sealed when a role with the key starts, and keeps accepting its codes.
            #expect(try Accounts.sealPlainSecondFactors(client: db.client, secrets: key) == 1)
            let benRow = try await stored(ben.personId)
            #expect(benRow.sealed && benRow.secret != benTOTP.secret)
            #expect(try Accounts.acceptSecondFactor(personId: ben.personId, otp: benTOTP.code(step: TOTP.step(at: now)), secrets: key, now: now, on: connection))
            #expect(try Accounts.sealPlainSecondFactors(client: db.client, secrets: key) == 0)
        }
    }

    /// A node reads the keys again: a key another node added through rotation verifies here after
    /// `reload`, with no restart, and a retired one no longer does.
    @Test func aReloadPublishesARotatedKeyAndDropsARetiredOne() async throws {
        try await withTestDatabase { db in
            let key = try SecretsKey(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) })
            let (first, created) = try SigningKeys.load(client: db.client, secrets: key)
            let oldKid = try #require(created)
            let verifier = TokenVerifier(keys: TokenKeys(keys: [:]), moreKeys: { first.publicKeys[$0] })
            func token(_ keys: SigningKeys) throws -> String {
                "Bearer " + (try keys.accessToken(
                    subject: "anna", scopes: [.accountRead], clientId: "wristler-app", sessionId: nil, guest: false, lifetime: 600, issuer: nil, now: Date()))
            }
            #expect(throws: Never.self) { try verifier.verify(authorization: try token(first)) }

            // Another node rotates with no overlap: its keys sign with the new one at once.
            let (added, retired) = try SigningKeys.rotate(client: db.client, secrets: key, overlap: 0, tokenLifetime: 3900)
            #expect(retired.isEmpty)
            let (second, _) = try SigningKeys.load(client: db.client, secrets: key)
            #expect(second.signingKid == added)
            let newToken = try token(second)
            #expect(throws: APIError.self) { try verifier.verify(authorization: newToken) }
            #expect(try first.reload())
            #expect(throws: Never.self) { try verifier.verify(authorization: newToken) }
            #expect(first.signingKid == added)

            // Hours on, the next rotation retires the first key; a reload stops publishing it.
            _ = try await db.scalar("WITH moved AS (UPDATE identity_signing_keys SET signs_from = signs_from - interval '3 hours' RETURNING 1) SELECT count(*)::int FROM moved", Int.self)
            #expect(try SigningKeys.rotate(client: db.client, secrets: key, overlap: 3600, tokenLifetime: 3900).retired == [oldKid])
            #expect(try first.reload())
            #expect(first.publicKeys[oldKid] == nil && first.publicKeys[added] != nil)
        }
    }
}
