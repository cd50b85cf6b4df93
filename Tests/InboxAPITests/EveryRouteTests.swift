import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import Projections
import Testing

/// Every route of `InboxRoutes.all` against the access its table gives it, and a randomized
/// stream of bad requests that must never get a 5xx or stop the server.
@Suite struct EveryRouteTests {
    static func withFullAPI(_ body: (APITestServer, [Route]) async throws -> Void) async throws {
        try await withTestDatabase { db in
            try await InboxProjections.prepareLiveTables(client: db.client)
            let store = EventStore(client: db.client, validator: EventValidator(registry: InboxCatalogue.registry))
            let routes = InboxRoutes.all(client: try db.requestPool(), store: store, migrator: try Migrator(directory: TestDatabase.migrationsDirectory))
            let api = APIServer(
                routes: routes, gate: AppVersionGate(client: db.client, refreshInterval: .zero), verifier: AccessTokenTests.verifier,
                services: ServiceCredentials(secrets: ["orders": "orders-secret-0123456789"]))
            let server = try HTTPServer(configuration: .init(port: 0, threads: 4, maximumBodyBytes: 64 * 1024), replying: { api.reply($0) })
            defer { server.shutdown() }
            try await body(APITestServer(server: server, db: db), routes)
        }
    }

    static func path(_ pattern: String) -> String { pattern.replacingOccurrences(of: "{id}", with: "00000000-0000-0000-0000-000000000001") }

    @Test func everyRouteRefusesWhoItsTableSaysItMust() async throws {
        try await Self.withFullAPI { api, routes in
            #expect(routes.count >= 19)
            let guest = "Bearer " + (try AccessTokenTests.signer.mint(subject: "", scopes: [.catalogueRead, .contentRead, .accountRead, .accountWrite], guest: true))
            let noScopes = "Bearer " + (try AccessTokenTests.signer.mint(subject: "p1", scopes: []))
            let json = ["Content-Type": JSONAPI.mediaType]
            // A minimum for Android, in force once the gate has re-read its table (in the background).
            try await api.db.client.execute(
                "INSERT INTO app_minimum_versions VALUES ('android', '9.0', 'https://play.google.com/store/apps/details?id=eu.wristler.app')")
            let deadline = ContinuousClock.now + .seconds(5)
            while try await api.send("GET", "/v1/me/devices", headers: ["X-Wristler-App": "android/8.9.9"]).status != 426, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            for route in routes {
                let label = "\(route.method.rawValue) \(route.pattern)"
                // A body only where the method has one (the client will not send one with GET).
                let body: Data? = [HTTPMethod.get, .delete].contains(route.method) ? nil : Data("{}".utf8)
                let json = body == nil ? [:] : json
                switch route.access {
                case .open:
                    let reply = try await api.send(route.method.rawValue, Self.path(route.pattern))
                    #expect(reply.status < 400, "\(label): \(reply.status)")
                case .signedIn(let scope):
                    let none = try await api.send(route.method.rawValue, Self.path(route.pattern), headers: json, body: body)
                    #expect(none.status == 401, "\(label) without a token: \(none.status)")
                    let asGuest = try await api.send(route.method.rawValue, Self.path(route.pattern), headers: json.merging(["Authorization": guest]) { $1 }, body: body)
                    #expect(asGuest.status == 403 && asGuest.firstError["code"] as? String == "sign_in_required", "\(label) as a guest: \(asGuest.status)")
                    if let scope {
                        let without = try await api.send(route.method.rawValue, Self.path(route.pattern), headers: json.merging(["Authorization": noScopes]) { $1 }, body: body)
                        #expect(without.status == 403 && without.firstError["code"] as? String == "missing_scope", "\(label) without \(scope)")
                        #expect((without.firstError["meta"] as? [String: Any])?["scopes"] as? [String] == [scope.rawValue], "\(label)")
                    }
                    // Every app route is gated by version too.
                    let old = try await api.send(route.method.rawValue, Self.path(route.pattern), headers: ["X-Wristler-App": "android/8.9.9"])
                    #expect(old.status == 426, "\(label) from an old app: \(old.status)")
                case .service:
                    let asPerson = try await api.send(route.method.rawValue, Self.path(route.pattern), headers: json.merging(["Authorization": noScopes]) { $1 }, body: body)
                    #expect(asPerson.status == 401, "\(label) with a person's token: \(asPerson.status)")
                }
            }
        }
    }

