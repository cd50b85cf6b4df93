import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import Testing
import Threads

/// Input PostgreSQL cannot store is the client's fault (a 4xx naming it), and a failure of ours is
/// logged with its cause.
@Suite struct PoisonInputTests {
    @Test func aNULInAnEventOfABatchIsA422PointingAtItsField() async throws {
        try await InternalEventRoutesTests.withInternalAPI { api in
            let headers = ["Authorization": "Bearer \(InternalEventRoutesTests.secret)"]
            func post(_ attributes: String) async throws -> APITestServer.Reply {
                try await api.send(
                    "POST", "/internal/v1/events", headers: headers,
                    body: Data(#"{"data":[{"type":"events","attributes":{\#(attributes)}}]}"#.utf8))
            }
            let signedIn = #""stream":"person-7-security","type":"signed_in","payload":{"personId":"7","signInId":"nul\u0000","platform":"web"}"#
            let payload = try await post(signedIn)
            #expect(payload.status == 422)
            #expect((payload.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/0/attributes/payload/signInId")
            let fine = #""stream":"person-7-security","type":"signed_in","payload":{"personId":"7","signInId":"s1","platform":"web"}"#
            let key = try await post(fine + #","idempotencyKey":"k\u0000""#)
            #expect(key.status == 422)
            #expect((key.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/0/attributes/idempotencyKey")
            let actor = try await post(fine + #","metadata":{"actor":"\u0000"}"#)
            #expect(actor.status == 422)
            #expect((actor.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/0/attributes/metadata/actor")
            #expect(try await api.db.scalar("SELECT count(*)::int FROM events", Int.self) == 0)
            #expect(try await post(fine).status == 201)
        }
    }

    @Test func aNULInASavedSearchIsA422PointingAtItsField() async throws {
        try await SavedSearchRoutesTests.withSavedSearchAPI { client in
            let headers = [
                "Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "alice", scopes: [.accountRead, .accountWrite])),
                "Content-Type": "application/vnd.api+json",
            ]
            func create(_ attributes: String) async throws -> APITestServer.Reply {
                try await client.send(
                    "POST", "/v1/me/saved-searches", headers: headers, body: Data(#"{"data":{"type":"saved-searches","attributes":{\#(attributes)}}}"#.utf8))
            }
            let query = try await create(#""name":"Daytona","query":{"signInId":"nul\u0000"}"#)
            #expect(query.status == 422)
            #expect((query.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/attributes/query/signInId")
            let name = try await create(#""name":"nul\u0000","query":{"brand":"Rolex"}"#)
            #expect(name.status == 422)
            #expect((name.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/attributes/name")
            let member = try await create(#""name":"Daytona","query":{"a/b\u0000":1}"#)
            // A name holding it is not repeated: the pointer stops at its object.
            #expect((member.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/attributes/query")
            #expect((member.firstError["detail"] as? String)?.contains("\u{0}") == false)
            #expect(try await create(#""name":"Daytona","query":{"brand":"Rolex"}"#).status == 201)
        }
    }

    @Test func aNULInAPathOrQueryParameterIsA404OrA400NamingIt() async throws {
        try await withTestDatabase { db in
            let route = Route(.get, "/v1/test/things/{id}", describedAs: RouteDescription("A test route.")) { context in
                HTTPResponse(status: 200, contentType: JSONAPI.mediaType, body: JSONAPI.encode(.object(["meta": .string(context.parameters["id"] ?? "")])))
            }
            let server = try APITestServer.start(db: db, extraRoutes: [route])
            defer { server.stop() }
            #expect(try await server.send("GET", "/v1/test/things/abc").status == 200)
            #expect(try await server.send("GET", "/v1/test/things/abc%00def").status == 404)
            let query = try await server.send("GET", "/v1/test/things/abc?filter=a%00b")
            #expect(query.status == 400)
            #expect((query.firstError["source"] as? [String: Any])?["parameter"] as? String == "filter")
        }
    }

    @Test func aFailureOfOursIsA500AndItsCauseIsLoggedWithTheRequestId() async throws {
        struct DiskOnFire: Error, CustomStringConvertible {
            var description: String { "the disk is on fire" }
        }
        let lines = Locked<[RequestLogLine]>([])
        let waits = Route(.get, "/v1/test/fails", access: .open, describedAs: RouteDescription("A test route.")) { _ in throw DiskOnFire() }
        let atOnce = Route(.get, "/v1/test/fails-at-once", access: .open, waits: false, describedAs: RouteDescription("A test route.")) { _ in throw DiskOnFire() }
        let api = APIServer(routes: [waits, atOnce], gate: nil) { line in lines.withLock { $0.append(line) } }
        let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
        defer { server.shutdown() }
        try await withTestDatabase { db in
            let client = APITestServer(server: server, db: db)
            for path in ["/v1/test/fails", "/v1/test/fails-at-once"] {
                let reply = try await client.send("GET", path, headers: ["X-Request-Id": "req-\(path.count)"])
                #expect(reply.status == 500)
                #expect(reply.firstError["code"] as? String == "internal_error")
                #expect(!String(decoding: reply.body, as: UTF8.self).contains("fire"), "the cause is not shown to the client")
                let line = lines.withLock { $0.last { $0.requestId == "req-\(path.count)" } }
                #expect(line?.status == 500)
                #expect(line?.error == "the disk is on fire")
            }
            // A refusal of the request is not a failure: no cause.
            _ = try await client.send("GET", "/v1/test/none", headers: ["X-Request-Id": "req-404"])
            #expect(lines.withLock { $0.last { $0.requestId == "req-404" } }.map { $0.status == 404 && $0.error == nil } == true)
        }
    }
}
