import EventLog
import Foundation
import Identity
import InboxAPI
import InboxDomain
import InboxTesting
import Mail
import PostgresClient
import Testing

/// Closing an account through real sockets: a fresh proof first (password, code, or a recent ID
/// token of a linked sign-in), then everything ends at once, and Apple's refresh token is revoked
/// at the local Apple, which checks the client secret as Apple does.
@Suite struct AccountClosureRoutesTests {
    static func withRoutes(limit: AttemptLimit = AttemptLimit(10, per: 300), _ body: (IdentityHarness) async throws -> Void) async throws {
        try await IdentityHarness.with(
            providers: true,
            socialRoutes: { pool, social in
                let hasher = try! PasswordHasher(cost: IdentityHarness.testCost, concurrency: 2)
                return MeRoutes.routes(client: pool)
                    + AccountClosureRoutes.routes(
                        client: pool, hasher: hasher, social: social, secrets: nil, validator: EventValidator(registry: InboxCatalogue.registry),
                        limit: limit, appleClientId: ProviderServer.appleBundle)
            }, body)
    }

    static func close(_ attributes: String) -> [UInt8] {
        Array(#"{"data":{"type":"account-closures","attributes":{\#(attributes)}}}"#.utf8)
    }

    /// What is left of `person` in the tables closing empties.
    static func remains(_ identity: IdentityHarness, _ person: String) async throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for table in ["identity_accounts", "identity_sessions", "identity_social_links", "devices", "contacts"] {
            counts[table] = try await identity.db.scalar("SELECT count(*)::int FROM \(table) WHERE person_id = '\(person)'", Int.self)
        }
        return counts
    }

    static func addDeviceAndContact(_ identity: IdentityHarness, _ person: String) async throws {
        try await identity.db.client.withConnection { connection in
            _ = try connection.query("INSERT INTO devices (person_id, platform, push_token) VALUES ($1, 'ios', $2)", person, "token-of-\(person)")
            _ = try Contacts.set(personId: person, address: try MailAddress("\(person)@example.com"), language: .nl, on: connection)
        }
    }

