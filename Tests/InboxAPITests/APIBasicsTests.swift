import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Testing
import Threads

/// What every request gets right (app-guide sections 1, 2 and 7), through real sockets.
@Suite struct APIBasicsTests {
    /// A route under /v1 that answers with the origin the request would record.
    static let whoAmI = Route(.get, "/v1/test/origin", describedAs: RouteDescription("A test route.")) { context in
        let metadata = context.identity.metadata
        return HTTPResponse(
            status: 200, contentType: JSONAPI.mediaType,
            body: JSONAPI.encode(.object(["meta": .object([
                "origin": .string(metadata.origin.rawValue), "appVersion": metadata.appVersion.map(JSONValue.string) ?? .null,
                "correlationId": context.eventMetadata.correlationId.map(JSONValue.string) ?? .null,
            ])])))
    }
    static let echoBody = Route(.post, "/v1/test/echo", describedAs: RouteDescription("A test route.")) { context in
        HTTPResponse(status: 200, contentType: JSONAPI.mediaType, body: String(decoding: context.request.body, as: UTF8.self))
    }

    static func withAPI(_ body: (APITestServer) async throws -> Void) async throws {
        try await withTestDatabase { db in
            let api = try APITestServer.start(db: db, extraRoutes: [whoAmI, echoBody])
            defer { api.stop() }
            try await body(api)
        }
    }

    @Test func healthAndReadinessAnswerAndTheRequestIdIsEchoedOrMade() async throws {
        try await Self.withAPI { api in
            let health = try await api.send("GET", "/healthz", headers: ["X-Request-Id": "trace-42.a_b:c"])
            #expect(health.status == 200)
            #expect(health.header("X-Request-Id") == "trace-42.a_b:c")
            let ready = try await api.send("GET", "/readyz", headers: ["X-Request-Id": "not ok \u{7f}"])
            #expect(ready.status == 200)
            let made = try #require(ready.header("X-Request-Id"))
            #expect(made.count == 36 && made != "not ok \u{7f}")
            // A version 4 UUID in lower case, and a new one for every request.
            #expect(UUID(uuidString: made) != nil && made == made.lowercased() && Array(made)[14] == "4")
            let again = try await api.send("GET", "/healthz")
            #expect(again.header("X-Request-Id") != made)
        }
    }

    @Test func readinessIsA503WhileMigrationsArePending() async throws {
        let db = try await TestDatabase.make(migrated: false)
        let api = try APITestServer.start(db: db)
        defer {
            api.stop()
        }
        let ready = try await api.send("GET", "/readyz")
        #expect(ready.status == 503)
        #expect(ready.firstError["code"] as? String == "migrations_pending")
        #expect((ready.firstError["detail"] as? String)?.contains("001_event_log.sql") == true)
        await db.drop()
    }

