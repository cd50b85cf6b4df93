import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxTesting
import Mail
import Testing

/// `/openapi.json` is true to the routes served.
@Suite struct OpenAPITests {
    @Test func theDocumentListsEveryServedRouteWithItsScopeAndNothingElse() async throws {
        try await withTestDatabase { db in
            let routes = InboxRoutes.all(client: db.client, store: db.store, migrator: try Migrator(directory: TestDatabase.migrationsDirectory))
            let api = APIServer(routes: routes, gate: nil)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            let reply = try await APITestServer(server: server, db: db).send("GET", "/openapi.json")
            #expect(reply.status == 200)
            #expect(reply.json["openapi"] as? String == "3.1.0")
            let paths = try #require(reply.json["paths"] as? [String: [String: Any]])
            var documented = Set<String>()
            for (path, operations) in paths {
                for (method, operation) in operations {
                    documented.insert("\(method.uppercased()) \(path)")
                    let summary = (operation as? [String: Any])?["summary"] as? String
                    #expect(summary?.isEmpty == false, "\(method) \(path) has no summary")
                }
            }
            let served = Set(routes.map { "\($0.method) \($0.pattern)" })
            #expect(documented == served, "missing: \(served.subtracting(documented)), extra: \(documented.subtracting(served))")
            for route in routes {
                let operation = paths[route.pattern]?[route.method.rawValue.lowercased()] as? [String: Any]
                let security = operation?["security"] as? [[String: [String]]]
                switch route.access {
                case .open: #expect(security?.isEmpty == true, "\(route.pattern)")
                case .signedIn(let scope): #expect(security?.first?["accessToken"] == (scope.map { [$0.rawValue] } ?? []), "\(route.method) \(route.pattern)")
                case .service: #expect(security?.first?["serviceCredential"] == [], "\(route.pattern)")
                }
            }
            for route in routes {
                let operation = paths[route.pattern]?[route.method.rawValue.lowercased()] as? [String: Any] ?? [:]
                let responses = operation["responses"] as? [String: [String: Any]] ?? [:]
                // OAuth's routes refuse in OAuth's shape; every other route with JSON:API errors.
                let errors = (responses["default"]?["content"] as? [String: Any])?[route.pattern.hasPrefix("/oauth/") ? "application/json" : JSONAPI.mediaType]
                #expect(errors != nil, "\(route.method) \(route.pattern): errors are described")
                let successes = responses.keys.filter { $0.hasPrefix("2") }
                #expect(!successes.isEmpty, "\(route.method) \(route.pattern) has no success response")
                for status in successes {
                    let content = responses[status]?["content"] as? [String: Any]
                    if status == "204" || route.pattern.hasPrefix("/oauth/") && content == nil {
                        #expect(content == nil, "\(route.method) \(route.pattern): a 204 has no content")
                    } else {
                        #expect(content?.isEmpty == false, "\(route.method) \(route.pattern): \(status) says what it returns")
                        // Typed: the resources it holds, not any document (a client generator makes models of them).
                        let schema = (content?[JSONAPI.mediaType] as? [String: Any])?["schema"] as? [String: Any]
                        #expect(schema?["$ref"] as? String != "#/components/schemas/Document", "\(route.method) \(route.pattern): \(status) is any document")
                    }
                }
            }
        }
    }

    /// `/v1/me/notifications/read` is also the shape of `/v1/me/notifications/{id}`; the path of
    /// literals wins, so its 405 names only what the document lists for it.
    @Test func aPathOfLiteralsAnswersOnlyTheMethodsTheDocumentListsForIt() async throws {
        try await EveryRouteTests.withFullAPI { api, _ in
            let token = "Bearer " + (try AccessTokenTests.signer.mint(subject: "p1", scopes: Scope.app))
            for method in ["PATCH", "DELETE"] {
                let reply = try await api.send(method, "/v1/me/notifications/read", headers: ["Authorization": token, "Content-Type": JSONAPI.mediaType], body: Data("{}".utf8))
                #expect(reply.status == 405, "\(method)")
                #expect(reply.header("Allow") == "POST", "\(method)")
            }
            #expect(try await api.send("DELETE", "/v1/me/notifications/n1", headers: ["Authorization": token]).status == 404)
        }
    }

