import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

/// A shop's quick replies through real sockets: its people read and write them, nobody else sees them.
@Suite struct QuickReplyRoutesTests {
    static func withQuickReplies(_ body: (APITestServer) async throws -> Void) async throws {
        try await withTestDatabase { db in
            _ = try await db.store.append(
                try [ShopMemberAdded(shopId: "s1", personId: "kim"), ShopMemberAdded(shopId: "s1", personId: "lex"), ShopMemberAdded(shopId: "s2", personId: "mo")]
                    .map { try NewEvent(catalogueEvent: $0) })
            try await db.withProjectors { try await db.waitUntilProjected() }
            let pool = try InboxRoutes.requestPool(connection: db.configuration, size: 4)
            defer { pool.close() }
            let api = APIServer(
                routes: QuickReplyRoutes.routes(client: pool), gate: AppVersionGate(client: db.client, refreshInterval: .zero),
                verifier: AccessTokenTests.verifier)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            try await body(APITestServer(server: server, db: db))
        }
    }

    static func send(_ api: APITestServer, _ person: String, _ method: String, _ path: String, _ body: String? = nil) async throws -> APITestServer.Reply {
        try await api.send(method, path, headers: try ConversationAPI.headers(person), body: body.map { Data($0.utf8) })
    }

    static func reply(_ text: String, id: String? = nil) -> String {
        let idMember = id.map { #","id":"\#($0)""# } ?? ""
        return #"{"data":{"type":"quick-replies"\#(idMember),"attributes":{"body":\#(text)}}}"#
    }

    @Test func theShopsPeopleKeepItsQuickRepliesAndNobodyElseSeesThem() async throws {
        try await Self.withQuickReplies { api in
            let path = "/v1/sellers/s1/quick-replies"
            let made = try await Self.send(api, "kim", "POST", path, Self.reply(#""Thanks! It ships tomorrow.\nKind regards""#))
            #expect(made.status == 201, "\(made)")
            let id = try #require((made.json["data"] as? [String: Any])?["id"] as? String)
            #expect(made.header("Location") == "\(path)/\(id)")
            _ = try await Self.send(api, "lex", "POST", path, Self.reply(#""Yes, the box and papers are included.""#))

            // Lex works there too and sees both, oldest first; the last page has no next.
            let list = try await Self.send(api, "lex", "GET", "\(path)?page[size]=1")
            #expect(list.status == 200, "\(list)")
            #expect(((list.json["data"] as? [[String: Any]])?.first?["attributes"] as? [String: Any])?["body"] as? String == "Thanks! It ships tomorrow.\nKind regards")
            #expect((list.json["links"] as? [String: Any])?["next"] as? String == "\(path)?page%5Bnumber%5D=2&page%5Bsize%5D=1" || (list.json["links"] as? [String: Any])?["next"] != nil)
            let second = try await Self.send(api, "lex", "GET", "\(path)?page[number]=2&page[size]=1")
            #expect((second.json["data"] as? [[String: Any]])?.count == 1 && (second.json["links"] as? [String: Any])?["next"] == nil, "\(second)")

            // Somebody of another shop, or a buyer: 404 for the list, the reply and writes alike.
            for person in ["mo", "buyer-1"] {
                #expect(try await Self.send(api, person, "GET", path).status == 404)
                #expect(try await Self.send(api, person, "PATCH", "\(path)/\(id)", Self.reply(#""mine now""#, id: id)).status == 404)
                #expect(try await Self.send(api, person, "DELETE", "\(path)/\(id)").status == 404)
                #expect(try await Self.send(api, person, "POST", path, Self.reply(#""hello""#)).status == 404)
            }
            #expect(try await Self.send(api, "mo", "GET", "/v1/sellers/s2/quick-replies").json["data"] as? [Any] != nil)

            let changed = try await Self.send(api, "lex", "PATCH", "\(path)/\(id)", Self.reply(#""It ships today.""#, id: id))
            #expect(changed.status == 200 && changed.bodyText.contains("It ships today."), "\(changed)")

            // Refusals name the field.
            let refusals: [(String, String, Int, String)] = [
                ("blank", Self.reply(#""   \n ""#), 422, "/data/attributes/body"),
                ("too long", Self.reply("\"\(String(repeating: "x", count: 1001))\""), 422, "/data/attributes/body"),
                ("a control character", Self.reply(#""a\u0007b""#), 422, "/data/attributes/body"),
                ("not text", Self.reply("5"), 422, "/data/attributes/body"),
                ("another attribute", #"{"data":{"type":"quick-replies","attributes":{"body":"x","shop":"s2"}}}"#, 422, "/data/attributes/shop"),
                ("another type", #"{"data":{"type":"messages","attributes":{"body":"x"}}}"#, 409, "/data/type"),
            ]
            for (what, body, status, pointer) in refusals {
                let reply = try await Self.send(api, "kim", "POST", path, body)
                #expect(reply.status == status && reply.bodyText.contains(#""pointer":"\#(pointer)""#), "\(what): \(reply)")
            }

            #expect(try await Self.send(api, "kim", "DELETE", "\(path)/\(id)").status == 204)
            #expect(try await Self.send(api, "kim", "DELETE", "\(path)/\(id)").status == 404)
            #expect(try await Self.send(api, "kim", "PATCH", "\(path)/not-an-id", Self.reply(#""x""#, id: "not-an-id")).status == 404)
        }
    }

    @Test func aShopKeepsAtMostAHundred() async throws {
        try await Self.withQuickReplies { api in
            let path = "/v1/sellers/s1/quick-replies"
            for n in 0..<100 {
                let made = try await Self.send(api, n % 2 == 0 ? "kim" : "lex", "POST", path, Self.reply("\"Reply \(n)\""))
                #expect(made.status == 201, "\(n): \(made)")
            }
            let over = try await Self.send(api, "kim", "POST", path, Self.reply(#""one more""#))
            #expect(over.status == 409 && over.bodyText.contains("too_many_quick_replies"), "\(over)")
            let readOnly = try await api.send(
                "POST", path, headers: try ConversationAPI.headers("kim", scopes: [.messagesRead]), body: Data(Self.reply(#""x""#).utf8))
            #expect(readOnly.status == 403)
        }
    }
}

extension APITestServer.Reply {
    fileprivate var bodyText: String { String(decoding: body, as: UTF8.self) }
}
