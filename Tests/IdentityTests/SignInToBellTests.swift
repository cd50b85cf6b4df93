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
}