    /// A contact's address is what `MailAddress` takes, as the document's pattern says it: a
    /// schema looser than the code let schemathesis send "0" and count the 422 as expected.
    @Test func theContactAddressPatternTakesWhatMailAddressTakes() async throws {
        try await withTestDatabase { db in
            let routes = InboxRoutes.all(client: db.client, store: db.store, migrator: try Migrator(directory: TestDatabase.migrationsDirectory))
            let document = try JSONSerialization.jsonObject(with: Data(JSONAPI.bytes(OpenAPI.document(routes: routes)))) as? [String: Any]
            var node: Any? = document
            for key in ["paths", "/internal/v1/contacts/{personId}", "put", "requestBody", "content", JSONAPI.mediaType, "schema", "properties", "data",
                "properties", "attributes", "properties", "email"] {
                node = (node as? [String: Any])?[key]
            }
            let email = node as? [String: Any] ?? [:]
            let pattern = try #require(email["pattern"] as? String)
            let expression = try NSRegularExpression(pattern: pattern)
            let samples = [
                "anna@example.com", "a.b+c@mail.example.nl", "0", "", "a@b", "a@-b.nl", "a@b-.nl", "a..b@example.com", ".a@example.com", "a b@example.com",
                "anna@exa_mple.com", "\(String(repeating: "a", count: 64))@example.com", "\(String(repeating: "a", count: 65))@example.com",
                "anna@\(String(repeating: "b", count: 63)).com", "anna@\(String(repeating: "b", count: 64)).com", "année@example.com", "a@b.c@d.nl",
            ]
            for sample in samples {
                let matches = expression.firstMatch(in: sample, range: NSRange(sample.startIndex..., in: sample)) != nil
                #expect(matches == ((try? MailAddress(sample)) != nil), "\(sample): the pattern says \(matches)")
            }
        }
    }

    /// The query parameters any route reads, by the readers of `RequestReading.swift`.
    static let queryNames = ["page[limit]", "page[cursor]", "page[number]", "page[size]", "filter[unread]", "filter[side]", "filter[archived]"]

    /// Each route is asked as a client would: a body that is not JSON (a route that reads a body
    /// refuses it, so the document must describe that body) and each query parameter with a bad
    /// value (a route that reads it answers 400 naming it, so the document must list it). What
    /// the document says a route answers with no content, it does.
    @Test func theDocumentDescribesEveryBodyAndQueryParameterARouteReads() async throws {
        try await EveryRouteTests.withFullAPI { api, routes in
            let token = "Bearer " + (try AccessTokenTests.signer.mint(subject: "p1", scopes: Scope.app))
            let document = try await api.send("GET", "/openapi.json").json
            let paths = try #require(document["paths"] as? [String: [String: [String: Any]]])
            var everyRead = Set<String>()
            var bodies = 0
            for route in routes {
                let operation = paths[route.pattern]?[route.method.rawValue.lowercased()] ?? [:]
                let authorization = route.access == .service ? "Bearer orders-secret-0123456789" : token
                let headers = ["Authorization": authorization, "Content-Type": JSONAPI.mediaType]
                let path = EveryRouteTests.path(route.pattern)
                if route.method != .get {
                    let reply = try await api.send(route.method.rawValue, path, headers: headers, body: Data("{".utf8))
                    let readsBody = reply.firstError["code"] as? String == "malformed_json"
                    if readsBody { bodies += 1 }
                    #expect(readsBody == (operation["requestBody"] != nil), "\(route.method) \(route.pattern): reads a body \(readsBody), describes one \(operation["requestBody"] != nil)")
                }
                let listed = Set((operation["parameters"] as? [[String: Any]] ?? []).filter { $0["in"] as? String == "query" }.compactMap { $0["name"] as? String })
                var read = Set<String>()
                for name in Self.queryNames {
                    let query = name.replacingOccurrences(of: "[", with: "%5B").replacingOccurrences(of: "]", with: "%5D") + "=not-valid"
                    let body = route.method == .get ? nil : Data("{".utf8)
                    let reply = try await api.send(route.method.rawValue, path + "?" + query, headers: headers, body: body)
                    if (reply.firstError["source"] as? [String: Any])?["parameter"] as? String == name { read.insert(name) }
                }
                everyRead.formUnion(read)
                #expect(read == listed, "\(route.method) \(route.pattern): reads \(read.sorted()), lists \(listed.sorted())")
                let responses = operation["responses"] as? [String: Any] ?? [:]
                if responses["204"] != nil && !route.pattern.contains("{") {
                    let reply = try await api.send(route.method.rawValue, path, headers: ["Authorization": authorization])
                    #expect(reply.status == 204 && reply.body.isEmpty, "\(route.method) \(route.pattern): \(reply.status)")
                }
            }
            // The probes find what they look for: every reader is used, and the routes with a body do refuse bad JSON.
            #expect(everyRead == Set(Self.queryNames))
            #expect(
                bodies == 15,
                "POST and PATCH of devices, saved searches and quick replies, POST of a block, PATCH of a notification and of the preferences, the events, POST and PATCH of a conversation, POST of a message, POST of an upload, PUT of a contact"
            )
        }
    }
}
