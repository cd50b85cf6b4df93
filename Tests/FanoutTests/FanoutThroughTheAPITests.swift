import Crypto
import EventLog
import Fanout
import Foundation
import HTTP2Client
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import Testing

/// What the app sees of the fan-out's cleanup: registrations made through `POST /v1/me/devices`,
/// then, after pushes, `GET /v1/me/devices` without the dead one and with the environment the
/// sandbox probe found.
@Suite(.serialized) struct FanoutThroughTheAPITests {
    @Test func aDeadTokenDisappearsFromTheDeviceListAndTheProbedEnvironmentShows() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            let key = try ES256PrivateKey.generate()
            let signer = TokenSigner(key: key, kid: "k1")
            let api = APIServer(
                routes: DeviceRoutes.routes(client: db.client), gate: AppVersionGate(client: db.client, refreshInterval: .zero),
                verifier: TokenVerifier(keys: TokenKeys(keys: ["k1": try key.publicKey])))
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            let client = try HTTP2Client()
            defer { client.shutdown() }
            let headers: [(name: String, value: String)] = [
                ("authorization", "Bearer " + (try signer.mint(subject: "p1", scopes: [.accountWrite]))), ("content-type", JSONAPI.mediaType),
                ("x-wristler-app", "ios/2.4.0"),
            ]
            func call(_ method: String, _ path: String, _ body: String = "") async throws -> HTTP2Response {
                try await client.send(
                    HTTP2Request(method: method, url: "http://127.0.0.1:\(server.port)\(path)", headers: headers, body: Array(body.utf8)))
            }
            let sandbox = apnsToken("5a0d", 1)
            for attributes in [
                #""platform":"ios","pushToken":"\#(sandbox)","appId":"eu.wristler.app","locale":"nl""#,
                #""platform":"android","pushToken":"dead-1","appId":"eu.wristler.app","locale":"de""#,
                #""platform":"android","pushToken":"fine-1","appId":"eu.wristler.app","locale":"fr""#,
            ] {
                let registered = try await call("POST", "/v1/me/devices", #"{"data":{"type":"devices","attributes":{\#(attributes)}}}"#)
                #expect(registered.status == 201, "\(String(decoding: registered.body, as: UTF8.self))")
            }
            try await db.withProjectors {
                try await db.withFanout(transport: try mock.transport()) {
                    try await db.append(SignedIn(personId: "p1", signInId: "s1", platform: "web"))
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                }
            }
            let list = try await call("GET", "/v1/me/devices")
            #expect(list.status == 200)
            let devices = (try JSONSerialization.jsonObject(with: Data(list.body)) as? [String: Any])?["data"] as? [[String: Any]] ?? []
            let attributes = devices.compactMap { $0["attributes"] as? [String: Any] }
            #expect(attributes.count == 2, "the dead registration is gone: \(attributes)")
            #expect(Set(attributes.compactMap { $0["locale"] as? String }) == ["nl", "fr"])
            let iPhone = attributes.first { $0["platform"] as? String == "ios" }
            #expect(iPhone?["apnsEnvironment"] as? String == "development", "the sandbox probe's answer: \(attributes)")
        }
    }
}
