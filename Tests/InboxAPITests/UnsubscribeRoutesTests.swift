import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxTesting
import Mail
import Projections
import Testing

/// `/mail/unsubscribe?token=...` (RFC 8058 one-click), through real sockets.
@Suite struct UnsubscribeRoutesTests {
    static let links = try! UnsubscribeLink(keys: [try! UnsubscribeLink.Key(version: 3, secret: [UInt8](repeating: 7, count: 32))], current: 3)
    static let strangers = try! UnsubscribeLink(keys: [try! UnsubscribeLink.Key(version: 3, secret: [UInt8](repeating: 8, count: 32))], current: 3)

    static func serve(_ db: TestDatabase, _ body: (APITestServer) async throws -> Void) async throws {
        try await InboxProjections.prepareLiveTables(client: db.client)
        let api = APIServer(routes: UnsubscribeRoutes.routes(client: try db.requestPool(), links: links), gate: nil)
        let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
        defer { server.shutdown() }
        try await body(APITestServer(server: server, db: db))
    }

    static func withUnsubscribeAPI(_ body: (APITestServer) async throws -> Void) async throws {
        try await withTestDatabase { db in try await serve(db, body) }
    }

    /// On a cluster of its own, so that the change is projected inline (a writing transaction of
    /// another test's database would make it wait for the projector) and read back at once.
    static func withUnsubscribeAPIAlone(_ body: (APITestServer) async throws -> Void) async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        defer { db.client.close() }
        try await serve(db, body)
    }

    static func path(_ token: String) -> String { "/mail/unsubscribe?token=" + token }

    static func changes(_ db: TestDatabase) async throws -> [String] {
        try await db.client.query(
            "SELECT payload->>'personId' || ' ' || (payload->>'category') || ' ' || (payload->>'channel') || ' ' || (payload->>'enabled') || ' ' || (metadata->>'origin') FROM events WHERE type = 'notification_preference_changed' ORDER BY position"
        ) { try $0.decode(String.self, at: 0) }
    }

    @Test func aOneClickPostTurnsTheCategorysMailOffOnceAndAGetOnlyAsks() async throws {
        try await Self.withUnsubscribeAPIAlone { api in
            let token = try Self.links.token(personId: "p-1", category: "messages")
            // Opening the link (a person, a link checker, a preview) changes nothing.
            let page = try await api.send("GET", Self.path(token), headers: ["Accept-Language": "nl-NL, en;q=0.5"])
            #expect(page.status == 200)
            let html = String(decoding: page.body, as: UTF8.self)
            #expect(html.contains("<form method=\"post\" action=\"/mail/unsubscribe?token=\(token)\">"), "\(html)")
            #expect(html.contains("Afmelden"))
            #expect(try await Self.changes(api.db).isEmpty)
            // What a mail client's one-click button sends.
            let form = ["Content-Type": "application/x-www-form-urlencoded"]
            let posted = try await api.send("POST", Self.path(token), headers: form, body: Data("List-Unsubscribe=One-Click".utf8))
            #expect(posted.status == 200)
            #expect(String(decoding: posted.body, as: UTF8.self).contains("no longer receive e-mails about"))
            #expect(try await Self.changes(api.db) == ["p-1 messages email false web"])
            // Projected inline: the preference is off at once.
            let stored = try await api.db.client.query(
                "SELECT enabled FROM notification_preferences WHERE person_id = 'p-1' AND category = 'messages' AND channel = 'email'"
            ) { try $0.decode(Bool.self, at: 0) }
            #expect(stored == [false])
            // Again (a second click, a retry): nothing more in the log.
            #expect(try await api.send("POST", Self.path(token), headers: form, body: Data("List-Unsubscribe=One-Click".utf8)).status == 200)
            #expect(try await Self.changes(api.db).count == 1)
        }
    }

    @Test func aTokenThatIsNotOursOrNamesNoSwitchIsA400PageAndChangesNothing() async throws {
        try await Self.withUnsubscribeAPI { api in
            let good = try Self.links.token(personId: "p-1", category: "messages")
            var altered = Array(good.utf8)
            altered[altered.count - 3] = altered[altered.count - 3] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
            let tokens = [
                try Self.strangers.token(personId: "p-1", category: "messages"), String(decoding: altered, as: UTF8.self),
                try Self.links.token(personId: "p-1", category: "saved_searches"), try Self.links.token(personId: "p-1", category: "no_such_category"),
                // A list is refused whole when one of it has no switch, or is empty.
                try Self.links.token(personId: "p-1", category: "messages.saved_searches"), try Self.links.token(personId: "p-1", category: "messages.nope"),
                try Self.links.token(personId: "p-1", category: "messages..security"), try Self.links.token(personId: "p-1", category: "."),
                "", "v3.%00.x", String(repeating: "v", count: 5_000),
            ]
            for token in tokens {
                for method in ["GET", "POST"] {
                    let reply = try await api.send(method, Self.path(token))
                    #expect(reply.status == 400, "\(method) \(token.prefix(40)): \(reply.status)")
                    // A query holding U+0000 is refused before any route, as a JSON:API error.
                    if !token.contains("%00") { #expect(reply.header("Content-Type") == "text/html; charset=utf-8", "\(token.prefix(40))") }
                }
            }
            #expect(try await api.send("POST", "/mail/unsubscribe").status == 400)
            #expect(try await Self.changes(api.db).isEmpty)
        }
    }

    @Test func aTokenNamingSeveralCategoriesTurnsEachOffThatIsStillOn() async throws {
        try await Self.withUnsubscribeAPIAlone { api in
            let form = ["Content-Type": "application/x-www-form-urlencoded"]
            // security's mail is already off: only messages and orders change.
            let first = try Self.links.token(personId: "p-2", category: "security")
            #expect(try await api.send("POST", Self.path(first), headers: form, body: Data("List-Unsubscribe=One-Click".utf8)).status == 200)
            let token = try Self.links.token(personId: "p-2", category: "messages.security.orders")
            let page = try await api.send("GET", Self.path(token), headers: ["Accept-Language": "de"])
            #expect(page.status == 200)
            #expect(try await Self.changes(api.db) == ["p-2 security email false web"], "a GET changes nothing")
            let posted = try await api.send("POST", Self.path(token), headers: form, body: Data("List-Unsubscribe=One-Click".utf8))
            #expect(posted.status == 200)
            #expect(
                try await Self.changes(api.db) == ["p-2 security email false web", "p-2 messages email false web", "p-2 orders email false web"])
            let stored = try await api.db.client.query(
                "SELECT category FROM notification_preferences WHERE person_id = 'p-2' AND channel = 'email' AND NOT enabled ORDER BY category"
            ) { try $0.decode(String.self, at: 0) }
            #expect(stored == ["messages", "orders", "security"])
            #expect(try await api.send("POST", Self.path(token), headers: form, body: Data()).status == 200)
            #expect(try await Self.changes(api.db).count == 3, "again appends nothing")
        }
    }
}
