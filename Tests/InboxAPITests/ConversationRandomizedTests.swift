import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxSimulation
import InboxTesting
import PostgresClient
import Projections
import Testing

/// Many people and shops writing at once through the API: starts, messages, offers, read marks,
/// archives and "no reply needed", from concurrent clients, while the async projectors run (inline
/// writers that meet each other defer to them). Afterwards every badge the API answers equals a
/// recount from the log, every counter a recount of its rows, every list holds each thread once,
/// and every message is in its thread exactly once.
@Suite struct ConversationRandomizedTests {
    static let shops = (0..<4).map { "s\($0)" }
    static let people = (0..<12).map { "p\($0)" }
    /// Two people per shop; p0 and p1 also buy, and p9 works at two shops.
    static let members: [(shop: String, person: String)] = [
        ("s0", "p0"), ("s0", "p8"), ("s1", "p1"), ("s1", "p9"), ("s2", "p9"), ("s2", "p10"), ("s3", "p11"), ("s3", "p8"),
    ]
    static let watches = (0..<16).map { (watch: "w\($0)", shop: shops[$0 % shops.count]) }

    /// What the clients learnt while they wrote: the threads and the messages the API accepted.
    actor Seen {
        var threads: [String: (buyer: String, shop: String)] = [:]
        var messages: [String: [String]] = [:]
        var refusals: [String: Int] = [:]

        func thread(_ id: String, buyer: String, shop: String) { threads[id] = (buyer, shop) }
        func message(_ id: String, in thread: String) { messages[thread, default: []].append(id) }
        func refused(_ why: String) { refusals[why, default: 0] += 1 }
        func threadList() -> [(id: String, buyer: String, shop: String)] {
            threads.keys.sorted().map { ($0, threads[$0]!.buyer, threads[$0]!.shop) }
        }
    }

    @Test func concurrentWritersLeaveEveryBadgeEqualToARecountFromTheLogAndEveryMessageInItsThreadOnce() async throws {
        let setup: [any CatalogueEvent] =
            Self.members.map { ShopMemberAdded(shopId: $0.shop, personId: $0.person) as any CatalogueEvent }
            + Self.watches.map { WatchStatusChanged(watchId: $0.watch, shopId: $0.shop, status: .forSale) }
        try await ConversationAPI.with(setup: setup, threads: 4) { api in
            let seen = Seen()
            try await api.db.withProjectors {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for worker in 0..<8 {
                        group.addTask { try await Self.write(api, seen: seen, seed: UInt64(worker + 1), operations: 40) }
                    }
                    try await group.waitForAll()
                }
                try await api.db.waitUntilProjected()
            }
            let threads = await seen.threads
            let accepted = await seen.messages
            #expect(threads.count >= 10, "the walk started threads: \(threads.count)")
            #expect(accepted.values.map(\.count).reduce(0, +) >= 100, "and wrote in them")

            #expect(try await api.db.countersThatDisagreeWithARecount() == [])
            // Each message, to a buyer or to a shop, queued exactly one notification for the fan-out.
            let messageCount = try await api.db.scalar("SELECT count(*)::int FROM events WHERE type = 'message_sent'", Int.self)
            #expect(messageCount == accepted.values.map(\.count).reduce(0, +))
            #expect(
                try await api.db.scalar("SELECT count(DISTINCT (source_position, notification_id))::int FROM notification_outbox", Int.self)
                    == messageCount)
            #expect(try await api.db.scalar("SELECT count(*)::int FROM projection_dead_letters", Int.self) == 0)

