import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import Testing

/// `POST /internal/v1/events`, through real sockets.
@Suite struct InternalEventRoutesTests {
    static let secret = "orders-secret-0123456789"

    static func withInternalAPI(_ body: (APITestServer) async throws -> Void) async throws {
        try await withTestDatabase { db in
            let store = EventStore(client: db.client, validator: EventValidator(registry: InboxCatalogue.registry))
            let api = APIServer(
                routes: InternalEventRoutes.routes(store: store), gate: nil, verifier: AccessTokenTests.verifier,
                services: ServiceCredentials(secrets: ["orders": secret]))
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            try await body(APITestServer(server: server, db: db))
        }
    }

    static func orderPaid(_ order: String, key: String? = nil, amount: String = #"{"amount":425000,"currency":"EUR"}"#) -> String {
        let idempotency = key.map { #","idempotencyKey":"\#($0)""# } ?? ""
        return #"{"type":"events","attributes":{"stream":"order-\#(order)","eventType":"order_paid","payload":{"orderId":"\#(order)","buyerId":"p1","shopId":"s1","watchId":"w1","amount":\#(amount)}\#(idempotency),"metadata":{"origin":"app:ios","appVersion":"2.4.0"}}}"#
    }

    @Test func aBatchIsAppendedWholeOrNotAtAllAndARetryWithItsKeysAppendsNothing() async throws {
        try await Self.withInternalAPI { api in
            let headers = ["Authorization": "Bearer \(Self.secret)"]
            let batch = Data(#"{"data":[\#(Self.orderPaid("o1", key: "orders:o1:paid")),\#(Self.orderPaid("o2", key: "orders:o2:paid"))]}"#.utf8)
            let first = try await api.send("POST", "/internal/v1/events", headers: headers, body: batch)
            #expect(first.status == 201)
            #expect((first.json["data"] as? [[String: Any]])?.compactMap { ($0["attributes"] as? [String: Any])?["appended"] as? Bool } == [true, true])
            let retry = try await api.send("POST", "/internal/v1/events", headers: headers, body: batch)
            #expect(retry.status == 200)
            #expect((retry.json["data"] as? [[String: Any]])?.compactMap { ($0["attributes"] as? [String: Any])?["appended"] as? Bool } == [false, false])
            let stored = try await api.db.client.query("SELECT metadata->>'service' AS s, metadata->>'origin' AS o FROM events ORDER BY position") {
                "\(try $0.decode(String.self, "s")) \(try $0.decode(String.self, "o"))"
            }
            #expect(stored == ["orders app:ios", "orders app:ios"])

            // One bad event refuses the batch, pointing at it; nothing is written.
            let bad = Data(#"{"data":[\#(Self.orderPaid("o3")),\#(Self.orderPaid("o4", amount: #"{"amount":"lots","currency":"EUR"}"#))]}"#.utf8)
            let refused = try await api.send("POST", "/internal/v1/events", headers: headers, body: bad)
            #expect(refused.status == 422)
            #expect((refused.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/1/attributes/payload/amount/amount")
            let unknownType = Data(#"{"data":[{"type":"events","attributes":{"stream":"x-1","type":"order_lost","payload":{}}}]}"#.utf8)
            let unknown = try await api.send("POST", "/internal/v1/events", headers: headers, body: unknownType)
            #expect(unknown.status == 422)
            #expect((unknown.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/0/attributes/type")
            #expect(try await api.db.scalar("SELECT count(*)::int FROM events", Int.self) == 2)
        }
    }

    /// A key already used for another event is a 409 naming the key's field; the same event sent
    /// again (its payload's keys in another order) is a retry and answers the original.
    @Test func anIdempotencyKeyReusedForAnotherEventIsAConflictNamingTheKey() async throws {
        try await Self.withInternalAPI { api in
            let headers = ["Authorization": "Bearer \(Self.secret)"]
            let first = try await api.send(
                "POST", "/internal/v1/events", headers: headers, body: Data(#"{"data":[\#(Self.orderPaid("o1", key: "orders:o1:paid"))]}"#.utf8))
            #expect(first.status == 201)
            let other = Data(
                #"{"data":[\#(Self.orderPaid("o2", key: "orders:o2:paid")),\#(Self.orderPaid("o1", key: "orders:o1:paid", amount: #"{"amount":1,"currency":"EUR"}"#))]}"#.utf8)
            let refused = try await api.send("POST", "/internal/v1/events", headers: headers, body: other)
            #expect(refused.status == 409)
            #expect(refused.firstError["code"] as? String == "idempotency_key_reused")
            #expect((refused.firstError["source"] as? [String: Any])?["pointer"] as? String == "/data/1/attributes/idempotencyKey")
            #expect(try await api.db.scalar("SELECT count(*)::int FROM events", Int.self) == 1)
            let reordered = Data(#"{"data":[\#(Self.orderPaid("o1", key: "orders:o1:paid", amount: #"{ "currency": "EUR", "amount": 425000 }"#))]}"#.utf8)
            let retry = try await api.send("POST", "/internal/v1/events", headers: headers, body: reordered)
            #expect(retry.status == 200)
        }
    }

    @Test func onlyAServiceCredentialOpensIt() async throws {
        try await Self.withInternalAPI { api in
            let body = Data(#"{"data":[\#(Self.orderPaid("o1"))]}"#.utf8)
            #expect(try await api.send("POST", "/internal/v1/events", body: body).status == 401)
            #expect(try await api.send("POST", "/internal/v1/events", headers: ["Authorization": "Bearer wrong-secret-0123456789"], body: body).status == 401)
            let personToken = try AccessTokenTests.signer.mint(subject: "p1", scopes: [.accountWrite])
            #expect(try await api.send("POST", "/internal/v1/events", headers: ["Authorization": "Bearer \(personToken)"], body: body).status == 401)
            #expect(try await api.db.scalar("SELECT count(*)::int FROM events", Int.self) == 0)
        }
    }
}
