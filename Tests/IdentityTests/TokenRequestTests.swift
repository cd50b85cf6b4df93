import Foundation
import Identity
import InboxDomain
import InboxAPI
import InboxTesting
import Testing

/// What the token endpoint refuses, and how: always OAuth's shape (`error`, `error_description`),
/// a 4xx naming what is wrong, never a 500, never a JSON:API document.
@Suite struct TokenRequestTests {
    static let form = ["Content-Type": "application/x-www-form-urlencoded"]

    func post(_ identity: IdentityHarness, _ body: String, headers: [String: String] = Self.form, path: String = "/oauth/token") async throws -> Reply {
        try await identity.send("POST", path, headers: headers, body: Array(body.utf8))
    }

    @Test func aJSONBodyIsRefusedAsNotAForm() async throws {
        try await IdentityHarness.with { identity in
            let reply = try await post(
                identity, #"{"grant_type":"urn:wristler:guest","client_id":"wristler-app"}"#, headers: ["Content-Type": "application/json"])
            #expect(reply.status == 400, "\(reply)")
            #expect(reply["error"] == "invalid_request")
            #expect(reply["error_description"]?.contains("JSON") == true)
            #expect(reply.json["errors"] == nil, "OAuth's shape, not JSON:API")
        }
    }

    @Test func everyMalformedRequestIsA400InOAuthsShape() async throws {
        try await IdentityHarness.with { identity in
            let cases: [(String, String, [String: String], String)] = [
                ("no grant_type", "client_id=wristler-app", Self.form, "invalid_request"),
                ("an unknown grant", "grant_type=password&client_id=wristler-app&username=a&password=b", Self.form, "unsupported_grant_type"),
                ("no client", "grant_type=urn%3Awristler%3Aguest", Self.form, "invalid_request"),
                ("an unknown client", "grant_type=urn%3Awristler%3Aguest&client_id=nobody", Self.form, "invalid_client"),
                ("a field twice", "grant_type=urn%3Awristler%3Aguest&client_id=wristler-app&client_id=wristler-app", Self.form, "invalid_request"),
                ("a NUL byte", "grant_type=urn%3Awristler%3Aguest&client_id=wristler-app%00", Self.form, "invalid_request"),
                ("a line break", "grant_type=urn%3Awristler%3Anative-login&client_id=wristler-app&username=a%0Ab&password=x", Self.form, "invalid_request"),
                ("a broken escape", "grant_type=urn%3Awristler%3Aguest&client_id=wristler%2", Self.form, "invalid_request"),
                ("bytes that are not UTF-8", "grant_type=urn%3Awristler%3Aguest&client_id=%FF%FE", Self.form, "invalid_request"),
                ("another charset", "grant_type=urn%3Awristler%3Aguest&client_id=wristler-app", ["Content-Type": "application/x-www-form-urlencoded; charset=latin1"], "invalid_request"),
                ("no content type", "grant_type=urn%3Awristler%3Aguest&client_id=wristler-app", [:], "invalid_request"),
                ("a long value", "grant_type=urn%3Awristler%3Aguest&client_id=" + String(repeating: "a", count: 5000), Self.form, "invalid_request"),
                ("too many fields", (0..<40).map { "f\($0)=1" }.joined(separator: "&"), Self.form, "invalid_request"),
                ("a password without a username", "grant_type=urn%3Awristler%3Anative-login&client_id=wristler-app&password=x", Self.form, "invalid_request"),
                ("a malformed app header", "grant_type=urn%3Awristler%3Aguest&client_id=wristler-app", Self.form.merging(["X-Wristler-App": "ios"]) { $1 }, "invalid_request"),
                ("a social grant without nonce", "grant_type=urn%3Awristler%3Asocial&client_id=wristler-app&provider=apple&id_token=x", Self.form, "invalid_request"),
            ]
            for (what, body, headers, error) in cases {
                let reply = try await post(identity, body, headers: headers)
                #expect(reply.status == (error == "invalid_client" ? 400 : 400), "\(what): \(reply)")
                #expect(reply["error"] == error, "\(what): \(reply)")
                #expect(reply["error_description"]?.isEmpty == false, "\(what)")
                #expect(reply.header("Content-Type") == "application/json;charset=UTF-8", "\(what)")
            }
            let query = try await identity.send(
                "POST", "/oauth/token?username=a&password=b", headers: Self.form, body: Array("grant_type=urn%3Awristler%3Aguest&client_id=wristler-app".utf8))
            #expect(query.status == 400 && query["error"] == "invalid_request", "credentials never in the URL: \(query)")
        }
    }

    @Test func aHugeBodyIs413InOAuthsShapeAndIsNeverRead() async throws {
        try await IdentityHarness.with { identity in
            let reply = try await post(identity, "grant_type=x&client_id=" + String(repeating: "a", count: 200_000))
            #expect(reply.status == 413, "\(reply)")
            #expect(reply["error"] == "invalid_request")
        }
    }

    @Test func anAppBelowItsMinimumVersionCannotSignInAndHearsTheUpdateCodeInBothShapes() async throws {
        try await IdentityHarness.with { identity in
            try await identity.db.client.execute("INSERT INTO app_minimum_versions VALUES ('ios', '2.4.1', 'https://apps.apple.com/app/wristler')")
            var reply = Reply(status: 0, headers: [:], body: [])
            let deadline = ContinuousClock.now + .seconds(5)
            repeat {
                reply = try await identity.token(
                    [("grant_type", TokenEndpoint.grantGuest), ("client_id", IdentityHarness.client)], headers: ["X-Wristler-App": "ios/2.4.0"])
                if reply.status == 426 { break }
                try await Task.sleep(for: .milliseconds(50))
            } while ContinuousClock.now < deadline
            #expect(reply.status == 426, "\(reply)")
            #expect(reply["error"] == "app_update_required")
            let errors = try #require(reply.json["errors"] as? [[String: Any]])
            #expect(errors.first?["code"] as? String == "app_update_required")
            let meta = try #require(errors.first?["meta"] as? [String: Any])
            #expect(meta["minimum_version"] as? String == "2.4.1" && meta["store_url"] as? String == "https://apps.apple.com/app/wristler")
            let current = try await identity.token(
                [("grant_type", TokenEndpoint.grantGuest), ("client_id", IdentityHarness.client)], headers: ["X-Wristler-App": "ios/2.4.1"])
            #expect(current.status == 200)
        }
    }

    @Test func theKeysArePublishedAsAJWKSTheAPIVerifiesWith() async throws {
        try await IdentityHarness.with { identity in
            let reply = try await identity.send("GET", "/.well-known/jwks.json")
            #expect(reply.status == 200)
            let keys = try #require(reply.json["keys"] as? [[String: Any]])
            #expect(keys.count == 1)
            #expect(keys.first?["kid"] as? String == identity.role.keys.signingKid)
            #expect(keys.first?["kty"] as? String == "EC" && keys.first?["crv"] as? String == "P-256" && keys.first?["alg"] as? String == "ES256")
            #expect(keys.first?["d"] == nil, "no private part")
            // What a separate API node would load from INBOX_TOKEN_KEYS.
            let file = FileManager.default.temporaryDirectory.appendingPathComponent("jwks-\(UUID().uuidString).json")
            try Data(reply.body).write(to: file)
            defer { try? FileManager.default.removeItem(at: file) }
            let verifier = TokenVerifier(keys: try TokenKeys.load(path: file.path))
            let guest = try await identity.token([("grant_type", TokenEndpoint.grantGuest), ("client_id", IdentityHarness.client)])
            #expect(try verifier.verify(authorization: "Bearer \(try #require(guest["access_token"]))").isGuest)
        }
    }

    @Test func theWebsiteMakesAccountsThroughTheInternalAPIWithItsServiceCredential() async throws {
        try await IdentityHarness.with { identity in
            let headers = ["Authorization": "Bearer \(IdentityHarness.website)", "Content-Type": JSONAPI.mediaType]
            let document = #"{"data":{"type":"accounts","attributes":{"email":"Anna@Example.com","password":"correct horse battery","givenName":"Anna"}}}"#
            let made = try await identity.send("POST", "/internal/v1/accounts", headers: headers, body: Array(document.utf8))
            #expect(made.status == 201, "\(made)")
            let data = try #require(made.json["data"] as? [String: Any])
            let personId = try #require(data["id"] as? String)
            #expect((data["attributes"] as? [String: Any])?["emailVerified"] as? Bool == false)
            let again = try await identity.send(
                "POST", "/internal/v1/accounts", headers: headers,
                body: Array(#"{"data":{"type":"accounts","attributes":{"email":"anna@EXAMPLE.com","password":"another password"}}}"#.utf8))
            #expect(again.status == 409, "one account per address, in any case: \(again)")
            let short = try await identity.send(
                "POST", "/internal/v1/accounts", headers: headers, body: Array(#"{"data":{"type":"accounts","attributes":{"email":"b@example.com","password":"short"}}}"#.utf8))
            #expect(short.status == 422)
            let anonymous = try await identity.send("POST", "/internal/v1/accounts", headers: ["Content-Type": JSONAPI.mediaType], body: Array(document.utf8))
            #expect(anonymous.status == 401)

            #expect(try await identity.password("anna@example.com", "correct horse battery").status == 200)
            let block = try await identity.send(
                "PATCH", "/internal/v1/accounts/\(personId)", headers: headers,
                body: Array(#"{"data":{"type":"accounts","id":"\#(personId)","attributes":{"blocked":true,"blockedReason":"fraud"}}}"#.utf8))
            #expect(block.status == 200, "\(block)")
            #expect(((block.json["data"] as? [String: Any])?["attributes"] as? [String: Any])?["blocked"] as? Bool == true)
            let read = try await identity.send("GET", "/internal/v1/accounts/\(personId)", headers: headers)
            #expect(read.status == 200 && (read.json["data"] as? [String: Any])?["id"] as? String == personId, "\(read)")
            #expect(try await identity.send("GET", "/internal/v1/accounts/nobody", headers: headers).status == 404)
            #expect(try await identity.password("anna@example.com", "correct horse battery").status == 403)
            let blocked = try await identity.db.events(where: "type = 'account_blocked'").first
            #expect(try blocked?.decode(AccountBlocked.self, using: InboxCatalogue.registry).reason == "fraud", "read through the log, opened")
            let password = try await identity.send(
                "PATCH", "/internal/v1/accounts/\(personId)", headers: headers,
                body: Array(#"{"data":{"type":"accounts","attributes":{"blocked":false,"password":"a brand new password"}}}"#.utf8))
            #expect(password.status == 200, "\(password)")
            #expect(try await identity.password("anna@example.com", "a brand new password").status == 200)
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM events WHERE type = 'password_changed'", Int.self) == 1)
        }
    }
}
