import Encodings
import Foundation
import Identity
import InboxAPI
import InboxDomain
import InboxTesting
import Projections
import Testing

/// End to end, as a person does it on the app: the password screen, the device registered for
/// push, the bell, and in it the `new_sign_in` entry of that very sign-in: the identity role's
/// token verified by the API, its `signed_in` event projected into the bell.
@Suite struct SignInToBellTests {
    @Test func aPersonSignsInRegistersTheirPhoneAndFindsThatSignInOnTheirBell() async throws {
        try await IdentityHarness.with(extraRoutes: { pool in DeviceRoutes.routes(client: pool) + BellRoutes.routes(client: pool) }) { identity in
            try await InboxProjections.prepareLiveTables(client: identity.db.client)
            try await identity.db.withProjectors {
                try await identity.account("anna@example.com", givenName: "Anna")
                let app = ["X-Wristler-App": "ios/2.4.0"]
                // An earlier sign-in on another phone, so the bell has an entry that is not this one.
                #expect(try await identity.password("anna@example.com", "correct horse battery", scope: "account:read").status == 200)

                let signIn = try await identity.password(
                    "anna@example.com", "correct horse battery", scope: "account:read account:write", headers: app)
                #expect(signIn.status == 200, "\(signIn)")
                let access = try #require(signIn["access_token"])
                let payload = try #require(Base64URL.decode(String(access.split(separator: ".")[1])))
                let claims = try #require(try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
                let signInId = try #require(claims["sid"] as? String)
                let bearer = app.merging(["Authorization": "Bearer \(access)", "Content-Type": JSONAPI.mediaType]) { $1 }

                let device = try await identity.send(
                    "POST", "/v1/me/devices", headers: bearer,
                    body: Array(#"{"data":{"type":"devices","attributes":{"platform":"ios","pushToken":"tok-anna-1","appVersion":"2.4.0","name":"Anna's iPhone","locale":"nl"}}}"#.utf8))
                #expect(device.status == 201, "\(device)")

                try await identity.db.waitUntilProjected()
                let bell = try await identity.send("GET", "/v1/me/notifications", headers: bearer.merging(["Accept-Language": "nl"]) { $1 })
                #expect(bell.status == 200, "\(bell)")
                let entries = try #require(bell.json["data"] as? [[String: Any]])
                #expect(entries.count == 2)
                let newest = try #require(entries.first?["attributes"] as? [String: Any])
                #expect(newest["event"] as? String == "new_sign_in")
                #expect(newest["category"] as? String == "security")
                #expect((newest["ids"] as? [String: Any])?["signInId"] as? String == signInId, "the entry of this very sign-in")
                #expect(newest["title"] as? String == "Nieuwe aanmelding op je account")
                // And the sign-in was on the iPhone app, as the log has it.
                #expect(
                    try await identity.db.scalar("SELECT payload->>'platform' FROM events WHERE payload->>'signInId' = '\(signInId)'", String.self) == "app:ios")
            }
        }
    }

    /// Somebody guessing at the account: at the fifth wrong password within an hour the person finds
    /// it on their bell (a security notification, pushed like the others), once an hour at most, and
    /// nothing says how near the guesses were. A used refresh token presented again ends its sign-in
    /// and lands there too.
    @Test func repeatedWrongPasswordsAndAStolenRefreshTokenLandOnTheBell() async throws {
        try await IdentityHarness.with(extraRoutes: { pool in BellRoutes.routes(client: pool) }) { identity in
            try await InboxProjections.prepareLiveTables(client: identity.db.client)
            identity.clock.stop()
            try await identity.db.withProjectors {
                try await identity.account("anna@example.com")
                func told() async throws -> Int {
                    try await identity.db.scalar("SELECT count(*)::int FROM events WHERE type = 'sign_in_attempts_failed'", Int.self)
                }
                for index in 0..<4 { _ = try await identity.password("anna@example.com", "guess-\(index)", from: "127.0.0.9\(index)") }
                #expect(try await told() == 0, "four are not yet a pattern")
                _ = try await identity.password("anna@example.com", "guess-4", from: "127.0.0.95")
                #expect(try await told() == 1)
                for index in 5..<8 { _ = try await identity.password("anna@example.com", "guess-\(index)", from: "127.0.0.9\(index)") }
                #expect(try await told() == 1, "once an hour at most")
                // An address nobody has is counted the same way, and tells nobody.
                for index in 0..<6 { _ = try await identity.password("nobody@example.com", "guess-\(index)", from: "127.0.0.11\(index)") }
                #expect(try await told() == 1)
                let payload = try await identity.db.scalar("SELECT payload::text FROM events WHERE type = 'sign_in_attempts_failed'", String.self)
                #expect(!payload.contains("guess"), "\(payload)")
                identity.clock.advance(3_601)
                for index in 0..<5 { _ = try await identity.password("anna@example.com", "later-\(index)", from: "127.0.0.12\(index)") }
                #expect(try await told() == 2, "the next hour tells again")

                // The refresh token, used once by the app, presented again by whoever copied it.
                let signIn = try await identity.password("anna@example.com", "correct horse battery", scope: "account:read", from: "127.0.0.130")
                #expect(signIn.status == 200, "\(signIn)")
                let stolen = try #require(signIn["refresh_token"])
                let refresh = [("grant_type", "refresh_token"), ("client_id", IdentityHarness.client), ("refresh_token", stolen)]
                let renewed = try await identity.token(refresh)
                #expect(renewed.status == 200, "\(renewed)")
                let replayed = try await identity.token(refresh)
                #expect(replayed.status == 400 && replayed["error"] == "invalid_grant", "\(replayed)")
                #expect(try await identity.db.scalar("SELECT count(*)::int FROM events WHERE type = 'refresh_token_reused'", Int.self) == 1)

                try await identity.db.waitUntilProjected()
                let access = try #require(signIn["access_token"])
                let bell = try await identity.send("GET", "/v1/me/notifications", headers: ["Authorization": "Bearer \(access)"])
                #expect(bell.status == 200, "\(bell)")
                let entries = try #require(bell.json["data"] as? [[String: Any]]).compactMap { $0["attributes"] as? [String: Any] }
                let events = entries.compactMap { $0["event"] as? String }
                #expect(events.filter { $0 == "sign_in_attempts_failed" }.count == 2, "\(events)")
                #expect(events.first == "refresh_token_reused", "\(events)")
                #expect(entries.filter { ($0["event"] as? String)?.hasPrefix("sign_in_attempts") == true || $0["event"] as? String == "refresh_token_reused" }
                    .allSatisfy { $0["category"] as? String == "security" })
                #expect(entries.first?["title"] as? String == "A sign-in of your account was ended for your safety")
                // Pushed as the other security notifications are: their plan has the push channel.
                let planned = NotificationPlanner.notifications(for: SignInAttemptsFailed(personId: "p", attempts: 5), facts: .init())
                #expect(planned.map(\.kind) == [.signInAttemptsFailed] && planned.first?.kind.category == .security)
            }
        }
    }
}
