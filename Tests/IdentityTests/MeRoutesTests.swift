import EventLog
import Foundation
import HTTPServer
import Identity
import InboxAPI
import InboxTesting
import Mail
import PostgresClient
import Testing

/// `/v1/me` and the sign-in list through real sockets, with tokens the identity role signs.
@Suite struct MeRoutesTests {
    static func withMe(_ body: (IdentityHarness) async throws -> Void) async throws {
        try await IdentityHarness.with(extraRoutes: { pool in MeRoutes.routes(client: pool) }, body)
    }

    /// Signs in by password from an app: (access token, refresh token).
    static func signIn(_ identity: IdentityHarness, _ email: String, app: String = "ios/2.4.0", scope: String) async throws -> (String, String) {
        let reply = try await identity.password(email, "correct horse battery", scope: scope, headers: ["X-Wristler-App": app])
        #expect(reply.status == 200, "\(reply)")
        return (reply["access_token"] ?? "", reply["refresh_token"] ?? "")
    }

    static func headers(_ token: String, app: String = "ios/2.4.0") -> [String: String] {
        ["Authorization": "Bearer \(token)", "X-Wristler-App": app, "Content-Type": "application/vnd.api+json"]
    }

    static func patch(_ attributes: String, type: String = "people") -> [UInt8] {
        Array(#"{"data":{"type":"\#(type)","attributes":{\#(attributes)}}}"#.utf8)
    }

    @Test func meIsTheSignedInPersonsAccountWithNoScopeAndAGuestMustSignIn() async throws {
        try await Self.withMe { identity in
            let account = try await identity.account("anna@example.com", givenName: "Anna")
            let (token, _) = try await Self.signIn(identity, "anna@example.com", scope: "messages:read")
            let me = try await identity.send("GET", "/v1/me", headers: Self.headers(token))
            #expect(me.status == 200, "\(me)")
            let data = try #require(me.json["data"] as? [String: Any])
            #expect(data["type"] as? String == "people")
            #expect(data["id"] as? String == account.personId)
            let attributes = try #require(data["attributes"] as? [String: Any])
            #expect(attributes["email"] as? String == "anna@example.com")
            #expect(attributes["givenName"] as? String == "Anna")
            #expect(attributes["emailVerified"] as? Bool == true)
            #expect(attributes["hasPassword"] as? Bool == true)
            #expect(attributes["secondFactor"] as? Bool == false)
            #expect(attributes["providers"] as? [String] == [])
            #expect(attributes["language"] is NSNull)
            #expect((attributes["createdAt"] as? String)?.hasSuffix("Z") == true)
            let createdWith = try #require(attributes["createdWith"] as? [String: Any])
            #expect(createdWith["origin"] as? String == "web" && createdWith["appVersion"] is NSNull, "made by the website: \(createdWith)")

            let guest = try await identity.token([("grant_type", "urn:wristler:guest"), ("client_id", IdentityHarness.client)])
            let asGuest = try await identity.send("GET", "/v1/me", headers: Self.headers(guest["access_token"] ?? ""))
            #expect(asGuest.status == 403, "\(asGuest)")
            #expect(asGuest.text.contains(#""code":"sign_in_required""#))
            #expect(try await identity.send("GET", "/v1/me").status == 401)
        }
    }

    @Test func patchingMeChangesTheNamesAndTheMailLanguageAndRefusesWhatItDoesNotTake() async throws {
        try await Self.withMe { identity in
            let account = try await identity.account("bram@example.com", givenName: "Bram")
            let (token, _) = try await Self.signIn(identity, "bram@example.com", scope: "account:write")
            let changed = try await identity.send(
                "PATCH", "/v1/me", headers: Self.headers(token), body: Self.patch(#""givenName":"Abraham","familyName":"de Vries","language":"nl""#))
            #expect(changed.status == 200, "\(changed)")
            let attributes = try #require((changed.json["data"] as? [String: Any])?["attributes"] as? [String: Any])
            #expect(attributes["givenName"] as? String == "Abraham")
            #expect(attributes["familyName"] as? String == "de Vries")
            #expect(attributes["language"] as? String == "nl")
            // The mail language is the contact's: made with the account's address where there was none.
            let contact = try await identity.db.client.withConnection { connection in try Contacts.get(personId: account.personId, on: connection) }
            #expect(contact?.address.address == "bram@example.com")
            #expect(contact?.language == .nl)

            let refusals: [(String, [UInt8], Int, String)] = [
                ("an unknown language", Self.patch(#""language":"xx""#), 422, "/data/attributes/language"),
                ("the address (not served here)", Self.patch(#""email":"other@example.com""#), 422, "/data/attributes/email"),
                ("a name too long", Self.patch(#""givenName":"\#(String(repeating: "a", count: 201))""#), 422, "/data/attributes/givenName"),
                ("a control character", Self.patch(#""familyName":"a\u0007b""#), 422, "/data/attributes/familyName"),
                ("a name that is not text", Self.patch(#""givenName":5"#), 422, "/data/attributes/givenName"),
                ("another type", Self.patch(#""givenName":"X""#, type: "accounts"), 409, "/data/type"),
            ]
            for (what, body, status, pointer) in refusals {
                let reply = try await identity.send("PATCH", "/v1/me", headers: Self.headers(token), body: body)
                #expect(reply.status == status, "\(what): \(reply)")
                #expect(reply.text.contains(#""pointer":"\#(pointer)""#), "\(what): \(reply)")
            }
            let after = try await identity.send("GET", "/v1/me", headers: Self.headers(token))
            #expect((after.json["data"] as? [String: Any]).flatMap { $0["attributes"] as? [String: Any] }?["givenName"] as? String == "Abraham")

            let (reader, _) = try await Self.signIn(identity, "bram@example.com", scope: "account:read")
            let withoutScope = try await identity.send("PATCH", "/v1/me", headers: Self.headers(reader), body: Self.patch(#""givenName":"X""#))
            #expect(withoutScope.status == 403 && withoutScope.text.contains("missing_scope"), "\(withoutScope)")
        }
    }

    @Test func theSignInListSaysHowAndWhereAndSigningOutEndsTheRefreshTokens() async throws {
        try await Self.withMe { identity in
            _ = try await identity.account("cleo@example.com")
            let other = try await identity.account("dirk@example.com")
            let scope = "account-security:write"
            let (_, phoneRefresh) = try await Self.signIn(identity, "cleo@example.com", app: "ios/2.4.0", scope: scope)
            identity.clock.advance(60)
            let (tablet, tabletRefresh) = try await Self.signIn(identity, "cleo@example.com", app: "android/3.1.0", scope: scope)
            let (_, dirkRefresh) = try await Self.signIn(identity, "dirk@example.com", scope: scope)
            _ = (other, dirkRefresh)

            let list = try await identity.send("GET", "/v1/me/sessions", headers: Self.headers(tablet, app: "android/3.1.0"))
            #expect(list.status == 200, "\(list)")
            let sessions = try #require(list.json["data"] as? [[String: Any]])
            #expect(sessions.count == 2, "only Cleo's, never paged: \(list)")
            let first = try #require(sessions.first?["attributes"] as? [String: Any])
            let second = try #require(sessions.last?["attributes"] as? [String: Any])
            #expect(first["platform"] as? String == "app:android" && first["appVersion"] as? String == "3.1.0", "newest first: \(first)")
            #expect(first["method"] as? String == "password")
            #expect(first["current"] as? Bool == true && second["current"] as? Bool == false)
            #expect(second["platform"] as? String == "app:ios" && second["appVersion"] as? String == "2.4.0")
            let phoneSession = try #require(sessions.last?["id"] as? String)

            // Somebody else's session, a made-up one, or not an id at all: 404, and nothing ends.
            let dirkSessions = try await identity.db.client.withConnection { connection in
                try connection.query("SELECT id::text FROM identity_sessions WHERE person_id = $1", other.personId).map { try $0.decode(String.self, at: 0) }
            }
            for id in [dirkSessions[0], UUID().uuidString, "not-an-id"] {
                let reply = try await identity.send("DELETE", "/v1/me/sessions/\(id)", headers: Self.headers(tablet))
                #expect(reply.status == 404, "\(id): \(reply)")
            }
            #expect(try await identity.refresh(dirkRefresh).status == 200, "Dirk's session is untouched")

            // One session signed out: its refresh token is refused at once.
            #expect(try await identity.send("DELETE", "/v1/me/sessions/\(phoneSession)", headers: Self.headers(tablet)).status == 204)
            let refused = try await identity.refresh(phoneRefresh)
            #expect(refused.status == 400 && refused["error"] == "invalid_grant", "\(refused)")
            #expect(try await identity.send("DELETE", "/v1/me/sessions/\(phoneSession)", headers: Self.headers(tablet)).status == 404, "ended once")

            // Every other session: two more sign-ins end, this one goes on.
            let (_, laptopRefresh) = try await Self.signIn(identity, "cleo@example.com", scope: scope)
            let (_, watchRefresh) = try await Self.signIn(identity, "cleo@example.com", scope: scope)
            #expect(try await identity.send("DELETE", "/v1/me/sessions", headers: Self.headers(tablet)).status == 204)
            for token in [laptopRefresh, watchRefresh] {
                #expect(try await identity.refresh(token)["error"] == "invalid_grant")
            }
            let renewed = try await identity.refresh(tabletRefresh)
            #expect(renewed.status == 200, "this session goes on: \(renewed)")
            let left = try await identity.send("GET", "/v1/me/sessions", headers: Self.headers(renewed["access_token"] ?? ""))
            #expect((left.json["data"] as? [[String: Any]])?.count == 1, "\(left)")

            // Each signing out of others is a security event (the bell and a push follow), from the
            // platform that did it; this session signing itself out would be none.
            let told = try await identity.db.client.withConnection { connection in
                try connection.query(
                    """
                    SELECT jsonb_array_length(payload->'signInIds') AS count, metadata->>'origin' AS origin, metadata->>'appVersion' AS version
                    FROM events WHERE type = 'signed_out' ORDER BY position
                    """
                ).map { "\(try $0.decode(Int.self, "count")) \(try $0.decode(String.self, "origin")) \(try $0.decode(String.self, "version"))" }
            }
            #expect(told == ["1 app:ios 2.4.0", "2 app:ios 2.4.0"], "\(told)")
            // Signing this very session out from the list: it ends, and nobody is told.
            let own = try #require((left.json["data"] as? [[String: Any]])?.first?["id"] as? String)
            let fresh = renewed["access_token"] ?? ""
            #expect(try await identity.send("DELETE", "/v1/me/sessions/\(own)", headers: Self.headers(fresh)).status == 204)
            #expect(try await identity.refresh(renewed["refresh_token"] ?? "")["error"] == "invalid_grant")
            let count = try await identity.db.scalar("SELECT count(*)::int FROM events WHERE type = 'signed_out'", Int.self)
            #expect(count == 2)

            let (narrow, _) = try await Self.signIn(identity, "cleo@example.com", scope: "account:write")
            let withoutScope = try await identity.send("GET", "/v1/me/sessions", headers: Self.headers(narrow))
            #expect(withoutScope.status == 403 && withoutScope.text.contains("account-security:write"), "\(withoutScope)")
        }
    }

    /// RFC 7009: the app's sign-out when it holds only its refresh token.
    @Test func revokingARefreshTokenEndsItsSessionAndAnUnknownTokenIsAnsweredTheSame() async throws {
        try await Self.withMe { identity in
            _ = try await identity.account("eva@example.com")
            let (access, first) = try await Self.signIn(identity, "eva@example.com", scope: "account:read")
            func revoke(_ fields: [(String, String)]) async throws -> Reply {
                try await identity.send(
                    "POST", "/oauth/revoke", headers: ["Content-Type": "application/x-www-form-urlencoded"], body: Array(FormBody.encode(fields).utf8))
            }
            let client = IdentityHarness.client
            let unknown = try await revoke([("token", String(repeating: "A", count: 43)), ("client_id", client)])
            #expect(unknown.status == 200 && unknown.body.isEmpty, "\(unknown)")
            // Another client's revocation does nothing to this client's session.
            #expect(try await revoke([("token", first), ("client_id", "seller-tools")]).status == 200)
            let renewed = try await identity.refresh(first)
            #expect(renewed.status == 200, "\(renewed)")
            let current = renewed["refresh_token"] ?? ""

            let revoked = try await revoke([("token", current), ("client_id", client), ("token_type_hint", "refresh_token")])
            #expect(revoked.status == 200 && revoked.body.isEmpty, "\(revoked)")
            #expect(revoked.header("Cache-Control") == "no-store")
            let after = try await identity.refresh(current)
            #expect(after.status == 400 && after["error"] == "invalid_grant", "\(after)")
            #expect(try await revoke([("token", current), ("client_id", client)]).status == 200, "revoked twice: the same answer")

            let accessToken = try await revoke([("token", access), ("client_id", client)])
            #expect(accessToken.status == 400 && accessToken["error"] == "unsupported_token_type", "\(accessToken)")
            let missing = try await revoke([("client_id", client)])
            #expect(missing.status == 400 && missing["error"] == "invalid_request", "\(missing)")
            let noClient = try await revoke([("token", current)])
            #expect(noClient.status == 400 && noClient["error"] == "invalid_request", "\(noClient)")
        }
    }
}
