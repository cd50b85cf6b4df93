import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

/// `/v1/me/blocks` through real sockets: a block closes the threads between the two at once, for
/// everybody on the shop's side; lifting it opens only what no other block keeps closed.
@Suite struct BlockRoutesTests {
    static func block(_ type: String, _ id: String) -> String {
        #"{"data":{"type":"blocks","relationships":{"blocked":{"data":{"type":"\#(type)","id":"\#(id)"}}}}}"#
    }

    static func closed(_ api: ConversationAPI, _ person: String, _ conversation: String) async throws -> Bool? {
        try await api.send(person, "GET", "/v1/conversations/\(conversation)").attributes["closed"] as? Bool
    }

    static func events(_ api: ConversationAPI, _ type: String) async throws -> [String] {
        try await api.db.client.query(
            "SELECT stream_id || ' ' || (metadata->>'origin') AS e FROM events WHERE type = $1 ORDER BY position", binds: [PostgresBind(type)]
        ) { try $0.decode(String.self, "e") }
    }

    @Test func aBlockClosesTheThreadsBetweenThemAtOnceAndOnlyTheLastLiftOpensThem() async throws {
        try await ConversationAPI.with(setup: ConversationRoutesTests.setup) { api in
            // alice's threads with s1 (sam and sue work there) and s2 (sue only); bob's with s1.
            var threads: [String: String] = [:]
            for (person, watch) in [("alice", "w1"), ("alice", "w5"), ("bob", "w1")] {
                let started = try await api.send(person, "POST", "/v1/conversations", ConversationAPI.start(watch, "Hello"))
                #expect(started.status == 201, "\(started.text)")
                threads["\(person) \(watch)"] = try #require(started.data["id"] as? String)
            }
            let (c1, c5, bobs) = (threads["alice w1"]!, threads["alice w5"]!, threads["bob w1"]!)

            // sam (of s1) blocks alice: her thread with s1 closes for everybody, at once.
            let made = try await api.send("sam", "POST", "/v1/me/blocks", Self.block("people", "alice"))
            #expect(made.status == 201, "\(made.text)")
            #expect(made.header("Location") == "/v1/me/blocks/people:alice")
            #expect(made.data["id"] as? String == "people:alice" && made.attributes["origin"] as? String == "app:ios")
            #expect(try await Self.closed(api, "alice", c1) == true)
            #expect(try await Self.closed(api, "sue", c1) == true)
            for person in ["alice", "sue", "sam"] {
                let refused = try await api.send(person, "POST", "/v1/conversations/\(c1)/messages", ConversationAPI.message("Still there?"))
                #expect(refused.status == 422 && refused.code == "conversation_closed", "\(person): \(refused.text)")
            }
            let another = try await api.send("alice", "POST", "/v1/conversations", ConversationAPI.start("w6", "And this one?"))
            #expect(another.status == 422 && another.code == "conversation_closed", "a new thread with s1 neither")
            // Not her thread with s2 (sam does not work there), nor bob's with s1.
            #expect(try await Self.closed(api, "alice", c5) == false)
            #expect(try await api.send("bob", "POST", "/v1/conversations/\(bobs)/messages", ConversationAPI.message("Hi")).status == 201)

            // Blocking again answers the block and writes nothing; the list is the blocker's.
            let again = try await api.send("sam", "POST", "/v1/me/blocks", Self.block("people", "alice"))
            #expect(again.status == 200 && again.data["id"] as? String == "people:alice", "\(again.text)")
            let list = try await api.send("sam", "GET", "/v1/me/blocks")
            let entries = list.json["data"] as? [[String: Any]] ?? []
            #expect(entries.count == 1, "\(list.text)")
            #expect(((entries.first?["relationships"] as? [String: Any])?["blocked"] as? [String: Any]).map { "\($0["data"] ?? "")" }?.contains("alice") == true)
            #expect((try await api.send("alice", "GET", "/v1/me/blocks").json["data"] as? [Any])?.isEmpty == true)

            // alice blocks the shop too: her thread is closed already, so it is not closed twice.
            #expect(try await api.send("alice", "POST", "/v1/me/blocks", Self.block("shops", "s1")).status == 201)
            #expect(try await Self.events(api, "conversation_closed_by_block") == ["conversation-\(c1) app:ios"])

            // sam lifts his: alice's block of s1 keeps it closed. She lifts hers: it opens.
            #expect(try await api.send("sam", "DELETE", "/v1/me/blocks/people:alice").status == 204)
            #expect(try await Self.closed(api, "alice", c1) == true)
            #expect(try await Self.events(api, "conversation_reopened").isEmpty)
            #expect(try await api.send("alice", "DELETE", "/v1/me/blocks/shops:s1").status == 204)
            #expect(try await Self.closed(api, "sue", c1) == false)
            #expect(try await Self.events(api, "conversation_reopened") == ["conversation-\(c1) app:ios"])
            #expect(try await api.send("alice", "POST", "/v1/conversations/\(c1)/messages", ConversationAPI.message("Thanks")).status == 201)
            #expect(try await api.send("sue", "POST", "/v1/conversations/\(c1)/messages", ConversationAPI.message("Welcome")).status == 201)
            #expect(try await api.send("alice", "DELETE", "/v1/me/blocks/shops:s1").status == 404, "lifted already")

            #expect(try await Self.events(api, "person_blocked") == ["person-sam-blocks app:ios"])
            #expect(try await Self.events(api, "person_unblocked") == ["person-sam-blocks app:ios"])
            #expect(try await Self.events(api, "shop_blocked") == ["person-alice-blocks app:ios"])
            #expect(try await Self.events(api, "shop_unblocked") == ["person-alice-blocks app:ios"])
            #expect(try await api.db.countersThatDisagreeWithARecount() == [])
        }
    }

