import Crypto
import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import Testing

/// The bell through real sockets: pages, marks and clears, each an event, read back at once.
///
/// On a PostgreSQL cluster of its own: the inline driver applies a write at once only when no
/// older transaction of the cluster is writing, which other tests' writes would make random.
@Suite struct BellRoutesTests {
    @Test func theBellPagesMarksAndClearsAndTheNextReadShowsEachChange() async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        defer { db.client.close() }
        _ = try await db.store.append((0..<30).map { try NewEvent(SignedIn(personId: "p1", signInId: "s\($0)", platform: "web")) })
        _ = try await db.store.append([try NewEvent(PasswordChanged(personId: "p2"))])
        try await db.withProjectors { try await db.waitUntilProjected() }

        let api = APIServer(
            routes: BellRoutes.routes(client: try db.requestPool()), gate: AppVersionGate(client: db.client, refreshInterval: .zero),
            verifier: AccessTokenTests.verifier)
        let server = try HTTPServer(configuration: .init(port: 0, threads: 4), replying: { api.reply($0) })
        defer { server.shutdown() }
        let client = APITestServer(server: server, db: db)
        let p1 = ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "p1", scopes: [.accountRead, .accountWrite])),
                  "X-Wristler-App": "ios/2.4.0"]
        let p2 = ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "p2", scopes: [.accountRead, .accountWrite]))]

        // JSON:API's query parameters: include and sort are refused, and so is an unknown name of
        // only lowercase letters (the specification's own); fields[TYPE] keeps only the fields named.
        for (query, parameter, code) in [
            ("include=author", "include", "unsupported_parameter"), ("sort=-createdAt", "sort", "unsupported_parameter"),
            ("foo=bar", "foo", "invalid_parameter"), ("fields=title", "fields", "invalid_parameter"),
        ] {
            let refused = try await client.send("GET", "/v1/me/notifications?\(query)", headers: p1)
            #expect(refused.status == 400, "\(query)")
            #expect((refused.firstError["source"] as? [String: Any])?["parameter"] as? String == parameter, "\(query)")
            #expect(refused.firstError["code"] as? String == code, "\(query)")
        }
        #expect(try await client.send("GET", "/v1/me/notifications?fooBar=1&page[limit]=2", headers: p1).status == 200, "a name of its own passes")
        let sparse = try await client.send("GET", "/v1/me/notifications?page[limit]=2&fields[notifications]=title,read", headers: p1)
        #expect(sparse.status == 200)
        let sparseData = try #require(sparse.json["data"] as? [[String: Any]])
        #expect(sparseData.count == 2)
        #expect(sparseData.allSatisfy { Set(($0["attributes"] as? [String: Any])?.keys.map { $0 } ?? []) == ["title", "read"] }, "\(sparseData)")
        #expect(sparseData.allSatisfy { $0["id"] != nil && $0["type"] as? String == "notifications" }, "id and type always stay")
        #expect((sparse.json["meta"] as? [String: Any])?["unread"] as? Int == 30, "the document's own members stay")
        let none = try await client.send("GET", "/v1/me/notifications?page[limit]=1&fields[notifications]=", headers: p1)
        #expect(((none.json["data"] as? [[String: Any]])?.first)?["attributes"] == nil, "an empty fieldset leaves no attributes")

        // A walk in pages of 7, with new entries arriving during it.
        var seen: [String] = []
        var path: String? = "/v1/me/notifications?page[limit]=7"
        var pages = 0
        while let next = path {
            let page = try await client.send("GET", next, headers: p1)
            #expect(page.status == 200, "\(String(decoding: page.body, as: UTF8.self))")
            let data = try #require(page.json["data"] as? [[String: Any]])
            #expect(data.count <= 7)
            seen += data.compactMap { $0["id"] as? String }
            if pages == 0 {
                #expect((page.json["meta"] as? [String: Any])?["unread"] as? Int == 30)
                #expect(data.first?["type"] as? String == "notifications")
                let attributes = try #require(data.first?["attributes"] as? [String: Any])
                #expect(attributes["category"] as? String == "security" && attributes["type"] == nil)
                #expect(attributes["event"] as? String == "new_sign_in")
                #expect(attributes["read"] as? Bool == false)
                #expect((attributes["ids"] as? [String: Any])?["signInId"] as? String == "s29", "newest first")
                #expect(attributes["title"] as? String == "New sign-in to your account")
                let german = try await client.send("GET", next, headers: p1.merging(["Accept-Language": "de-DE, en;q=0.5"]) { $1 })
                #expect(german.header("Content-Language") == "de")
                #expect(((german.json["data"] as? [[String: Any]])?.first?["attributes"] as? [String: Any])?["title"] as? String == "Neue Anmeldung bei deinem Konto")
            }
            path = (page.json["links"] as? [String: Any])?["next"] as? String
            pages += 1
            _ = try await db.store.append([try NewEvent(SignedIn(personId: "p1", signInId: "late\(pages)", platform: "web"))])
            try await db.withProjectors { try await db.waitUntilProjected() }
        }
        #expect(pages == 5)
        #expect(seen.count == 30 && Set(seen).count == 30, "no entry twice, none of the first 30 skipped")

        // Mark one read: the next read shows it.
        let first = seen[0]
        let body = Data(#"{"data":{"type":"notifications","id":"\#(first)","attributes":{"read":true}}}"#.utf8)
        let json = ["Content-Type": JSONAPI.mediaType]
        let marked = try await client.send("PATCH", "/v1/me/notifications/\(first)", headers: p1.merging(json) { $1 }, body: body)
        #expect(marked.status == 200)
        #expect(((marked.json["data"] as? [String: Any])?["attributes"] as? [String: Any])?["read"] as? Bool == true)
        let afterMark = try await client.send("GET", "/v1/me/notifications?filter[unread]=false", headers: p1)
        #expect((afterMark.json["data"] as? [[String: Any]])?.compactMap { $0["id"] as? String } == [first])
        #expect((afterMark.json["meta"] as? [String: Any])?["unread"] as? Int == 34)

        // Somebody else's entry, or none, is 404; bad documents say where they are wrong.
        let p2Entry = try await db.scalar("SELECT notification_id FROM bell_entries WHERE person_id = 'p2'", String.self)
        #expect(try await client.send("PATCH", "/v1/me/notifications/\(p2Entry)", headers: p1.merging(json) { $1 },
                                      body: Data(#"{"data":{"type":"notifications","id":"\#(p2Entry)","attributes":{"read":true}}}"#.utf8)).status == 404)
        #expect(try await client.send("DELETE", "/v1/me/notifications/\(p2Entry)", headers: p1).status == 404)
        #expect(try await client.send("DELETE", "/v1/me/notifications/nope", headers: p1).status == 404)
        let unread = try await client.send("PATCH", "/v1/me/notifications/\(first)", headers: p1.merging(json) { $1 },
                                           body: Data(#"{"data":{"type":"notifications","id":"\#(first)","attributes":{"read":false}}}"#.utf8))
        #expect(unread.status == 422)
        #expect((unread.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/attributes/read")
        let wrongType = try await client.send("PATCH", "/v1/me/notifications/\(first)", headers: p1.merging(json) { $1 },
                                              body: Data(#"{"data":{"type":"devices","id":"\#(first)","attributes":{"read":true}}}"#.utf8))
        #expect(wrongType.status == 409)
        let malformed = try await client.send("PATCH", "/v1/me/notifications/\(first)", headers: p1.merging(json) { $1 }, body: Data("{".utf8))
        #expect(malformed.status == 400)
        #expect((malformed.firstError["source"] as? [String: Any])?["pointer"] as? String == "")
        for (query, parameter) in [("filter[unread]=maybe", "filter[unread]"), ("page[limit]=51", "page[limit]"), ("page[cursor]=garbage", "page[cursor]")] {
            let refused = try await client.send("GET", "/v1/me/notifications?\(query)", headers: p1)
            #expect(refused.status == 400, "\(query)")
            #expect((refused.firstError["source"] as? [String: Any])?["parameter"] as? String == parameter)
        }

        // Clear one, mark all read, clear all: each shows at once.
        #expect(try await client.send("DELETE", "/v1/me/notifications/\(first)", headers: p1).status == 204)
        #expect(try await client.send("DELETE", "/v1/me/notifications/\(first)", headers: p1).status == 404)
        #expect(try await client.send("POST", "/v1/me/notifications/read", headers: p1).status == 204)
        let allRead = try await client.send("GET", "/v1/me/notifications?filter[unread]=true", headers: p1)
        #expect((allRead.json["data"] as? [[String: Any]])?.isEmpty == true)
        #expect((allRead.json["meta"] as? [String: Any])?["unread"] as? Int == 0)
        #expect(try await client.send("DELETE", "/v1/me/notifications", headers: p1).status == 204)
        let cleared = try await client.send("GET", "/v1/me/notifications", headers: p1)
        #expect((cleared.json["data"] as? [[String: Any]])?.isEmpty == true)
        #expect((cleared.json["links"] as? [String: Any])?["next"] == nil)
        // p2's bell is untouched.
        #expect((try await client.send("GET", "/v1/me/notifications", headers: p2).json["data"] as? [[String: Any]])?.count == 1)

        // Every change is an event, recorded with the app's origin.
        let events = try await db.client.query(
            "SELECT type, metadata->>'origin' AS origin, metadata->>'appVersion' AS version FROM events WHERE stream_id = 'person-p1-bell' ORDER BY position"
        ) { "\(try $0.decode(String.self, "type")) \(try $0.decode(String.self, "origin")) \(try $0.decode(String.self, "version"))" }
        #expect(events == [
            "notification_read app:ios 2.4.0", "notification_deleted app:ios 2.4.0", "all_notifications_read app:ios 2.4.0",
            "all_notifications_deleted app:ios 2.4.0",
        ])
    }
}
