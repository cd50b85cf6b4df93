import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxTesting
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
            #expect(Set(OpenAPI.summaries.keys) == served, "every summary is of a served route and every route has one")
        }
    }
}