    /// A thread the block could not see (started by another writer while the block was written,
    /// not projected yet) is closed all the same: the checks read the blocks live.
    @Test func aThreadTheBlockDidNotSeeIsClosedAllTheSame() async throws {
        try await ConversationAPI.with(setup: ConversationRoutesTests.setup) { api in
            #expect(try await api.send("alice", "POST", "/v1/me/blocks", Self.block("shops", "s2")).status == 201)
            try await api.db.append(ConversationStarted(conversationId: "late", kind: .watch, buyerId: "alice", shopId: "s2", watchId: "w5"))
            try await api.db.withProjectors { try await api.db.waitUntilProjected() }
            #expect(try await Self.closed(api, "alice", "late") == false, "no conversation_closed_by_block was written for it")
            let refused = try await api.send("sue", "POST", "/v1/conversations/late/messages", ConversationAPI.message("Hello"))
            #expect(refused.status == 422 && refused.code == "conversation_closed", "\(refused.text)")
        }
    }

    @Test func refusalsNameTheFieldAndSomebodyElsesIdsAreNotFound() async throws {
        try await ConversationAPI.with(setup: ConversationRoutesTests.setup) { api in
            let refusals: [(String, String, Int, String)] = [
                ("yourself", Self.block("people", "alice"), 422, "/data/relationships/blocked/data/id"),
                ("another type", Self.block("orders", "o1"), 422, "/data/relationships/blocked/data/type"),
                ("an empty id", Self.block("people", ""), 422, "/data/relationships/blocked/data/id"),
                ("a long id", Self.block("people", String(repeating: "x", count: 201)), 422, "/data/relationships/blocked/data/id"),
                ("no relationship", #"{"data":{"type":"blocks"}}"#, 422, "/data/relationships/blocked/data"),
                ("a document of another type", #"{"data":{"type":"people","relationships":{}}}"#, 409, "/data/type"),
            ]
            for (what, body, status, pointer) in refusals {
                let reply = try await api.send("alice", "POST", "/v1/me/blocks", body)
                #expect(reply.status == status && reply.text.contains(#""pointer":"\#(pointer)""#), "\(what): \(reply.text)")
            }
            let ownShop = try await api.send("sue", "POST", "/v1/me/blocks", Self.block("shops", "s2"))
            #expect(ownShop.status == 422, "she works there: \(ownShop.text)")
            #expect(try await api.send("bob", "POST", "/v1/me/blocks", Self.block("people", "sam")).status == 201)
            for id in ["people:sam", "garbage", "people:", "shops:s1"] {
                #expect(try await api.send("alice", "DELETE", "/v1/me/blocks/\(id)").status == 404, "\(id) is bob's or nobody's")
            }
            let readOnly = try ConversationAPI.headers("alice", scopes: [.accountRead])
            let write = try await api.client.send("POST", "/v1/me/blocks", headers: readOnly, body: Data(Self.block("people", "sam").utf8))
            #expect(write.status == 403, "account:write is needed")
            #expect(try await api.client.send("GET", "/v1/me/blocks", headers: readOnly).status == 200)
            #expect(try await api.send("bob", "GET", "/v1/me/blocks?page[size]=51").status == 400)
            #expect(try await Self.events(api, "person_blocked").count == 1, "refusals write nothing")
        }
    }
}
