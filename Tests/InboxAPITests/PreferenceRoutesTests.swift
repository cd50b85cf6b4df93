import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import Testing

/// `/v1/me/notification-preferences` through real sockets.
///
/// On a cluster of its own, so that a change is projected inline and the next read shows it.
@Suite struct PreferenceRoutesTests {
    @Test func preferencesDefaultOnLockSecurityAndOrdersPushSpeakThePersonsLanguageAndChangesShowAtOnce() async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        defer { db.client.close() }
        try await db.withProjectors { try await db.waitUntilProjected() }  // the read models' tables
        let api = APIServer(
            routes: PreferenceRoutes.routes(client: try db.requestPool()), gate: AppVersionGate(client: db.client, refreshInterval: .zero),
            verifier: AccessTokenTests.verifier)
        let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
        defer { server.shutdown() }
        let client = APITestServer(server: server, db: db)
        let headers = [
            "Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "p1", scopes: [.accountRead, .accountWrite])),
            "Content-Type": JSONAPI.mediaType, "X-Wristler-App": "android/3.1.0",
        ]
        func attributes(_ reply: APITestServer.Reply) -> [String: Any] {
            ((reply.json["data"] as? [String: Any])?["attributes"] as? [String: Any]) ?? [:]
        }
        func channel(_ reply: APITestServer.Reply, _ category: String, _ channel: String) -> Any? {
            ((attributes(reply)["categories"] as? [String: Any])?[category] as? [String: Any])?[channel]
        }
        func label(_ reply: APITestServer.Reply, _ category: String) -> [String: Any] {
            ((attributes(reply)["labels"] as? [String: Any])?[category] as? [String: Any]) ?? [:]
        }

        let defaults = try await client.send("GET", "/v1/me/notification-preferences", headers: headers)
        #expect(defaults.status == 200)
        for category in ["messages", "orders", "saved_watches", "security", "shop"] {
            #expect(channel(defaults, category, "push") as? Bool == true, "\(category)")
            #expect(channel(defaults, category, "email") as? Bool == true, "\(category)")
        }
        #expect(channel(defaults, "saved_searches", "push") is NSNull)
        #expect(label(defaults, "saved_searches")["managedPerSearch"] as? Bool == true)
        #expect(label(defaults, "security")["title"] as? String == "Security")
        #expect((label(defaults, "security")["lockedNote"] as? String)?.contains("cannot be turned off") == true)
        #expect(label(defaults, "orders")["locked"] as? [String] == ["push"])
        #expect(label(defaults, "messages")["lockedNote"] == nil)
        #expect(defaults.header("Content-Language") == "en")

        for (accept, language, title) in [("nl", "nl", "Beveiliging"), ("de-CH;q=0.8, fr;q=0.9", "fr", "Sécurité"), ("de-AT", "de", "Sicherheit"), ("xx, *", "en", "Security")] {
            let reply = try await client.send("GET", "/v1/me/notification-preferences", headers: headers.merging(["Accept-Language": accept]) { $1 })
            #expect(reply.header("Content-Language") == language, "\(accept)")
            #expect(label(reply, "security")["title"] as? String == title, "\(accept)")
        }

        let change = Data(#"{"data":{"type":"notification-preferences","attributes":{"categories":{"messages":{"push":false},"orders":{"email":false,"push":true}}}}}"#.utf8)
        let changed = try await client.send("PATCH", "/v1/me/notification-preferences", headers: headers, body: change)
        #expect(changed.status == 200)
        #expect(channel(changed, "messages", "push") as? Bool == false)
        let reread = try await client.send("GET", "/v1/me/notification-preferences", headers: headers)
        #expect(channel(reread, "messages", "push") as? Bool == false, "the next read shows the change")
        #expect(channel(reread, "messages", "email") as? Bool == true)
        #expect(channel(reread, "orders", "email") as? Bool == false)
        #expect(channel(reread, "orders", "push") as? Bool == true)
        let events = try await db.client.query(
            "SELECT payload->>'category' || '.' || (payload->>'channel') || '=' || (payload->>'enabled') || ' ' || (metadata->>'origin') AS e FROM events WHERE type = 'notification_preference_changed' ORDER BY position"
        ) { try $0.decode(String.self, "e") }
        #expect(events == ["messages.push=false app:android", "orders.email=false app:android"], "the locked push staying on is no change")

        let refusals: [(String, String, String)] = [
            (#"{"security":{"push":false}}"#, "/data/attributes/categories/security/push", "locked"),
            (#"{"saved_searches":{"push":false}}"#, "/data/attributes/categories/saved_searches/push", "managed_per_search"),
            (#"{"newsletter":{"push":false}}"#, "/data/attributes/categories/newsletter", "unknown_field"),
            (#"{"messages":{"sms":false}}"#, "/data/attributes/categories/messages/sms", "unknown_field"),
            (#"{"messages":{"push":"no"}}"#, "/data/attributes/categories/messages/push", "invalid_field"),
            // A name the client sent is escaped as RFC 6901 says in the pointer, and one with a
            // control character is not echoed at all.
            (#"{"a/b~c":{"push":false}}"#, "/data/attributes/categories/a~1b~0c", "unknown_field"),
            (#"{"x\u0000y":{"push":false}}"#, "/data/attributes/categories", "invalid_field"),
        ]
        for (categories, pointer, code) in refusals {
            let reply = try await client.send(
                "PATCH", "/v1/me/notification-preferences", headers: headers,
                body: Data(#"{"data":{"type":"notification-preferences","attributes":{"categories":\#(categories)}}}"#.utf8))
            #expect(reply.status == 422, "\(categories)")
            #expect((reply.firstError["source"] as? [String: Any])?["pointer"] as? String == pointer, "\(categories)")
            #expect(reply.firstError["code"] as? String == code, "\(categories)")
            #expect((reply.firstError["detail"] as? String)?.contains("\u{0}") == false, "\(categories)")
        }
        #expect(try await db.scalar("SELECT count(*)::int FROM events WHERE type = 'notification_preference_changed'", Int.self) == 2, "a refused change writes nothing")
    }
}

@Suite struct LanguageTests {
    @Test func acceptLanguagePicksTheHighestWeightedLanguageWeHaveAndFallsBackToEnglish() {
        #expect(Language.negotiate(nil) == .en)
        #expect(Language.negotiate("nl-BE, nl;q=0.9, en;q=0.5") == .nl)
        #expect(Language.negotiate("es, de;q=0.4") == .de)
        #expect(Language.negotiate("fr;q=0, de;q=0.1") == .de)
        #expect(Language.negotiate("ja") == .en)
        #expect(Language.negotiate(";;,") == .en)
    }
}