            // The badges, recounted from the log alone.
            let recount = try await Self.recount(api.db)
            for person in Self.people {
                let shops = Self.members.filter { $0.person == person }.map(\.shop)
                let buyerBadge = recount.filter { $0.key.owner == person && $0.key.side == "buyer" }.values.reduce(0, +)
                let sellerBadge = recount.filter { shops.contains($0.key.owner) && $0.key.side == "seller" }.values.reduce(0, +)
                #expect(try await api.list(person).unread == buyerBadge, "\(person) buyer")
                #expect(try await api.list(person, side: "seller").unread == sellerBadge, "\(person) seller")

                // Each side's list, archived and not, holds each of the person's threads once.
                for side in ["buyer", "seller"] {
                    var listed: [String] = []
                    for archived in [false, true] {
                        var path: String? = "/v1/conversations?filter[side]=\(side)&filter[archived]=\(archived)&page[limit]=3"
                        while let next = path {
                            let page = try await api.send(person, "GET", next)
                            #expect(page.status == 200)
                            listed += (page.json["data"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
                            path = (page.json["links"] as? [String: Any])?["next"] as? String
                        }
                    }
                    let expected = threads.filter { side == "buyer" ? $0.value.buyer == person : shops.contains($0.value.shop) }.map(\.key)
                    #expect(listed.count == Set(listed).count && Set(listed) == Set(expected), "\(person) \(side): \(listed.count) of \(expected.count)")
                }
            }

            // Every message the API accepted is in its thread exactly once, as the log has it.
            let logged = try await Self.messagesInTheLog(api.db)
            for (thread, parties) in threads {
                var walked: [String] = []
                var path: String? = "/v1/conversations/\(thread)/messages?page[limit]=7"
                while let next = path {
                    let page = try await api.send(parties.buyer, "GET", next)
                    #expect(page.status == 200)
                    walked += (page.json["data"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
                    path = (page.json["links"] as? [String: Any])?["next"] as? String
                }
                #expect(walked.count == Set(walked).count, "\(thread): a message twice")
                #expect(walked == Array(logged[thread, default: []].reversed()), "\(thread): as the log has them, newest first")
                #expect(Set(walked) == Set(accepted[thread, default: []]), "\(thread): what the API accepted")
            }
        }
    }

    /// The same buyer starting about the same watch from eight clients at once makes one thread:
    /// one `201`, the others `200` with it, and every message in it.
    @Test func concurrentStartsAboutOneWatchMakeOneThreadWithEveryMessage() async throws {
        let setup: [any CatalogueEvent] = [
            ShopMemberAdded(shopId: "s0", personId: "p8"), WatchStatusChanged(watchId: "w0", shopId: "s0", status: .forSale),
        ]
        try await ConversationAPI.with(setup: setup, threads: 4) { api in
            let replies = try await api.db.withProjectors {
                let replies = try await withThrowingTaskGroup(of: APITestServer.Reply.self) { group in
                    for client in 0..<8 {
                        group.addTask { try await api.send("p1", "POST", "/v1/conversations", ConversationAPI.start("w0", "Is it available? (\(client))")) }
                    }
                    return try await group.reduce(into: []) { $0.append($1) }
                }
                try await api.db.waitUntilProjected()
                return replies
            }
            #expect(replies.map(\.status).sorted() == [200, 200, 200, 200, 200, 200, 200, 201], "\(replies.map(\.text))")
            let ids = Set(replies.compactMap { $0.data["id"] as? String })
            #expect(ids.count == 1)
            let id = try #require(ids.first)
            #expect(try await api.db.scalar("SELECT count(*)::int FROM conversations", Int.self) == 1)
            #expect(try await api.db.scalar("SELECT count(*)::int FROM messages WHERE conversation_id = '\(id)'", Int.self) == 8)
            let seller = try await api.list("p8", side: "seller")
            #expect(seller.ids == [id] && seller.unread == 1)
            #expect(try await api.db.scalar("SELECT count(*)::int FROM notification_outbox WHERE ids->>'sellerId' = 's0'", Int.self) == 8)
        }
    }

    /// One client: `operations` random requests, each checked for a plausible answer.
    static func write(_ api: ConversationAPI, seen: Seen, seed: UInt64, operations: Int) async throws {
        var random = SplitMix64(seed: seed)
        for step in 0..<operations {
            let thread = await seen.threadList().randomElement(using: &random)
            switch (thread, Int.random(in: 0..<10, using: &random)) {
            case (nil, _), (_, 0...1):
                let buyer = people.randomElement(using: &random)!
                let watch = watches.randomElement(using: &random)!
                let reply = try await api.send(buyer, "POST", "/v1/conversations", ConversationAPI.start(watch.watch, "About \(watch.watch) (\(seed).\(step))"))
                if reply.status == 422 && reply.code == "own_shop" {
                    await seen.refused("own_shop")
                    continue
                }
                #expect(reply.status == 201 || reply.status == 200, "\(reply.text)")
                guard let id = reply.data["id"] as? String,
                    let message = (reply.json["included"] as? [[String: Any]])?.first?["id"] as? String
                else { continue }
                await seen.thread(id, buyer: buyer, shop: watch.shop)
                await seen.message(message, in: id)
            case (let thread?, 2...6):
                let person = participant(thread, &random)
                let offer = Int.random(in: 0..<4, using: &random) == 0 ? #"{"amount":\#(Int.random(in: 1...900_000, using: &random)),"currency":"EUR"}"# : nil
                let reply = try await api.send(person, "POST", "/v1/conversations/\(thread.id)/messages", ConversationAPI.message("Step \(seed).\(step)", offer: offer))
                #expect(reply.status == 201, "\(reply.text)")
                if let id = reply.data["id"] as? String { await seen.message(id, in: thread.id) }
            case (let thread?, 7):
                let reply = try await api.send(participant(thread, &random), "PATCH", "/v1/conversations/\(thread.id)", ConversationAPI.patch(thread.id, #""unread":false"#))
                #expect(reply.status == 200 || notYetProjected(reply), "\(reply.text)")
            case (let thread?, 8):
                let archived = Bool.random(using: &random)
                let reply = try await api.send(
                    participant(thread, &random), "PATCH", "/v1/conversations/\(thread.id)", ConversationAPI.patch(thread.id, #""archived":\#(archived)"#))
                #expect(reply.status == 200 || notYetProjected(reply), "\(reply.text)")
            case (let thread?, _):
                let seller = members.filter { $0.shop == thread.shop }.randomElement(using: &random)!.person
                let reply = try await api.send(seller, "PATCH", "/v1/conversations/\(thread.id)", ConversationAPI.patch(thread.id, #""noReplyNeeded":true"#))
                // The seller may be this thread's buyer too (p9 buying from s1), and then writes as the buyer.
                #expect(reply.status == 200 || notYetProjected(reply) || (seller == thread.buyer && reply.status == 422), "\(reply.text)")
            }
        }
    }

    /// A thread started by another client moments ago whose start the projection has not reached
    /// (its inline apply deferred behind a concurrent writer): the one answer a mark may get then.
    static func notYetProjected(_ reply: APITestServer.Reply) -> Bool {
        reply.status == 503 && reply.code == "not_yet_projected" && reply.header("Retry-After") == "1"
    }

    /// The buyer or one of the people who work at the thread's shop.
    static func participant(_ thread: (id: String, buyer: String, shop: String), _ random: inout SplitMix64) -> String {
        ([thread.buyer] + members.filter { $0.shop == thread.shop }.map(\.person)).randomElement(using: &random)!
    }

    struct OwnerSide: Hashable {
        let owner: String
        let side: String
    }

    /// Per owner and side, the threads with unread messages, from the log: a side's last message from
    /// the other side is past what it wrote or marked read.
    static func recount(_ db: TestDatabase) async throws -> [OwnerSide: Int] {
        // Read through the log, whose sealed message bodies open with their authors' keys.
        let records = try await db.events(where: "type IN ('conversation_started', 'message_sent', 'conversation_read')")
        let events = records.map { ($0.type, $0, $0.streamVersion) }
        var owners: [String: [String: String]] = [:]
        var seqs: [String: Int64] = [:]
        var incoming: [String: [String: Int64]] = [:]
        var read: [String: [String: Int64]] = [:]
        let registry = InboxCatalogue.registry
        for (type, payload, version) in events where type == "message_sent" {
            let message = try payload.decode(MessageSent.self, using: registry)
            seqs[message.messageId] = version
        }
        for (type, payload, version) in events {
            switch type {
            case "conversation_started":
                let started = try payload.decode(ConversationStarted.self, using: registry)
                owners[started.conversationId] = ["buyer": started.buyerId, "seller": started.shopId ?? ""]
            case "message_sent":
                let message = try payload.decode(MessageSent.self, using: registry)
                for side in ["buyer", "seller"] {
                    if side == message.authorSide.rawValue {
                        read[message.conversationId, default: [:]][side] = max(read[message.conversationId]?[side] ?? 0, version)
                    } else {
                        incoming[message.conversationId, default: [:]][side] = max(incoming[message.conversationId]?[side] ?? 0, version)
                    }
                }
            default:
                let mark = try payload.decode(ConversationRead.self, using: registry)
                let seq = seqs[mark.upToMessageId] ?? 0
                read[mark.conversationId, default: [:]][mark.side.rawValue] = max(read[mark.conversationId]?[mark.side.rawValue] ?? 0, seq)
            }
        }
        var badges: [OwnerSide: Int] = [:]
        for (conversation, sides) in owners {
            for (side, owner) in sides where (incoming[conversation]?[side] ?? 0) > (read[conversation]?[side] ?? 0) {
                badges[OwnerSide(owner: owner, side: side), default: 0] += 1
            }
        }
        return badges
    }

    /// Each thread's message ids in the order of their numbers in it.
    static func messagesInTheLog(_ db: TestDatabase) async throws -> [String: [String]] {
        let rows = try await db.client.query(
            "SELECT payload->>'conversationId' AS c, payload->>'messageId' AS m FROM events WHERE type = 'message_sent' ORDER BY stream_id, stream_version"
        ) { (try $0.decode(String.self, "c"), try $0.decode(String.self, "m")) }
        var result: [String: [String]] = [:]
        for (conversation, message) in rows { result[conversation, default: []].append(message) }
        return result
    }
}
