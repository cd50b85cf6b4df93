import Foundation
import HTTPTesting
import HTTPServer
import InboxAPI
import InboxTesting
import EventLog
import Crypto
import PostgresClient
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The API on a real socket (port picked by the system) in front of a test database, with the
/// operations routes and a few test routes under /v1.
struct APITestServer {
    let server: HTTPServer
    let db: TestDatabase

    static func start(db: TestDatabase, extraRoutes: [Route] = []) throws -> APITestServer {
        let gate = AppVersionGate(client: db.client, refreshInterval: .zero)
        let migrator = try Migrator(directory: TestDatabase.migrationsDirectory)
        let api = APIServer(routes: OperationsRoutes.routes(client: db.client, migrator: migrator) + extraRoutes, gate: gate)
        let server = try HTTPServer(configuration: .init(port: 0, threads: 4), replying: { api.reply($0) })
        return APITestServer(server: server, db: db)
    }

    struct Reply {
        var status: Int
        var headers: [String: String]
        var body: Data

        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body) as? [String: Any]) ?? [:] }
        var firstError: [String: Any] { (json["errors"] as? [[String: Any]])?.first ?? [:] }
        func header(_ name: String) -> String? { headers.first { $0.key.caseInsensitiveCompare(name) == .orderedSame }?.value }
    }

    func send(_ method: String, _ path: String, headers: [String: String] = [:], body: Data? = nil) async throws -> Reply {
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(server.port)\(path)")!)
        request.httpMethod = method
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        request.httpBody = body
        let (data, response) = try await URLSession.shared.data(for: request)
        let http = response as! HTTPURLResponse
        var headers: [String: String] = [:]
        for (name, value) in http.allHeaderFields { headers["\(name)"] = "\(value)" }
        // Every 201 of every test says where its new resource is (JSON:API, "Creating Resources"),
        // but a message's, a batch of events' and a second factor's enrolment, which have no URL
        // of their own.
        if http.statusCode == 201, !path.hasSuffix("/messages"), !path.hasPrefix("/v1/me/second-factor"), path != "/internal/v1/events" {
            #expect(http.value(forHTTPHeaderField: "Location")?.hasPrefix("/") == true, "\(method) \(path): a 201 without Location")
        }
        AnswerRecorder.record(
            method: method, path: path, status: http.statusCode, contentType: http.value(forHTTPHeaderField: "Content-Type"), body: Array(data))
        if path == "/openapi.json" { AnswerRecorder.recordDocument(Array(data), name: "openapi-api.json") }
        return Reply(status: http.statusCode, headers: headers, body: data)
    }

    func stop() { server.shutdown(gracePeriod: .seconds(2)) }
}

extension TestDatabase {
    /// A pool for the routes made as `inbox serve` makes it (a statement timeout, statements kept
    /// prepared per session), so the tests run the statements the way production does.
    func requestPool() throws -> PostgresClient { try InboxRoutes.requestPool(connection: configuration, size: 4) }
}
