import Foundation
import HTTPServer
import InboxAPI
import InboxTesting
import Testing

/// `/v1/me/saved-searches` through real sockets, on a cluster of its own (inline projection).
@Suite struct SavedSearchRoutesTests {
    /// The saved-search routes on a cluster of their own, with their read model made.
    static func withSavedSearchAPI(_ body: (APITestServer) async throws -> Void) async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        defer { db.client.close() }
        try await db.withProjectors { try await db.waitUntilProjected() }
        let api = APIServer(
            routes: SavedSearchRoutes.routes(client: try db.requestPool()), gate: AppVersionGate(client: db.client, refreshInterval: .zero),
            verifier: AccessTokenTests.verifier)
        let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
        defer { server.shutdown() }
        try await body(APITestServer(server: server, db: db))
    }

    @Test func searchesAreCreatedChangedListedAndDeletedAndTheNextReadShowsEach() async throws {
        try await Self.withSavedSearchAPI { client in
            func headers(_ person: String) throws -> [String: String] {
                ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: person, scopes: [.accountRead, .accountWrite])),
                 "Content-Type": "application/vnd.api+json"]
            }
            let alice = try headers("alice")
            func create(_ attributes: String) async throws -> APITestServer.Reply {
                try await client.send("POST", "/v1/me/saved-searches", headers: alice, body: Data(#"{"data":{"type":"saved-searches","attributes":{\#(attributes)}}}"#.utf8))
            }
            var ids: [String] = []
            for name in ["Daytona", "Speedmaster", "Nautilus"] {
                let reply = try await create(#""name":"\#(name)","query":{"brand":"Rolex","maxPrice":25000},"interval":"instant","push":true"#)
                #expect(reply.status == 201)
                ids.append(try #require((reply.json["data"] as? [String: Any])?["id"] as? String))
            }
            let listed = try await client.send("GET", "/v1/me/saved-searches", headers: alice)
            let names = (listed.json["data"] as? [[String: Any]])?.compactMap { ($0["attributes"] as? [String: Any])?["name"] as? String }
            #expect(names == ["Daytona", "Speedmaster", "Nautilus"], "the next read shows them, oldest first")
            let query = (((listed.json["data"] as? [[String: Any]])?.first?["attributes"] as? [String: Any])?["query"] as? [String: Any])
            #expect(query?["maxPrice"] as? Int == 25000, "the search is stored as given")

            let changed = try await client.send(
                "PATCH", "/v1/me/saved-searches/\(ids[1])", headers: alice,
                body: Data(#"{"data":{"type":"saved-searches","id":"\#(ids[1])","attributes":{"interval":"weekly","push":false}}}"#.utf8))
            #expect(changed.status == 200)
            let reread = try await client.send("GET", "/v1/me/saved-searches/\(ids[1])", headers: alice)
            #expect((reread.json["data"] as? [String: Any]).flatMap { $0["attributes"] as? [String: Any] }?["interval"] as? String == "weekly")
            #expect((reread.json["data"] as? [String: Any]).flatMap { $0["attributes"] as? [String: Any] }?["push"] as? Bool == false)

            #expect(try await client.send("GET", "/v1/me/saved-searches/\(ids[0])", headers: try headers("bob")).status == 404)
            #expect(try await client.send("DELETE", "/v1/me/saved-searches/\(ids[0])", headers: try headers("bob")).status == 404)
            #expect(try await client.send("DELETE", "/v1/me/saved-searches/\(ids[0])", headers: alice).status == 204)
            #expect(try await client.send("GET", "/v1/me/saved-searches/\(ids[0])", headers: alice).status == 404)
            #expect((try await client.send("GET", "/v1/me/saved-searches", headers: alice).json["data"] as? [[String: Any]])?.count == 2)

            for (attributes, pointer) in [
                (#""query":{}"#, "/data/attributes/name"), (#""name":"x""#, "/data/attributes/query"),
                (#""name":"x","query":[1]"#, "/data/attributes/query"), (#""name":"x","query":{},"interval":"hourly""#, "/data/attributes/interval"),
                (#""name":"x","query":{},"push":"yes""#, "/data/attributes/push"), (#""name":"x","query":{},"colour":1"#, "/data/attributes/colour"),
            ] {
                let reply = try await create(attributes)
                #expect(reply.status == 422, "\(attributes)")
                #expect((reply.firstError["source"] as? [String: Any])?["pointer"] as? String == pointer, "\(attributes)")
            }
        }
    }

    /// A query nests objects and arrays at most `Schema.freeFormNesting` deep, itself included, as
    /// the OpenAPI document says (its deepest level holds no container): deeper is 422.
    @Test func aQueryNestedDeeperThanTheDocumentSaysIsRefused() async throws {
        try await Self.withSavedSearchAPI { client in
            let headers = [
                "Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "alice", scopes: [.accountRead, .accountWrite])),
                "Content-Type": "application/vnd.api+json",
            ]
            func nested(_ depth: Int) -> String {
                (1..<depth).reduce("1") { inner, level in level % 2 == 0 ? "[\(inner)]" : #"{"a":\#(inner)}"# }
            }
            for (depth, status) in [(Schema.freeFormNesting, 201), (Schema.freeFormNesting + 1, 422)] {
                let query = #"{"q":\#(nested(depth))}"#
                let reply = try await client.send(
                    "POST", "/v1/me/saved-searches", headers: headers,
                    body: Data(#"{"data":{"type":"saved-searches","attributes":{"name":"Deep","query":\#(query)}}}"#.utf8))
                #expect(reply.status == status, "a query \(depth) deep: \(String(decoding: reply.body, as: UTF8.self))")
                if status == 422 { #expect(reply.pointer == "/data/attributes/query") }
            }
        }
    }
}