    @Test func readinessWithoutADatabaseSaysOnlyThatAndLogsWhereItIs() async throws {
        let unreachable = try PostgresClient(url: "postgres://readyz_user:readyz_password@127.0.0.1:1/readyz_db", maximumConnections: 1)
        defer { unreachable.close() }
        let lines = Locked<[RequestLogLine]>([])
        let api = APIServer(
            routes: OperationsRoutes.routes(client: unreachable, migrator: try Migrator(directory: TestDatabase.migrationsDirectory)), gate: nil
        ) { line in lines.withLock { $0.append(line) } }
        let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
        defer { server.shutdown() }
        try await withTestDatabase { db in
            let ready = try await APITestServer(server: server, db: db).send("GET", "/readyz", headers: ["X-Request-Id": "readyz-1"])
            #expect(ready.status == 503)
            #expect(ready.firstError["code"] as? String == "database_unavailable")
            #expect(ready.firstError["detail"] as? String == "database unreachable")
            let body = String(decoding: ready.body, as: UTF8.self)
            for secret in ["readyz_user", "127.0.0.1", "readyz_db", ":1", "port"] { #expect(!body.contains(secret), "\(secret) in \(body)") }
            let cause = lines.withLock { $0.last { $0.requestId == "readyz-1" }?.error } ?? ""
            #expect(cause.contains("127.0.0.1"), "the log says where the database was looked for: \(cause)")
        }
    }

    /// A W3C `traceparent` carries its trace id into the request's log line and the correlation id
    /// of the events it appends; without one (or with a malformed one) the request id is used.
    @Test func aTraceparentsTraceIdIsLoggedAndCorrelatesTheEvents() async throws {
        let lines = Locked<[RequestLogLine]>([])
        let api = APIServer(routes: [Self.whoAmI], gate: nil) { line in lines.withLock { $0.append(line) } }
        let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
        defer { server.shutdown() }
        try await withTestDatabase { db in
            let client = APITestServer(server: server, db: db)
            let trace = "4bf92f3577b34da6a3ce929d0e0e4736"
            let traced = try await client.send(
                "GET", "/v1/test/origin", headers: ["traceparent": "00-\(trace)-00f067aa0ba902b7-01", "X-Request-Id": "traced-1"])
            #expect((traced.json["meta"] as? [String: Any])?["correlationId"] as? String == trace)
            #expect(lines.withLock { $0.last { $0.requestId == "traced-1" }?.traceId } == trace)
            let untraced = try await client.send("GET", "/v1/test/origin", headers: ["traceparent": "00-\(trace.uppercased())-00f067aa0ba902b7-01", "X-Request-Id": "plain-1"])
            #expect((untraced.json["meta"] as? [String: Any])?["correlationId"] as? String == "plain-1", "a malformed traceparent is none")
            #expect(lines.withLock { $0.last { $0.requestId == "plain-1" }?.traceId } == nil)
        }
        #expect(APIServer.traceId(from: "00-\(String(repeating: "0", count: 32))-00f067aa0ba902b7-01") == nil, "an all-zero trace id is invalid")
        #expect(APIServer.traceId(from: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01") == nil, "so is an all-zero parent")
        #expect(APIServer.traceId(from: "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") == nil, "version ff is invalid")
        #expect(APIServer.traceId(from: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x") == nil, "version 00 has four fields")
        #expect(APIServer.traceId(from: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x") == "4bf92f3577b34da6a3ce929d0e0e4736", "a later version may add")
    }

    @Test func anUnknownRouteIs404AndAWrongMethodIs405WithAllow() async throws {
        try await Self.withAPI { api in
            let missing = try await api.send("GET", "/v1/nothing-here")
            #expect(missing.status == 404)
            #expect(missing.header("Content-Type") == JSONAPI.mediaType)
            #expect(missing.firstError["status"] as? String == "404")
            #expect(missing.firstError["code"] as? String == "not_found")
            #expect((missing.json["jsonapi"] as? [String: Any])?["version"] as? String == "1.0")
            let wrong = try await api.send("DELETE", "/healthz")
            #expect(wrong.status == 405)
            #expect(wrong.header("Allow") == "GET")
            #expect(wrong.firstError["code"] as? String == "method_not_allowed")
        }
    }

    @Test func theAppHeaderIsRecordedAsTheOriginAndAMalformedOneIsA400NamingIt() async throws {
        try await Self.withAPI { api in
            let ios = try await api.send("GET", "/v1/test/origin", headers: ["X-Wristler-App": "ios/2.4.0"])
            #expect((ios.json["meta"] as? [String: Any])?["origin"] as? String == "app:ios")
            #expect((ios.json["meta"] as? [String: Any])?["appVersion"] as? String == "2.4.0")
            let android = try await api.send("GET", "/v1/test/origin", headers: ["X-Wristler-App": "android/3.0"])
            #expect((android.json["meta"] as? [String: Any])?["origin"] as? String == "app:android")
            let integration = try await api.send("GET", "/v1/test/origin")
            #expect((integration.json["meta"] as? [String: Any])?["origin"] as? String == "api")
            // An empty value, which HTTP allows (and schemathesis sends), is no header.
            #expect(try AppIdentity.parse("").platform == nil)
            #expect(try AppIdentity.parse(" \t").platform == nil)
            for bad in ["ios", "ios/", "windows/1.0", "ios/2.x", "ios/1.2.3.4.5", "IOS/2.4.0", "ios/2.4.0 beta"] {
                let reply = try await api.send("GET", "/v1/test/origin", headers: ["X-Wristler-App": bad])
                #expect(reply.status == 400, "\(bad)")
                #expect(reply.firstError["code"] as? String == "invalid_app_header", "\(bad)")
                #expect((reply.firstError["source"] as? [String: Any])?["header"] as? String == "X-Wristler-App", "\(bad)")
            }
        }
    }

    @Test func anAppBelowTheMinimumGets426OnEveryAPIRouteAndTheMinimumChangesWithoutARestart() async throws {
        try await Self.withAPI { api in
            #expect(try await api.send("GET", "/v1/test/origin", headers: ["X-Wristler-App": "ios/2.4.0"]).status == 200)
            try await api.db.client.execute(
                "INSERT INTO app_minimum_versions (platform, minimum_version, store_url) VALUES ('ios', '2.9.1', 'https://apps.apple.com/app/wristler')")
            // The copy is re-read in the background once stale (at once here): a request or two later,
            // or seconds on a two-core machine running every suite at once (5 s was seen to be too few).
            var old = try await api.send("GET", "/v1/test/origin", headers: ["X-Wristler-App": "ios/2.4.0"])
            let deadline = ContinuousClock.now + .seconds(30)
            while old.status != 426 && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
                old = try await api.send("GET", "/v1/test/origin", headers: ["X-Wristler-App": "ios/2.4.0"])
            }
            #expect(old.status == 426)
            #expect(old.firstError["code"] as? String == "app_update_required")
            #expect(old.firstError["title"] as? String == "Upgrade Required")
            let meta = try #require(old.firstError["meta"] as? [String: Any])
            #expect(meta["platform"] as? String == "ios")
            #expect(meta["installed_version"] as? String == "2.4.0")
            #expect(meta["minimum_version"] as? String == "2.9.1")
            #expect(meta["store_url"] as? String == "https://apps.apple.com/app/wristler")
            // Also for a route that does not exist for this method: the gate comes after routing.
            #expect(try await api.send("POST", "/v1/test/echo", headers: ["X-Wristler-App": "ios/2.9.0"], body: Data("{}".utf8)).status == 426)
            // Numerically, part by part: 2.10.0 is above 2.9.1.
            #expect(try await api.send("GET", "/v1/test/origin", headers: ["X-Wristler-App": "ios/2.10.0"]).status == 200)
            #expect(try await api.send("GET", "/v1/test/origin", headers: ["X-Wristler-App": "ios/2.9.1"]).status == 200)
            #expect(try await api.send("GET", "/v1/test/origin", headers: ["X-Wristler-App": "android/1.0.0"]).status == 200)
            #expect(try await api.send("GET", "/v1/test/origin").status == 200, "integrations are not gated")
            #expect(try await api.send("GET", "/healthz", headers: ["X-Wristler-App": "ios/1.0"]).status == 200, "operations routes are not gated")
        }
    }