    @Test func randomizedBadRequestsNeverGetA5xxNorStopTheServer() async throws {
        try await Self.withFullAPI { api, routes in
            var random = SystemRandomNumberGenerator()
            let token = "Bearer " + (try AccessTokenTests.signer.mint(subject: "p1", scopes: Scope.app))
            let bodies: [String] = [
                "{", "[]", "null", "\"x\"", "{\"data\":null}", "{\"data\":[]}", "{\"data\":{\"type\":7}}", "{\"data\":{\"type\":\"devices\",\"attributes\":[]}}",
                "{\"data\":{\"type\":\"devices\",\"attributes\":{\"platform\":\"ios\",\"pushToken\":\"\(String(repeating: "t", count: 5000))\"}}}",
                "{\"data\":{\"type\":\"notification-preferences\",\"attributes\":{\"categories\":{\"messages\":{\"push\":1e400}}}}}",
                "{\"data\":{\"type\":\"saved-searches\",\"attributes\":{\"name\":\"\(String(repeating: "é", count: 300))\",\"query\":{}}}}",
                "{\"data\":[{\"type\":\"events\",\"attributes\":{\"stream\":\"\",\"type\":\"\",\"payload\":{}}}]}",
                String(repeating: "[", count: 10_000), "\u{0}\u{1}\u{2}",
            ]
            let queries = ["", "?page[limit]=-1", "?page[limit]=abc", "?page[cursor]=%%%", "?page[cursor]=djF8eHx5", "?page[number]=0",
                           "?page[size]=99999999999999999999", "?filter[unread]=", "?" + String(repeating: "a=b&", count: 500)]
            let headerSets: [[String: String]] = [
                [:], ["Authorization": token], ["Authorization": "Bearer x.y.z"], ["Authorization": token, "X-Wristler-App": "ios/" + String(repeating: "9", count: 40)],
                ["Authorization": token, "Content-Type": "application/vnd.api+json; charset=utf-8"], ["Authorization": token, "Accept": "text/html"],
                ["Authorization": token, "Content-Type": JSONAPI.mediaType, "Accept-Language": String(repeating: "x,", count: 1000)],
                ["Authorization": "Bearer orders-secret-0123456789", "Content-Type": JSONAPI.mediaType],
            ]
            let methods = ["GET", "POST", "PATCH", "DELETE", "PUT", "HEAD"]
            let paths = routes.map { Self.path($0.pattern) } + ["/", "/v1", "/v1/me/devices/../../etc/passwd", "/v1/me/notifications/%00", "/internal/v1/events/x"]
            for _ in 0..<300 {
                let method = methods.randomElement(using: &random)!
                let path = paths.randomElement(using: &random)! + queries.randomElement(using: &random)!
                let headers = headerSets.randomElement(using: &random)!
                let body = ["GET", "HEAD", "DELETE"].contains(method) ? nil : Data(bodies.randomElement(using: &random)!.utf8)
                let reply = try await api.send(method, path, headers: headers, body: body)
                #expect(reply.status < 500, "\(method) \(path) \(headers) \(body.map { String(decoding: $0.prefix(80), as: UTF8.self) } ?? ""): \(reply.status) \(String(decoding: reply.body.prefix(300), as: UTF8.self))")
            }
            #expect(try await api.send("GET", "/healthz").status == 200, "the server is still there")
        }
    }
}
