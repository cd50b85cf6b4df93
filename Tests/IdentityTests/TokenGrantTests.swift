import Foundation
import HTTPServer
import Identity
import InboxAPI
import InboxTesting
import PostgresClient
import Testing

/// Guest tokens, refreshes, scopes and the rate limits through real sockets.
@Suite struct TokenGrantTests {
    static func guest(_ identity: IdentityHarness, scope: String? = nil, from: String = "127.0.0.1") async throws -> Reply {
        var fields = [("grant_type", TokenEndpoint.grantGuest), ("client_id", IdentityHarness.client)]
        if let scope { fields.append(("scope", scope)) }
        return try await identity.token(fields, from: from)
    }

    @Test func aGuestTokenReadsThePublicScopesForAnHourWithoutRefreshTokenAndIsNobodys() async throws {
        try await IdentityHarness.with(extraRoutes: { pool in DeviceRoutes.routes(client: pool) }) { identity in
            let reply = try await Self.guest(identity)
            #expect(reply.status == 200, "\(reply)")
            #expect(reply["refresh_token"] == nil)
            #expect(reply.json["expires_in"] as? Int == 3600)
            #expect(reply["scope"] == "catalogue:read content:read")
            let token = try identity.verified(try #require(reply["access_token"]))
            #expect(token.isGuest && token.subject.isEmpty)
            #expect(token.scopes == [.catalogueRead, .contentRead])
            let narrower = try await Self.guest(identity, scope: "content:read")
            #expect(narrower.status == 200 && narrower["scope"] == "content:read")
            for scope in ["account:read", "catalogue:read account:write", "messages:read"] {
                let refused = try await Self.guest(identity, scope: scope)
                #expect(refused.status == 400 && refused["error"] == "invalid_scope", "\(scope): \(refused)")
            }
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM events", Int.self) == 0, "a guest signs nobody in")
            // A good token that reads only what everybody may: a person's route is 403, never 401.
            let devices = try await identity.send("GET", "/v1/me/devices", headers: ["Authorization": "Bearer \(try #require(reply["access_token"]))"])
            #expect(devices.status == 403, "\(devices)")
            #expect((devices.json["errors"] as? [[String: Any]])?.first?["code"] as? String == "sign_in_required")
        }
    }

    @Test func guestTokensAreLimitedPerClientAddressWithRetryAfter() async throws {
        try await IdentityHarness.with(configure: { $0.guestPerAddress = AttemptLimit(3, per: 3600) }) { identity in
            for _ in 0..<3 { #expect(try await Self.guest(identity, from: "127.0.0.2").status == 200) }
            let refused = try await Self.guest(identity, from: "127.0.0.2")
            #expect(refused.status == 429, "\(refused)")
            #expect(refused["error"] == "too_many_requests")
            let wait = try #require(refused.header("Retry-After").flatMap(Int.init))
            #expect(wait > 1000 && wait <= 1200, "a third of an hour for one more: \(wait)")
            #expect(try await Self.guest(identity, from: "127.0.0.3").status == 200, "another address has its own limit")
            identity.clock.advance(1200)
            #expect(try await Self.guest(identity, from: "127.0.0.2").status == 200, "refilled")
        }
    }

    @Test func aRefreshRenewsBothTokensAndTheOldOneStopsWorking() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let signIn = try await identity.password(account.email, "correct horse battery", scope: "account:read")
            let first = try #require(signIn["refresh_token"])
            identity.clock.advance(600)
            let renewed = try await identity.refresh(first)
            #expect(renewed.status == 200, "\(renewed)")
            let second = try #require(renewed["refresh_token"])
            #expect(second != first)
            let token = try identity.verified(try #require(renewed["access_token"]))
            #expect(token.subject == account.personId && token.scopes == [.accountRead])
            #expect(renewed.json["expires_in"] as? Int == 3600)
            let third = try await identity.refresh(second)
            #expect(third.status == 200)
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM events WHERE type = 'signed_in'", Int.self) == 1, "a refresh is no sign-in")
        }
    }

    /// A refresh may narrow the scope for its access token. Asking for more than the session was
    /// given is refused, and the refresh token presented stays good: refusing must not spend it (the
    /// app would otherwise hold only a used token, whose next use ends the session as a reuse).
    @Test func aRefreshAskingForMoreThanTheSessionHasIsRefusedAndItsTokenStaysGood() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let signIn = try await identity.password(account.email, "correct horse battery", scope: "account:read messages:read")
            let first = try #require(signIn["refresh_token"])
            let wider = try await identity.token([
                ("grant_type", "refresh_token"), ("client_id", IdentityHarness.client), ("refresh_token", first), ("scope", "account:read account:write"),
            ])
            #expect(wider.status == 400 && wider["error"] == "invalid_scope", "\(wider)")
            let narrower = try await identity.token([
                ("grant_type", "refresh_token"), ("client_id", IdentityHarness.client), ("refresh_token", first), ("scope", "messages:read"),
            ])
            #expect(narrower.status == 200, "the token the refused refresh was given still works: \(narrower)")
            #expect(try identity.verified(try #require(narrower["access_token"])).scopes == [.messagesRead])
            let second = try #require(narrower["refresh_token"])
            let full = try await identity.refresh(second)
            #expect(full.status == 200, "\(full)")
            #expect(Set(try identity.verified(try #require(full["access_token"])).scopes) == [.accountRead, .messagesRead], "the session keeps what it was given")
        }
    }

    @Test func presentingAUsedRefreshTokenEndsTheWholeSession() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let first = try #require(try await identity.password(account.email, "correct horse battery")["refresh_token"])
            let second = try #require(try await identity.refresh(first)["refresh_token"])
            // Somebody holds the first one still: the thief, or the person whose newer one was stolen.
            let replayed = try await identity.refresh(first)
            #expect(replayed.status == 400 && replayed["error"] == "invalid_grant", "\(replayed)")
            let afterwards = try await identity.refresh(second)
            #expect(afterwards.status == 400 && afterwards["error"] == "invalid_grant", "the newest token of the session is dead too")
            #expect(try await identity.db.scalar("SELECT end_reason FROM identity_sessions", String.self) == "refresh_token_reused")
            // Another sign-in of the same person is another session, untouched.
            let other = try #require(try await identity.password(account.email, "correct horse battery")["refresh_token"])
            #expect(try await identity.refresh(other).status == 200)
        }
    }

    @Test func twoRefreshesRacingWithOneTokenRenewOnceAndEndTheSession() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let token = try #require(try await identity.password(account.email, "correct horse battery")["refresh_token"])
            async let a = identity.refresh(token)
            async let b = identity.refresh(token)
            let statuses = [try await a.status, try await b.status].sorted()
            #expect(statuses == [200, 400], "\(statuses)")
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM identity_sessions WHERE ended_at IS NOT NULL", Int.self) == 1)
        }
    }

    @Test func aRefreshIsRefusedAfterNinetyDaysABlockOrANewPasswordAndForAnotherClient() async throws {
        try await IdentityHarness.with { identity in
            let anna = try await identity.account("anna@example.com")
            let annas = try #require(try await identity.password(anna.email, "correct horse battery")["refresh_token"])
            let otherClient = try await identity.token([("grant_type", "refresh_token"), ("client_id", "seller-tools"), ("refresh_token", annas)])
            #expect(otherClient.status == 400 && otherClient["error"] == "invalid_grant")
            #expect(try await identity.refresh(annas).status == 200, "a refusal for another client leaves the token as it was")

            let bert = try await identity.account("bert@example.com")
            let berts = try #require(try await identity.password(bert.email, "correct horse battery")["refresh_token"])
            try await identity.block(bert.personId)
            #expect(try await identity.refresh(berts)["error"] == "invalid_grant")

            let cleo = try await identity.account("cleo@example.com")
            let cleos = try #require(try await identity.password(cleo.email, "correct horse battery")["refresh_token"])
            let administration = identity.role.administration
            try await BlockingThread.run { try administration.setPassword(personId: cleo.personId, password: "a brand new password") }
            #expect(try await identity.refresh(cleos)["error"] == "invalid_grant")

            let dora = try await identity.account("dora@example.com")
            var doras = try #require(try await identity.password(dora.email, "correct horse battery")["refresh_token"])
            identity.clock.advance(89 * 86_400)
            doras = try #require(try await identity.refresh(doras)["refresh_token"], "89 days later: renewed, for 90 days more")
            identity.clock.advance(89 * 86_400)
            doras = try #require(try await identity.refresh(doras)["refresh_token"])
            identity.clock.advance(91 * 86_400)
            #expect(try await identity.refresh(doras)["error"] == "invalid_grant", "91 days unused: over")
        }
    }

    @Test func aScopeTheClientWasNotRegisteredForIsInvalidScopeNeverDropped() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let reply = try await identity.password(account.email, "correct horse battery", scope: "account:read watches:write")
            #expect(reply.status == 400 && reply["error"] == "invalid_scope", "\(reply)")
            #expect(reply["error_description"]?.contains("watches:write") == true)
            let malformed = try await identity.password(account.email, "correct horse battery", scope: "account:read \"quoted\"")
            #expect(malformed["error"] == "invalid_scope")
            let seller = try await identity.token([
                ("grant_type", TokenEndpoint.grantPassword), ("client_id", "seller-tools"), ("username", account.email),
                ("password", "correct horse battery"), ("scope", "watches:write"),
            ])
            #expect(seller.status == 200, "the other client is registered for it: \(seller)")
            let none = try await identity.password(account.email, "correct horse battery")
            #expect(none.status == 200 && none["scope"] == "", "no scope asked, none given: \(none)")
        }
    }

    /// A guesser as fast as the per-address limit allows spends the account's budget; the owner,
    /// from the app installation or the address that signed in before, gets in at the first try
    /// every time, while the guesser, and anybody else new to the account, meets 429.
    @Test func aGuesserCannotLockTheOwnerOut() async throws {
        try await IdentityHarness.with { identity in
            identity.clock.stop()
            let account = try await identity.account("anna@example.com")
            func owner(installation: String?, from address: String) async throws -> Reply {
                var fields = [
                    ("grant_type", TokenEndpoint.grantPassword), ("client_id", IdentityHarness.client), ("username", account.email),
                    ("password", "correct horse battery"),
                ]
                if let installation { fields.append(("installation_id", installation)) }
                return try await identity.token(fields, from: address)
            }
            // Signed in before: from the app (on the phone's address of then) and from a desktop's address.
            #expect(try await owner(installation: "8f14e45f-ceea-467a-9575-1f2e3d4c5b6a", from: "127.0.0.50").status == 200)
            #expect(try await owner(installation: nil, from: "127.0.0.51").status == 200)

            var guesser: [Int] = []
            var fromTheApp: [Int] = []
            var fromTheDesktop: [Int] = []
            // 200 s: a wrong password every 10 s from one address (30 in 300 s is its limit), the
            // owner every 20 s from the app, now on another address, and from the desktop.
            for second in stride(from: 0, to: 200, by: 10) {
                guesser.append(try await identity.password(account.email, "guess-\(second)", from: "127.0.0.60").status)
                if second % 20 == 0 {
                    fromTheApp.append(try await owner(installation: "8f14e45f-ceea-467a-9575-1f2e3d4c5b6a", from: "127.0.0.70").status)
                    fromTheDesktop.append(try await owner(installation: nil, from: "127.0.0.51").status)
                }
                identity.clock.advance(10)
            }
            #expect(fromTheApp.allSatisfy { $0 == 200 } && fromTheApp.count == 10, "the owner from the app: \(fromTheApp)")
            #expect(fromTheDesktop.allSatisfy { $0 == 200 }, "the owner from the desktop: \(fromTheDesktop)")
            #expect(guesser.contains(429), "the guesser: \(guesser)")
            #expect(Set(guesser).isSubset(of: [400, 429]), "\(guesser)")
            // Somebody new to the account, with the right password, shares the spent budget.
            #expect(try await owner(installation: "a-new-installation-0001", from: "127.0.0.80").status == 429)
            // An installation id out of form is refused, naming it.
            let odd = try await owner(installation: "short", from: "127.0.0.51")
            #expect(odd.status == 400 && odd["error_description"]?.contains("installation_id") == true, "\(odd)")
        }
    }

    @Test func passwordAttemptsAreLimitedPerAccountAndPerAddressWithRetryAfter() async throws {
        try await IdentityHarness.with(configure: {
            $0.signInPerAccount = AttemptLimit(3, per: 300)
            $0.signInPerAddress = AttemptLimit(5, per: 300)
        }) { identity in
            identity.clock.stop()
            let account = try await identity.account("anna@example.com")
            for source in ["127.0.0.10", "127.0.0.11", "127.0.0.12"] {
                #expect(try await identity.password(account.email, "wrong", from: source).status == 400)
            }
            let limited = try await identity.password(account.email, "correct horse battery", from: "127.0.0.13")
            #expect(limited.status == 429 && limited["error"] == "too_many_requests", "per account, from any address: \(limited)")
            // 3 per 300 s refills one every 100 s (the clock stands still while the test runs).
            #expect(limited.header("Retry-After") == "100", "\(limited.headers)")
            // The same for an address nobody has: the limit must not tell which ones exist.
            for _ in 0..<3 { _ = try await identity.password("nobody@example.com", "wrong", from: "127.0.0.20") }
            #expect(try await identity.password("nobody@example.com", "wrong", from: "127.0.0.21").status == 429)

            for index in 0..<2 { _ = try await identity.password("someone-\(index)@example.com", "wrong", from: "127.0.0.30") }
            for index in 2..<5 { _ = try await identity.password("someone-\(index)@example.com", "wrong", from: "127.0.0.30") }
            let address = try await identity.password("someone-else@example.com", "wrong", from: "127.0.0.30")
            #expect(address.status == 429, "per address, whatever the account: \(address)")
            identity.clock.advance(100)
            #expect(try await identity.password(account.email, "correct horse battery", from: "127.0.0.14").status == 200, "refilled")
        }
    }

    @Test func behindATrustedProxyTheForwardedAddressIsCountedAndOtherwiseTheHeaderIsIgnored() async throws {
        try await IdentityHarness.with(configure: {
            $0.guestPerAddress = AttemptLimit(1, per: 3600)
            $0.trustedProxies = ["127.0.0.40"]
        }) { identity in
            let forwarded: [(String, String, Int, String)] = [
                ("127.0.0.40", "203.0.113.1", 200, "a client behind the proxy"),
                ("127.0.0.40", "203.0.113.2", 200, "another client behind the same proxy"),
                ("127.0.0.40", "198.51.100.9, 203.0.113.1", 429, "a made-up hop to the left changes nothing"),
                ("127.0.0.41", "203.0.113.3", 200, "a client of its own"),
                ("127.0.0.41", "203.0.113.4", 429, "not a proxy: its header is not believed"),
            ]
            for (source, header, status, what) in forwarded {
                let reply = try await identity.token(
                    [("grant_type", TokenEndpoint.grantGuest), ("client_id", IdentityHarness.client)], headers: ["X-Forwarded-For": header], from: source)
                #expect(reply.status == status, "\(what): \(reply)")
            }
        }
    }

    @Test func theCodeStepIsLimitedPerAddressToo() async throws {
        try await IdentityHarness.with(configure: { $0.signInPerAddress = AttemptLimit(3, per: 300) }) { identity in
            let account = try await identity.account("anna@example.com")
            _ = try await identity.secondFactor(account.personId)
            let challenge = try #require(try await identity.password(account.email, "correct horse battery", from: "127.0.0.1")["challenge"])
            _ = try await identity.code(challenge, "000001")
            _ = try await identity.code(challenge, "000002")
            let limited = try await identity.code(challenge, "000003")
            #expect(limited.status == 429 && limited.header("Retry-After") != nil, "\(limited)")
        }
    }
}