    @Test func mediaTypesAreCheckedAsJSONAPISays() async throws {
        try await Self.withAPI { api in
            let body = Data(#"{"data":{"type":"x"}}"#.utf8)
            let ok = try await api.send("POST", "/v1/test/echo", headers: ["Content-Type": JSONAPI.mediaType], body: body)
            #expect(ok.status == 200)
            #expect(ok.body == body)
            for type in ["application/vnd.api+json; charset=utf-8", "application/json", "text/plain"] {
                let refused = try await api.send("POST", "/v1/test/echo", headers: ["Content-Type": type], body: body)
                #expect(refused.status == 415, "\(type)")
                #expect((refused.firstError["source"] as? [String: Any])?["header"] as? String == "Content-Type")
            }
            let onlyWithParameters = try await api.send(
                "GET", "/v1/test/origin", headers: ["Accept": "application/vnd.api+json; ext=\"https://example.com\""])
            #expect(onlyWithParameters.status == 406)
            #expect(try await api.send("GET", "/v1/test/origin", headers: ["Accept": "text/html"]).status == 406)
            #expect(try await api.send("GET", "/v1/test/origin", headers: ["Accept": "application/vnd.api+json; ext=x, application/vnd.api+json"]).status == 200)
            #expect(try await api.send("GET", "/v1/test/origin", headers: ["Accept": "*/*"]).status == 200)
        }
    }
}

@Suite struct AppVersionTests {
    @Test func versionsCompareNumericallyPartByPart() throws {
        let v = { (text: String) in AppVersion(text)! }
        #expect(v("2.10.0") > v("2.9.1"))
        #expect(v("2.4") == v("2.4.0"))
        #expect(v("2.4.0") < v("2.4.1"))
        #expect(v("10") > v("9.99.99"))
        for bad in ["", "2.", ".2", "2..4", "a.b", "1.2.3.4.5", "-1", "1234567", "2.4.0-beta"] {
            #expect(AppVersion(bad) == nil, "\(bad)")
        }
    }
}

/// A request whose statement runs past the statement timeout is a 503 to retry, not a hang.
@Suite struct RequestTimeoutTests {
    @Test func aStatementPastTheTimeoutIsA503WithRetryAfter() async throws {
        try await withTestDatabase { db in
            let slowClient = try PostgresClient(
                configuration: .init(connection: db.configuration.withStatementTimeout(.milliseconds(200)), maximumConnections: 2))
            defer { slowClient.close() }
            let slow = Route(.get, "/v1/test/slow", describedAs: RouteDescription("A test route.")) { _ in
                _ = try slowClient.withConnectionBlocking { connection in try connection.query("SELECT pg_sleep(5)") }
                return HTTPResponse(status: 204)
            }
            let api = APIServer(routes: [slow], gate: nil)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            let started = ContinuousClock.now
            let reply = try await APITestServer(server: server, db: db).send("GET", "/v1/test/slow")
            #expect(reply.status == 503)
            #expect(reply.firstError["code"] as? String == "timeout")
            #expect(reply.header("Retry-After") == "1")
            #expect(ContinuousClock.now - started < .seconds(4))
        }
    }

