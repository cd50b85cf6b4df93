import EventLog
import Foundation
import Identity
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

/// Linking and unlinking Apple and Google by the person, through real sockets, with ID tokens the
/// local providers sign as Apple and Google do.
@Suite struct LinkedSignInRoutesTests {
    static func withRoutes(_ body: (IdentityHarness) async throws -> Void) async throws {
        try await IdentityHarness.with(
            providers: true,
            socialRoutes: { pool, social in
                MeRoutes.routes(client: pool)
                    + LinkedSignInRoutes.routes(client: pool, social: social, validator: EventValidator(registry: InboxCatalogue.registry))
            }, body)
    }

    static func link(_ provider: String, _ token: String, nonce: String) -> [UInt8] {
        Array(#"{"data":{"type":"linked-sign-ins","attributes":{"provider":"\#(provider)","idToken":"\#(token)","nonce":"\#(nonce)"}}}"#.utf8)
    }

    static func providers(_ identity: IdentityHarness, _ headers: [String: String]) async throws -> [String] {
        let list = try await identity.send("GET", "/v1/me/linked-sign-ins", headers: headers)
        #expect(list.status == 200, "\(list)")
        return ((list.json["data"] as? [[String: Any]]) ?? []).compactMap { $0["id"] as? String }
    }

    @Test func linkingChecksTheTokenAndItsNonceAndUnlinkingNeverLeavesNoWayIn() async throws {
        try await Self.withRoutes { identity in
            let providers = try #require(identity.providers)
            let hanna = try await identity.account("hanna@example.com")
            _ = try await identity.account("ivo@example.com")
            let (token, _) = try await MeRoutesTests.signIn(identity, "hanna@example.com", scope: "account-security:write")
            let headers = MeRoutesTests.headers(token)
            #expect(try await Self.providers(identity, headers) == [])

            // Refused: another nonce, an expired token, another audience; nothing linked.
            let refusals: [(String, String, String)] = [
                ("another nonce", try providers.idToken(.apple, subject: "000123.hanna", nonce: "n-1"), "n-2"),
                ("expired", try providers.idToken(.apple, subject: "000123.hanna", nonce: "n-1", expiresIn: -600), "n-1"),
                ("another audience", try providers.idToken(.apple, subject: "000123.hanna", audience: "com.example.other", nonce: "n-1"), "n-1"),
                ("a token past 8,192 characters", String(repeating: "a", count: 9000), "n-1"),
            ]
            for (what, idToken, nonce) in refusals {
                let reply = try await identity.send("POST", "/v1/me/linked-sign-ins", headers: headers, body: Self.link("apple", idToken, nonce: nonce))
                #expect(reply.status == 422 && reply.text.contains(#""pointer":"/data/attributes/"#), "\(what): \(reply)")
            }

            let apple = try providers.idToken(.apple, subject: "000123.hanna", nonce: "n-1")
            let linked = try await identity.send("POST", "/v1/me/linked-sign-ins", headers: headers, body: Self.link("apple", apple, nonce: "n-1"))
            #expect(linked.status == 201, "\(linked)")
            #expect(try await Self.providers(identity, headers) == ["apple"])
            let again = try await identity.send("POST", "/v1/me/linked-sign-ins", headers: headers, body: Self.link("apple", apple, nonce: "n-1"))
            #expect(again.status == 409 && again.text.contains("already_linked"), "\(again)")
            // Apple now signs Hanna in.
            let signIn = try await identity.token([
                ("grant_type", TokenEndpoint.grantSocial), ("client_id", IdentityHarness.client), ("provider", "apple"),
                ("id_token", try providers.idToken(.apple, subject: "000123.hanna", nonce: "n-3")), ("nonce", "n-3"),
            ])
            #expect(signIn.status == 200, "\(signIn)")
            #expect(try identity.verified(signIn["access_token"] ?? "").subject == hanna.personId)

            // Ivo cannot take Hanna's Apple sign-in.
            let (ivo, _) = try await MeRoutesTests.signIn(identity, "ivo@example.com", scope: "account-security:write")
            let taken = try await identity.send(
                "POST", "/v1/me/linked-sign-ins", headers: MeRoutesTests.headers(ivo),
                body: Self.link("apple", try providers.idToken(.apple, subject: "000123.hanna", nonce: "n-4"), nonce: "n-4"))
            #expect(taken.status == 409 && taken.text.contains("linked_elsewhere"), "\(taken)")

            // Unlinking: fine while the password is there; the last way in stays.
            #expect(try await identity.send("DELETE", "/v1/me/linked-sign-ins/google", headers: headers).status == 404)
            #expect(try await identity.send("DELETE", "/v1/me/linked-sign-ins/apple", headers: headers).status == 204)
            #expect(try await Self.providers(identity, headers) == [])
            let kinds = try await identity.db.client.withConnection { connection in
                try connection.query("SELECT type FROM events WHERE type LIKE 'sign_in_%' ORDER BY position").map { try $0.decode(String.self, "type") }
            }
            #expect(kinds == ["sign_in_linked", "sign_in_unlinked"])
        }
    }

    @Test func theLastWayToSignInCannotBeUnlinked() async throws {
        try await Self.withRoutes { identity in
            let providers = try #require(identity.providers)
            // An account Google made: no password.
            let made = try await identity.token([
                ("grant_type", TokenEndpoint.grantSocial), ("client_id", IdentityHarness.client), ("provider", "google"),
                ("id_token", try providers.idToken(.google, subject: "g-jan", nonce: "n-1", email: "jan@example.com")), ("nonce", "n-1"),
                ("scope", "account-security:write"),
            ])
            #expect(made.status == 200, "\(made)")
            let headers = MeRoutesTests.headers(made["access_token"] ?? "")
            let last = try await identity.send("DELETE", "/v1/me/linked-sign-ins/google", headers: headers)
            #expect(last.status == 409 && last.text.contains("last_sign_in_method"), "\(last)")
            // With Apple linked as well, Google may go; then Apple is the last.
            let apple = try providers.idToken(.apple, subject: "000999.jan", nonce: "n-2")
            #expect(try await identity.send("POST", "/v1/me/linked-sign-ins", headers: headers, body: Self.link("apple", apple, nonce: "n-2")).status == 201)
            #expect(try await identity.send("DELETE", "/v1/me/linked-sign-ins/google", headers: headers).status == 204)
            #expect(try await identity.send("DELETE", "/v1/me/linked-sign-ins/apple", headers: headers).status == 409)
            #expect(try await Self.providers(identity, headers) == ["apple"])
        }
    }
}
