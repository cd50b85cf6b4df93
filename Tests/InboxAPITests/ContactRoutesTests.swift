import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxTesting

import Testing

/// `/internal/v1/contacts/{personId}`, through real sockets.
@Suite struct ContactRoutesTests {
    static let secret = "accounts-secret-0123456789"

    static func withContactAPI(_ body: (APITestServer) async throws -> Void) async throws {
        try await withTestDatabase { db in
            let api = APIServer(
                routes: ContactRoutes.routes(client: try db.requestPool()), gate: nil, verifier: AccessTokenTests.verifier,
                services: ServiceCredentials(secrets: ["accounts": secret]))
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            try await body(APITestServer(server: server, db: db))
        }
    }

    static let headers = ["Authorization": "Bearer \(secret)", "Content-Type": JSONAPI.mediaType]

    static func document(id: String = "p1", email: String = "anna@example.com", language: String = "nl") -> Data {
        let escaped = email.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\r", with: "\\r").replacingOccurrences(of: "\n", with: "\\n")
        return Data(#"{"data":{"type":"contacts","id":"\#(id)","attributes":{"email":"\#(escaped)","language":"\#(language)"}}}"#.utf8)
    }

    @Test func aContactIsSetChangedReadAndDeletedOnTheSpot() async throws {
        try await Self.withContactAPI { api in
            let created = try await api.send("PUT", "/internal/v1/contacts/p1", headers: Self.headers, body: Self.document())
            #expect(created.status == 201)
            let attributes = (created.json["data"] as? [String: Any])?["attributes"] as? [String: Any]
            #expect(attributes?["email"] as? String == "anna@example.com")
            #expect(attributes?["language"] as? String == "nl")
            let changed = try await api.send(
                "PUT", "/internal/v1/contacts/p1", headers: Self.headers, body: Self.document(email: "anna.b@example.org", language: "de"))
            #expect(changed.status == 200)
            let read = try await api.send("GET", "/internal/v1/contacts/p1", headers: Self.headers)
            #expect(read.status == 200)
            #expect(((read.json["data"] as? [String: Any])?["attributes"] as? [String: Any])?["email"] as? String == "anna.b@example.org")
            let rows = try await api.db.client.query("SELECT address, language FROM contacts") {
                "\(try $0.decode(String.self, "address")) \(try $0.decode(String.self, "language"))"
            }
            #expect(rows == ["anna.b@example.org de"])
            // The log holds no address.
            #expect(try await api.db.client.query("SELECT count(*) FROM events") { try $0.decode(Int64.self, at: 0) } == [0])

            let deleted = try await api.send("DELETE", "/internal/v1/contacts/p1", headers: Self.headers)
            #expect(deleted.status == 204)
            #expect(try await api.send("GET", "/internal/v1/contacts/p1", headers: Self.headers).status == 404)
            #expect(try await api.send("DELETE", "/internal/v1/contacts/p1", headers: Self.headers).status == 204)
            #expect(try await api.db.client.query("SELECT count(*) FROM contacts") { try $0.decode(Int64.self, at: 0) } == [0])
        }
    }

    @Test(arguments: [
        ("not-an-address", "nl", "/data/attributes/email"), ("anna@example.com\r\nBcc: x@example.com", "nl", "/data/attributes/email"),
        ("änna@example.com", "nl", "/data/attributes/email"), (String(repeating: "a", count: 250) + "@example.com", "nl", "/data/attributes/email"),
        ("anna@example.com", "es", "/data/attributes/language"), ("anna@example.com", "", "/data/attributes/language"),
    ])
    func badValuesAreA422NamingTheField(email: String, language: String, pointer: String) async throws {
        try await Self.withContactAPI { api in
            let reply = try await api.send("PUT", "/internal/v1/contacts/p1", headers: Self.headers, body: Self.document(email: email, language: language))
            #expect(reply.status == 422, "\(email) \(language): \(reply.status)")
            #expect((reply.firstError["source"] as? [String: Any])?["pointer"] as? String == pointer)
            #expect(try await api.db.client.query("SELECT count(*) FROM contacts") { try $0.decode(Int64.self, at: 0) } == [0])
        }
    }

    @Test func onlyAServiceMaySetOrReadAContactAndTheIdsMustAgree() async throws {
        try await Self.withContactAPI { api in
            let person = "Bearer " + (try AccessTokenTests.signer.mint(subject: "p1", scopes: [.accountRead, .accountWrite]))
            for method in ["PUT", "GET", "DELETE"] {
                let reply = try await api.send(
                    method, "/internal/v1/contacts/p1", headers: ["Authorization": person, "Content-Type": JSONAPI.mediaType],
                    body: method == "PUT" ? Self.document() : nil)
                #expect(reply.status == 401, "\(method) with a person's token: \(reply.status)")
            }
            let mismatch = try await api.send("PUT", "/internal/v1/contacts/p1", headers: Self.headers, body: Self.document(id: "p2"))
            #expect(mismatch.status == 409)
            let tooLong = "/internal/v1/contacts/" + String(repeating: "p", count: 201)
            #expect(try await api.send("PUT", tooLong, headers: Self.headers, body: Self.document(id: String(repeating: "p", count: 201))).status == 404)
            #expect(try await api.db.client.query("SELECT count(*) FROM contacts") { try $0.decode(Int64.self, at: 0) } == [0])
        }
    }
}