    /// A database that cannot be reached, or that ends the request's session (a failover, a
    /// restart), is `database_unavailable` to send again, not `write_conflict` and not a 500.
    @Test func aWriteWithoutItsDatabaseIsDatabaseUnavailableToRetry() async throws {
        let unreachable = try PostgresClient(url: "postgres://nobody@127.0.0.1:1/nothing", maximumConnections: 1)
        defer { unreachable.close() }
        try await withTestDatabase { db in
            let client = db.client
            let routes = [
                Route(.post, "/v1/test/unreachable", describedAs: RouteDescription("A test route.")) { _ in
                    _ = try unreachable.withConnectionBlocking { connection in try connection.execute("SELECT 1") }
                    return HTTPResponse(status: 204)
                },
                Route(.post, "/v1/test/terminated", describedAs: RouteDescription("A test route.")) { _ in
                    _ = try client.withConnectionBlocking { connection in try connection.execute("SELECT pg_terminate_backend(pg_backend_pid())") }
                    return HTTPResponse(status: 204)
                },
            ]
            let api = APIServer(routes: routes, gate: nil)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            let test = APITestServer(server: server, db: db)
            for path in ["/v1/test/unreachable", "/v1/test/terminated"] {
                let reply = try await test.send("POST", path)
                #expect(reply.status == 503, "\(path)")
                #expect(reply.firstError["code"] as? String == "database_unavailable", "\(path)")
                #expect(reply.header("Retry-After") == "1", "\(path)")
            }
        }
    }

    /// A deadlock PostgreSQL broke (here raised by the server with its SQLSTATE) undid the write:
    /// a 503 to send again, not a 500.
    @Test func aWritePostgreSQLUndidForADeadlockIsA503ToRetry() async throws {
        try await withTestDatabase { db in
            let client = db.client
            let route = Route(.post, "/v1/test/deadlock", describedAs: RouteDescription("A test route.")) { _ in
                _ = try client.withConnectionBlocking { connection in
                    try connection.execute("DO $$ BEGIN RAISE EXCEPTION 'deadlock detected' USING ERRCODE = '40P01'; END $$")
                }
                return HTTPResponse(status: 204)
            }
            let api = APIServer(routes: [route], gate: nil)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            let reply = try await APITestServer(server: server, db: db).send("POST", "/v1/test/deadlock")
            #expect(reply.status == 503)
            #expect(reply.firstError["code"] as? String == "write_conflict")
            #expect(reply.header("Retry-After") == "1")
        }
    }
}