    @Test func theRightPasswordClosesTheAccountAndEverySignInEndsAtOnce() async throws {
        try await Self.withRoutes { identity in
            let anna = try await identity.account("anna@example.com")
            let (token, refresh) = try await MeRoutesTests.signIn(identity, "anna@example.com", scope: "account:write")
            let headers = MeRoutesTests.headers(token)
            try await Self.addDeviceAndContact(identity, anna.personId)

            // Refused, each naming its field; nothing changes.
            let refusals: [(String, String, String)] = [
                ("no proof", "", "/data/attributes"),
                ("two proofs", #""password":"correct horse battery","code":"123456""#, "/data/attributes"),
                ("a wrong password", #""password":"incorrect horse""#, "/data/attributes/password"),
                ("a code without a second factor", #""code":"123456""#, "/data/attributes/code"),
                ("another attribute", #""password":"correct horse battery","reason":"bye""#, "/data/attributes/reason"),
            ]
            for (what, attributes, pointer) in refusals {
                let reply = try await identity.send("POST", "/v1/me/closure", headers: headers, body: Self.close(attributes))
                #expect(reply.status == 422 && reply.text.contains(#""pointer":"\#(pointer)""#), "\(what): \(reply)")
            }
            let readOnly = try await MeRoutesTests.signIn(identity, "anna@example.com", scope: "account:read").0
            let scoped = try await identity.send(
                "POST", "/v1/me/closure", headers: MeRoutesTests.headers(readOnly), body: Self.close(#""password":"correct horse battery""#))
            #expect(scoped.status == 403, "account:write is needed: \(scoped)")
            #expect(try await Self.remains(identity, anna.personId) == [
                "identity_accounts": 1, "identity_sessions": 2, "identity_social_links": 0, "devices": 1, "contacts": 1,
            ])

            let closed = try await identity.send("POST", "/v1/me/closure", headers: headers, body: Self.close(#""password":"correct horse battery""#))
            #expect(closed.status == 204, "\(closed)")
            #expect(try await Self.remains(identity, anna.personId) == [
                "identity_accounts": 0, "identity_sessions": 0, "identity_social_links": 0, "devices": 0, "contacts": 0,
            ])
            // The refresh token and the password are refused with the one invalid_grant answer.
            let refreshed = try await identity.refresh(refresh)
            #expect(refreshed.status == 400 && refreshed["error"] == "invalid_grant", "\(refreshed)")
            let again = try await identity.password("anna@example.com", "correct horse battery")
            let unknown = try await identity.password("nobody@example.com", "correct horse battery")
            #expect(again.status == 400 && again.text == unknown.text, "\(again)")
            #expect(try await identity.send("GET", "/v1/me", headers: headers).status == 404, "the access token's hour changes nothing")
            // account_closed, from the app, once; the id is never given again.
            let events = try await identity.db.client.withConnection { connection in
                try connection.query("SELECT stream_id, metadata->>'origin' AS origin FROM events WHERE type = 'account_closed'").map {
                    "\(try $0.decode(String.self, "stream_id")) \(try $0.decode(String.self, "origin"))"
                }
            }
            #expect(events == ["person-\(anna.personId)-security app:ios"])
            let administration = identity.role.administration
            #expect(throws: AccountError.personIdTaken) {
                try administration.create(email: "anna.new@example.com", password: "correct horse battery", personId: anna.personId)
            }
            // The address is free for a new account.
            #expect(try await identity.account("anna@example.com").personId != anna.personId)
        }
    }

    @Test func aReplayedCodeIsRefusedAndAFreshOneOrARecoveryCodeCloses() async throws {
        try await Self.withRoutes(limit: AttemptLimit(4, per: 300)) { identity in
            let ben = try await identity.account("ben@example.com")
            let administration = identity.role.administration
            let (totp, recovery) = try await BlockingThread.run { try administration.enableSecondFactor(personId: ben.personId) }
            // The code that signed Ben in was spent there.
            let step = try await identity.password("ben@example.com", "correct horse battery", scope: "account:write")
            let code = identity.currentCode(totp)
            let signedIn = try await identity.code(step["challenge"] ?? "", code)
            #expect(signedIn.status == 200, "\(signedIn)")
            let headers = MeRoutesTests.headers(signedIn["access_token"] ?? "")
            let replayed = try await identity.send("POST", "/v1/me/closure", headers: headers, body: Self.close(#""code":"\#(code)""#))
            #expect(replayed.status == 422 && replayed.text.contains("/data/attributes/code"), "\(replayed)")
            // Guessing meets the account's limit: 429 with Retry-After, the right code included.
            var statuses: [Int] = []
            for _ in 0..<4 {
                statuses.append(try await identity.send("POST", "/v1/me/closure", headers: headers, body: Self.close(#""code":"000000""#)).status)
            }
            #expect(statuses.suffix(2) == [422, 429] || statuses.last == 429, "\(statuses)")
            let limited = try await identity.send("POST", "/v1/me/closure", headers: headers, body: Self.close(#""code":"\#(recovery[0])""#))
            #expect(limited.status == 429 && limited.header("Retry-After") != nil, "\(limited)")
            #expect(try await Self.remains(identity, ben.personId)["identity_accounts"] == 1)
            // Later, a recovery code closes it.
            try await identity.db.client.withConnection { connection in _ = try connection.query("DELETE FROM identity_rate_limits") }
            #expect(try await identity.send("POST", "/v1/me/closure", headers: headers, body: Self.close(#""code":"\#(recovery[0])""#)).status == 204)
            #expect(try await Self.remains(identity, ben.personId)["identity_accounts"] == 0)
        }
    }

    @Test func anAppleAccountClosesWithAFreshIDTokenAndItsRefreshTokenIsRevokedAtApple() async throws {
        try await Self.withRoutes { identity in
            let providers = try #require(identity.providers)
            let revocations = try #require(identity.role.appleRevocations)
            // Carla signs up with Apple; the authorization code is exchanged for Apple's refresh token.
            let signUp = try await SocialSignInTests.social(
                identity, .apple, idToken: try providers.idToken(.apple, subject: "001.carla", nonce: "n-1", email: "carla@example.com"), nonce: "n-1",
                extra: [("authorization_code", "good-carla"), ("scope", "account:write")])
            #expect(signUp.status == 200, "\(signUp)")
            let carla = try identity.verified(signUp["access_token"] ?? "").subject
            for _ in 0..<100 where try await identity.db.scalar("SELECT count(apple_refresh_token)::int FROM identity_social_links", Int.self) == 0 {
                try await Task.sleep(for: .milliseconds(50))
            }
            let headers = MeRoutesTests.headers(signUp["access_token"] ?? "")

            // A stale sign-in, somebody else's, and a password she has not: refused.
            let stale = try providers.idToken(
                .apple, subject: "001.carla", nonce: "n-2", expiresIn: 3600, claims: ["iat": .integer(Int64(Date().timeIntervalSince1970) - 1200)])
            let refusals: [(String, String, String)] = [
                ("twenty minutes old", #""provider":"apple","idToken":"\#(stale)","nonce":"n-2""#, "/data/attributes/idToken"),
                (
                    "not linked to her", #""provider":"apple","idToken":"\#(try providers.idToken(.apple, subject: "002.dan", nonce: "n-3"))","nonce":"n-3""#,
                    "/data/attributes/idToken"
                ),
                ("another nonce", #""provider":"apple","idToken":"\#(try providers.idToken(.apple, subject: "001.carla", nonce: "n-4"))","nonce":"n-5""#, "/data/attributes/nonce"),
                ("a password", #""password":"correct horse battery""#, "/data/attributes/password"),
            ]
            for (what, attributes, pointer) in refusals {
                let reply = try await identity.send("POST", "/v1/me/closure", headers: headers, body: Self.close(attributes))
                #expect(reply.status == 422 && reply.text.contains(#""pointer":"\#(pointer)""#), "\(what): \(reply)")
            }
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM identity_apple_revocations", Int.self) == 0)

            let fresh = try providers.idToken(.apple, subject: "001.carla", nonce: "n-6")
            let closed = try await identity.send(
                "POST", "/v1/me/closure", headers: headers, body: Self.close(#""provider":"apple","idToken":"\#(fresh)","nonce":"n-6""#))
            #expect(closed.status == 204, "\(closed)")
            #expect(try await Self.remains(identity, carla)["identity_social_links"] == 0)

            // Apple cannot be reached the first time: the token waits and goes the next time.
            providers.refuseRevocations(1)
            #expect(try await revocations.revokeDue() == .init(revoked: 0, failed: 1, abandoned: 0))
            #expect(try await revocations.revokeDue() == .init(), "not due again before its backoff")
            #expect(try await revocations.revokeDue(now: Date().addingTimeInterval(120)) == .init(revoked: 1, failed: 0, abandoned: 0))
            let revoked = try #require(providers.revocations.first)
            #expect(revoked["token"] == "apple-refresh-for-good-carla" && revoked["client_id"] == ProviderServer.appleBundle)
            #expect(revoked["token_type_hint"] == "refresh_token")
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM identity_apple_revocations", Int.self) == 0)
            // Signing in with Apple again makes a new, empty account.
            let back = try await SocialSignInTests.social(
                identity, .apple, idToken: try providers.idToken(.apple, subject: "001.carla", nonce: "n-7", email: "carla@example.com"), nonce: "n-7")
            let newPerson = try identity.verified(back["access_token"] ?? "").subject
            #expect(back.status == 200 && newPerson != carla, "\(back)")
        }
    }
}
