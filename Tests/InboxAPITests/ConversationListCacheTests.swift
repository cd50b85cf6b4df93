import EventLog
import Foundation
import InboxAPI
import InboxDomain
import InboxTesting
import Projections
import Testing

/// The conversation list cache's rules, one by one, without a database.
@Suite struct ConversationListCacheRuleTests {
    static func key(_ person: String, side: String = "seller", limit: Int = 25, named: Int = 1) -> ConversationListCache.Key {
        ConversationListCache.Key(person: person, side: side, archived: false, cursor: nil, limit: limit, named: named)
    }

    @Test func aPageIsAnsweredUntilOneOfItsSubjectsChangesAndOnlyThen() {
        let cache = ConversationListCache()
        #expect(cache.ticket() == nil, "nothing is kept before the cache listens")
        cache.setListening(true)
        cache.keep([1], for: Self.key("sam"), subjects: ["member:sam", "seller:s1", "seller:s2"], ticket: cache.ticket())
        cache.keep([2], for: Self.key("sue"), subjects: ["member:sue", "seller:s1"], ticket: cache.ticket())
        cache.keep([3], for: Self.key("ann", side: "buyer"), subjects: ["buyer:ann"], ticket: cache.ticket())
        #expect(cache.page(Self.key("sam")) == [1])
        #expect(cache.page(Self.key("sam", named: 0)) == nil, "a request naming other filters has other links")
        cache.changed(["seller:s2"])
        #expect(cache.page(Self.key("sam")) == nil)
        #expect(cache.page(Self.key("sue")) == [2], "sue does not work at s2")
        cache.changed(["member:sue"])
        #expect(cache.page(Self.key("sue")) == nil, "sue's shops changed")
        #expect(cache.page(Self.key("ann", side: "buyer")) == [3])
        cache.changedEverything()
        #expect(cache.page(Self.key("ann", side: "buyer")) == nil)
    }

    /// A page read while one of its subjects changed may show the list before the change.
    @Test func aPageReadAcrossAChangeOfItsSubjectsIsNeverAnswered() {
        let cache = ConversationListCache()
        cache.setListening(true)
        let before = cache.ticket()
        cache.changed(["seller:s1"])
        cache.keep([1], for: Self.key("sam"), subjects: ["member:sam", "seller:s1"], ticket: before)
        #expect(cache.page(Self.key("sam")) == nil)
        // A change of something else in the meantime does not matter.
        let other = cache.ticket()
        cache.changed(["seller:s9", "buyer:zed"])
        cache.keep([2], for: Self.key("sam"), subjects: ["member:sam", "seller:s1"], ticket: other)
        #expect(cache.page(Self.key("sam")) == [2])
        // The listener lost: nothing is answered, and nothing comes back by itself.
        cache.setListening(false)
        #expect(cache.page(Self.key("sam")) == nil)
        cache.setListening(true)
        #expect(cache.page(Self.key("sam")) == nil)
    }

    /// A full stripe lets other pages go for the one just read (it used to pick in dictionary
    /// order, the new page too, so a page read and kept was sometimes not there the next moment);
    /// a page larger than a stripe's share is not kept at all.
    @Test func aPageJustKeptIsNotTheOneLetGoAndOneTooLargeIsNotKept() {
        // 1,000 bytes a stripe; every page below is one person's, so all go to one stripe.
        let cache = ConversationListCache(capacityBytes: 32 * 1_000)
        cache.setListening(true)
        func key(_ limit: Int) -> ConversationListCache.Key {
            ConversationListCache.Key(person: "pat", side: "buyer", archived: false, cursor: nil, limit: limit, named: 0)
        }
        for limit in 1...40 {
            cache.keep([UInt8](repeating: 1, count: 400), for: key(limit), subjects: ["buyer:pat"], ticket: cache.ticket())
            #expect(cache.page(key(limit))?.count == 400, "page \(limit) was let go as it was kept")
        }
        #expect(cache.statistics.bytes <= 1_000)
        cache.keep([UInt8](repeating: 2, count: 1_500), for: key(41), subjects: ["buyer:pat"], ticket: cache.ticket())
        #expect(cache.page(key(41)) == nil)
        #expect(cache.statistics.bytes <= 1_000)
    }

    @Test func memoryIsBoundedAndForgettingSubjectsForgetsThePagesReadBefore() {
        let cache = ConversationListCache(capacityBytes: 32 * 1_000)
        cache.setListening(true)
        for index in 0..<200 {
            cache.keep([UInt8](repeating: 1, count: 500), for: Self.key("p\(index)"), subjects: ["member:p\(index)"], ticket: cache.ticket())
        }
        #expect(cache.statistics.bytes <= 32 * 1_000)
        let ticket = cache.ticket()
        cache.keep([7], for: Self.key("kept"), subjects: ["seller:k"], ticket: ticket)
        #expect(cache.page(Self.key("kept")) == [7])
        // So many subjects change that a stripe forgets them: what was read before is not answered.
        cache.changed((0..<(ConversationListCache.subjectsPerShard * 40)).map { "buyer:b\($0)" })
        #expect(cache.page(Self.key("kept")) == nil)
    }
}

