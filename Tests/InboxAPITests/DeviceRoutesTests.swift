import Foundation
import HTTPServer
import InboxAPI
import InboxTesting
import Testing

/// Push registrations through real sockets: every rule of the devices-and-push page.
@Suite struct DeviceRoutesTests {
    static func withDevicesAPI(_ body: (APITestServer, [String: String], [String: String]) async throws -> Void) async throws {
        try await withTestDatabase { db in
            let api = APIServer(
                routes: DeviceRoutes.routes(client: try db.requestPool()), gate: AppVersionGate(client: db.client, refreshInterval: .zero),
                verifier: AccessTokenTests.verifier)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 4), replying: { api.reply($0) })
            defer { server.shutdown() }
            func headers(_ person: String) throws -> [String: String] {
                ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: person, scopes: [.accountWrite])),
                 "Content-Type": JSONAPI.mediaType]
            }
            try await body(APITestServer(server: server, db: db), try headers("alice"), try headers("bob"))
        }
    }

    static func register(_ attributes: String) -> Data { Data(#"{"data":{"type":"devices","attributes":{\#(attributes)}}}"#.utf8) }

    /// After the database ended every session of the API's pool (a failover, a restart,
    /// `pg_terminate_backend`), the first GET runs again on a fresh connection rather than
    /// answering 503.
    @Test func theFirstReadAfterTheDatabaseEndedEverySessionIsAnswered() async throws {
        try await Self.withDevicesAPI { api, alice, _ in
            let registered = try await api.send("POST", "/v1/me/devices", headers: alice, body: Self.register(#""platform":"ios","pushToken":"tok-dead-1""#))
            #expect(registered.status == 201)
            #expect(try await api.send("GET", "/v1/me/devices", headers: alice).status == 200)
            let sessions = "SELECT count(*)::int FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'inbox-api'"
            #expect(try await api.db.scalar(sessions, Int.self) > 0)
            _ = try await api.db.scalar(
                "SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'inbox-api'",
                Int.self)
            for _ in 0..<100 where try await api.db.scalar(sessions, Int.self) > 0 { try await Task.sleep(for: .milliseconds(20)) }
            #expect(try await api.db.scalar(sessions, Int.self) == 0)
            let list = try await api.send("GET", "/v1/me/devices", headers: alice)
            #expect(list.status == 200, "\(String(decoding: list.body, as: UTF8.self))")
            #expect((list.json["data"] as? [[String: Any]])?.count == 1)
        }
    }

    @Test func registeringIsAnUpsertByTokenAndATokenMovesToWhoeverSignsInOnTheHandset() async throws {
        try await Self.withDevicesAPI { api, alice, bob in
            let first = try await api.send(
                "POST", "/v1/me/devices", headers: alice,
                body: Self.register(#""platform":"ios","pushToken":"tok-SECRET-1","appId":"eu.wristler.app","appVersion":"2.4.0","name":"Jeffrey's iPhone","locale":"nl","apnsEnvironment":"production""#))
            #expect(first.status == 201)
            let data = try #require(first.json["data"] as? [String: Any])
            let id = try #require(data["id"] as? String)
            let attributes = try #require(data["attributes"] as? [String: Any])
            #expect(attributes["name"] as? String == "Jeffrey's iPhone")
            #expect(attributes["locale"] as? String == "nl")
            #expect(attributes["pushToken"] == nil)

            let again = try await api.send("POST", "/v1/me/devices", headers: alice, body: Self.register(#""platform":"ios","pushToken":"tok-SECRET-1","appVersion":"2.5.0""#))
            #expect(again.status == 200, "the same token updates its row")
            #expect((again.json["data"] as? [String: Any])?["id"] as? String == id)
            #expect(((again.json["data"] as? [String: Any])?["attributes"] as? [String: Any])?["appVersion"] as? String == "2.5.0")
            #expect(((again.json["data"] as? [String: Any])?["attributes"] as? [String: Any])?["name"] as? String == "Jeffrey's iPhone", "absent fields keep their value")

            let takeover = try await api.send("POST", "/v1/me/devices", headers: bob, body: Self.register(#""platform":"ios","pushToken":"tok-SECRET-1""#))
            #expect(takeover.status == 201, "a token of somebody else's is taken over as a new registration")
            let bobsId = try #require((takeover.json["data"] as? [String: Any])?["id"] as? String)
            #expect(bobsId != id)
            #expect(try await api.send("GET", "/v1/me/devices/\(id)", headers: alice).status == 404)
            #expect((try await api.send("GET", "/v1/me/devices", headers: alice).json["data"] as? [[String: Any]])?.isEmpty == true)
            #expect(try await api.db.scalar("SELECT count(*)::int FROM devices WHERE push_token = 'tok-SECRET-1'", Int.self) == 1)

            // The token is never returned, by any route.
            for path in ["/v1/me/devices", "/v1/me/devices/\(bobsId)"] {
                let reply = try await api.send("GET", path, headers: bob)
                #expect(reply.status == 200)
                #expect(!String(decoding: reply.body, as: UTF8.self).contains("SECRET"), "\(path)")
            }
            #expect(!String(decoding: takeover.body, as: UTF8.self).contains("SECRET"))
        }
    }

    @Test func patchChangesAnythingButTheTokenAndSomebodyElsesDeviceIs404() async throws {
        try await Self.withDevicesAPI { api, alice, bob in
            let created = try await api.send("POST", "/v1/me/devices", headers: alice, body: Self.register(#""platform":"android","pushToken":"fcm-1""#))
            let id = try #require((created.json["data"] as? [String: Any])?["id"] as? String)
            let withToken = try await api.send(
                "PATCH", "/v1/me/devices/\(id)", headers: alice,
                body: Data(#"{"data":{"type":"devices","id":"\#(id)","attributes":{"pushToken":"fcm-2"}}}"#.utf8))
            #expect(withToken.status == 422)
            #expect((withToken.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/attributes/pushToken")
            let renamed = try await api.send(
                "PATCH", "/v1/me/devices/\(id)", headers: alice,
                body: Data(#"{"data":{"type":"devices","id":"\#(id)","attributes":{"name":"Pixel","locale":"de-DE"}}}"#.utf8))
            #expect(renamed.status == 200)
            #expect(((renamed.json["data"] as? [String: Any])?["attributes"] as? [String: Any])?["name"] as? String == "Pixel")
            let patchBody = Data(#"{"data":{"type":"devices","id":"\#(id)","attributes":{"name":"Mine now"}}}"#.utf8)
            #expect(try await api.send("PATCH", "/v1/me/devices/\(id)", headers: bob, body: patchBody).status == 404)
            #expect(try await api.send("GET", "/v1/me/devices/\(id)", headers: bob).status == 404)
            #expect(try await api.send("DELETE", "/v1/me/devices/\(id)", headers: bob).status == 404)
            #expect(try await api.send("GET", "/v1/me/devices/not-a-uuid", headers: alice).status == 404)
            #expect(try await api.send("DELETE", "/v1/me/devices/\(id)", headers: alice).status == 204)
            #expect(try await api.send("GET", "/v1/me/devices/\(id)", headers: alice).status == 404)
        }
    }

    @Test func aBadRegistrationIsA422NamingTheField() async throws {
        try await Self.withDevicesAPI { api, alice, _ in
            let cases: [(String, String)] = [
                (#""pushToken":"t1""#, "/data/attributes/platform"),
                (#""platform":"windows","pushToken":"t1""#, "/data/attributes/platform"),
                (#""platform":"ios""#, "/data/attributes/pushToken"),
                (#""platform":"ios","pushToken":"has space""#, "/data/attributes/pushToken"),
                (#""platform":"android","pushToken":"t1","apnsEnvironment":"production""#, "/data/attributes/apnsEnvironment"),
                (#""platform":"ios","pushToken":"t1","appVersion":"two""#, "/data/attributes/appVersion"),
                (#""platform":"ios","pushToken":"t1","locale":"nederlands!""#, "/data/attributes/locale"),
                (#""platform":"ios","pushToken":"t1","colour":"red""#, "/data/attributes/colour"),
                (#""platform":"ios","pushToken":7"#, "/data/attributes/pushToken"),
            ]
            for (attributes, pointer) in cases {
                let reply = try await api.send("POST", "/v1/me/devices", headers: alice, body: Self.register(attributes))
                #expect(reply.status == 422, "\(attributes)")
                #expect((reply.firstError["source"] as? [String: Any])?["pointer"] as? String == pointer, "\(attributes)")
            }
            #expect(try await api.db.scalar("SELECT count(*)::int FROM devices", Int.self) == 0)
            let readOnly = ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "alice", scopes: [.accountRead]))]
            let refused = try await api.send("GET", "/v1/me/devices", headers: readOnly)
            #expect(refused.status == 403)
            #expect((refused.firstError["meta"] as? [String: Any])?["scopes"] as? [String] == ["account:write"])
        }
    }

    @Test func devicesAreListedInNumberedPages() async throws {
        try await Self.withDevicesAPI { api, alice, _ in
            for index in 0..<30 {
                let reply = try await api.send("POST", "/v1/me/devices", headers: alice, body: Self.register(#""platform":"ios","pushToken":"t\#(index)""#))
                #expect(reply.status == 201)
            }
            let first = try await api.send("GET", "/v1/me/devices", headers: alice)
            #expect((first.json["data"] as? [[String: Any]])?.count == 25)
            let next = try #require((first.json["links"] as? [String: Any])?["next"] as? String)
            let second = try await api.send("GET", next, headers: alice)
            #expect((second.json["data"] as? [[String: Any]])?.count == 5)
            #expect((second.json["links"] as? [String: Any])?["next"] == nil)
            let ids = ((first.json["data"] as? [[String: Any]]) ?? []) + ((second.json["data"] as? [[String: Any]]) ?? [])
            #expect(Set(ids.compactMap { $0["id"] as? String }).count == 30)
            #expect(try await api.send("GET", "/v1/me/devices?page[size]=51", headers: alice).status == 400)
        }
    }
}
