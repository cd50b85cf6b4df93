import EventLog
import Foundation
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

/// What the app sees of an erased person's messages: each keeps its place in the thread with
/// `body: null`, `meta.erased: true` and no attachment handles, the thread's last message says
/// `erased: true`, and the other side's messages are as they were.
@Suite struct ErasedMessagesTests {
    @Test func anErasedMessageKeepsItsPlaceWithABodyOfNull() async throws {
        try await ConversationAPI.with(setup: ConversationRoutesTests.setup) { api in
            let started = try await api.send("alice", "POST", "/v1/conversations", ConversationAPI.start("w1", "Is it still available?"))
            let c = try #require(started.data["id"] as? String)
            #expect(try await api.send("sam", "POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("It is.")).status == 201)
            #expect(try await api.send("alice", "POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("Lovely, thanks")).status == 201)
            // A photo of hers, its handle on the message (as the log holds it).
            try await api.db.append(
                MessageSent(conversationId: c, messageId: "m-photo", authorSide: .buyer, authorId: "alice", body: "The box", attachmentHandles: ["h-alice-box"]))
            try await api.db.withProjectors { try await api.db.waitUntilProjected() }
            let before = try await api.send("sam", "GET", "/v1/conversations/\(c)/messages")
            #expect(before.text.contains("h-alice-box"), "\(before.text)")

            // Alice's key goes, and person_erased follows (what `inbox erase` does with the log).
            try await api.db.client.withConnection { connection in
                try connection.transaction { connection in _ = try PersonalDataKeys.erase("alice", on: connection) }
            }
            try await api.db.append(PersonErased(personId: "alice"))
            try await api.db.withProjectors { try await api.db.waitUntilProjected() }

            let page = try await api.send("sam", "GET", "/v1/conversations/\(c)/messages")
            let messages = page.json["data"] as? [[String: Any]] ?? []
            #expect(messages.count == 4, "\(page.text)")
            let bodies = messages.map { (($0["attributes"] as? [String: Any])?["body"] as? String) ?? "null" }
            #expect(bodies == ["null", "null", "It is.", "null"], "newest first: \(bodies)")
            #expect(messages.map { ($0["meta"] as? [String: Any])?["erased"] as? Bool ?? false } == [true, true, false, true])
            // Her uploads went with her: an erased message names none.
            #expect(messages.allSatisfy { (($0["attributes"] as? [String: Any])?["attachmentHandles"] as? [Any])?.isEmpty == true }, "\(page.text)")
            let thread = try await api.send("sam", "GET", "/v1/conversations/\(c)")
            let last = thread.attributes["lastMessage"] as? [String: Any]
            #expect(last?["body"] is NSNull && last?["erased"] as? Bool == true, "\(thread.text)")
            // The list (kept in memory) forgets it too.
            let list = try await api.send("sam", "GET", "/v1/conversations?filter[side]=seller")
            #expect(!list.text.contains("Lovely, thanks") && list.text.contains(#""erased":true"#), "\(list.text)")
        }
    }
}