/// The cache in the server against a real PostgreSQL: a page is answered from memory until
/// something it shows changes, however it changes.
@Suite struct ConversationListCacheTests {
    static let setup: [any CatalogueEvent] = [
        ShopMemberAdded(shopId: "s1", personId: "sam"),
        WatchStatusChanged(watchId: "w1", shopId: "s1", status: .forSale),
        ConversationStarted(conversationId: "c1", kind: .watch, buyerId: "ann", shopId: "s1", watchId: "w1", orderId: nil),
        MessageSent(conversationId: "c1", messageId: "m1", authorSide: .buyer, authorId: "ann", body: "Hello"),
        ConversationStarted(conversationId: "c2", kind: .watch, buyerId: "bob", shopId: "s2", watchId: "w2", orderId: nil),
        MessageSent(conversationId: "c2", messageId: "m2", authorSide: .buyer, authorId: "bob", body: "Hi s2"),
    ]

    @Test func listsAreAnsweredFromMemoryUntilAThreadInThemOrTheShopsChange() async throws {
        try await ConversationAPI.with(setup: Self.setup) { api in
            let cache = try #require(api.cache)
            func sellerList() async throws -> [String: String] {
                let list = try await api.list("sam", side: "seller")
                return list.threads.mapValues { (($0["lastMessage"] as? [String: Any])?["body"] as? String) ?? "" }
            }
            #expect(try await sellerList() == ["c1": "Hello"])
            let hits = cache.statistics.hits
            #expect(try await sellerList() == ["c1": "Hello"])
            #expect(cache.statistics.hits == hits + 1, "the second read came from memory")

            // The buyer writes through this server: the shop's very next read shows it.
            #expect(try await api.send("ann", "POST", "/v1/conversations/c1/messages", #"{"data":{"type":"messages","attributes":{"body":"Still there?"}}}"#).status == 201)
            #expect(try await sellerList() == ["c1": "Still there?"])

            // Another tier's event, projected by the async projector: shown once announced.
            _ = try await api.db.store.append([try NewEvent(MessageSent(conversationId: "c1", messageId: "m9", authorSide: .buyer, authorId: "ann", body: "Hello?"))])
            try await api.db.withProjectors { try await api.db.waitUntilProjected() }
            try await BellCacheTests.until("the projector's message is shown") { try await sellerList() == ["c1": "Hello?"] }

            // Sam starts working at s2 too: their seller list covers its threads.
            _ = try await api.db.store.append([try NewEvent(ShopMemberAdded(shopId: "s2", personId: "sam"))])
            try await api.db.withProjectors { try await api.db.waitUntilProjected() }
            try await BellCacheTests.until("the new shop's threads are shown") { try await sellerList() == ["c1": "Hello?", "c2": "Hi s2"] }

            // A replay of the threads swapped in: every page is forgotten.
            #expect(cache.statistics.bytes > 0)
            let replayer = Replayer(client: api.db.client, projections: [ThreadsProjection()])
            try await replayer.prepare()
            try await replayer.catchUp()
            try await replayer.swap()
            try await BellCacheTests.until("the swap is announced") { cache.statistics.bytes == 0 }
            #expect(try await sellerList() == ["c1": "Hello?", "c2": "Hi s2"])
        }
    }

    @Test func aThreadsMessagesAreAnsweredFromMemoryUntilTheThreadOrItsReadersShopsChange() async throws {
        try await ConversationAPI.with(setup: Self.setup) { api in
            let cache = try #require(api.cache)
            func bodies(_ person: String) async throws -> [String]? {
                let reply = try await api.send(person, "GET", "/v1/conversations/c1/messages")
                if reply.status == 404 { return nil }
                #expect(reply.status == 200)
                return (reply.json["data"] as? [[String: Any]] ?? []).map { (($0["attributes"] as? [String: Any])?["body"] as? String) ?? "" }
            }
            #expect(try await bodies("sam") == ["Hello"])
            let hits = cache.statistics.hits
            #expect(try await bodies("sam") == ["Hello"])
            #expect(try await bodies("ann") == ["Hello"])
            #expect(try await bodies("ann") == ["Hello"])
            #expect(cache.statistics.hits == hits + 2, "the second reads came from memory")
            // Nobody else's page is answered from anyone's kept page.
            #expect(try await bodies("bob") == nil)

            // The buyer writes through this server: the shop's very next read shows it.
            #expect(try await api.send("ann", "POST", "/v1/conversations/c1/messages", #"{"data":{"type":"messages","attributes":{"body":"Still there?"}}}"#).status == 201)
            #expect(try await bodies("sam") == ["Still there?", "Hello"])

            // Another tier's message, projected by the async projector: shown once announced.
            _ = try await api.db.store.append([try NewEvent(MessageSent(conversationId: "c1", messageId: "m9", authorSide: .buyer, authorId: "ann", body: "Hello?"))])
            try await api.db.withProjectors { try await api.db.waitUntilProjected() }
            try await BellCacheTests.until("the projector's message is shown") { try await bodies("sam") == ["Hello?", "Still there?", "Hello"] }
            #expect(try await bodies("ann") == ["Hello?", "Still there?", "Hello"])

            // Sam stops working at s1: their kept page of its thread is no longer answered.
            #expect(try await bodies("sam") != nil)
            _ = try await api.db.store.append([try NewEvent(ShopMemberRemoved(shopId: "s1", personId: "sam"))])
            try await api.db.withProjectors { try await api.db.waitUntilProjected() }
            try await BellCacheTests.until("the shop's former member is refused") { try await bodies("sam") == nil }
        }
    }
}
