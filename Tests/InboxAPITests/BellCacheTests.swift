import Crypto
import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import Testing

/// The bell cache's rules, one by one, without a database.
@Suite struct BellCacheRuleTests {
    static func key(_ person: String, limit: Int = 25) -> BellCache.Key {
        BellCache.Key(person: person, unread: nil, cursor: nil, limit: limit, language: "en")
    }

    @Test func nothingIsAnsweredOrKeptWhileTheCacheIsNotListening() {
        let cache = BellCache()
        #expect(cache.ticket() == nil)
        cache.keep([1, 2, 3], for: Self.key("p1"), ticket: cache.ticket())
        #expect(cache.page(Self.key("p1")) == nil)
        cache.setListening(true)
        cache.keep([1, 2, 3], for: Self.key("p1"), ticket: cache.ticket())
        #expect(cache.page(Self.key("p1")) == [1, 2, 3])
        #expect(cache.page(Self.key("p1", limit: 7)) == nil, "another request of the same person")
        // Losing the listening session forgets everything, and nothing comes back by itself.
        cache.setListening(false)
        #expect(cache.page(Self.key("p1")) == nil)
        cache.setListening(true)
        #expect(cache.page(Self.key("p1")) == nil)
    }

    @Test func aChangeForgetsThePersonsPagesAndOnlyTheirs() {
        let cache = BellCache()
        cache.setListening(true)
        for person in ["p1", "p2"] { cache.keep(Array(person.utf8), for: Self.key(person), ticket: cache.ticket()) }
        cache.changed(people: ["p1"])
        #expect(cache.page(Self.key("p1")) == nil)
        #expect(cache.page(Self.key("p2")) == Array("p2".utf8))
        cache.changedEverybody()
        #expect(cache.page(Self.key("p2")) == nil)
        #expect(cache.statistics.bytes == 0)
    }

    /// A page read while its person's bell changed may show the bell before the change: not kept.
    /// Another person's change in the meantime does not matter.
    @Test func aPageReadAcrossAChangeOfItsPersonIsNotKept() {
        let cache = BellCache()
        cache.setListening(true)
        let before = cache.ticket()
        cache.changed(people: ["p1"])
        cache.keep([1], for: Self.key("p1"), ticket: before)
        #expect(cache.page(Self.key("p1")) == nil)
        let other = cache.ticket()
        cache.changed(people: ["p2"])
        cache.keep([2], for: Self.key("p1"), ticket: other)
        #expect(cache.page(Self.key("p1")) == [2])
        // Everybody's change refuses every read that began before it.
        let beforeAll = cache.ticket()
        cache.changedEverybody()
        cache.keep([3], for: Self.key("p3"), ticket: beforeAll)
        #expect(cache.page(Self.key("p3")) == nil)
    }

    /// Letting people go to stay within the bytes forgets whose bell changed when, so a read that
    /// began before must not be kept afterwards, even for a person whose record is gone.
    @Test func aReadThatBeganBeforePeopleWereLetGoIsNotKept() {
        let cache = BellCache(capacityBytes: 32 * 1_000)
        cache.setListening(true)
        let old = cache.ticket()
        cache.changed(people: ["p"])
        for person in 0..<400 { cache.keep([UInt8](repeating: 1, count: 600), for: Self.key("q\(person)"), ticket: cache.ticket()) }
        cache.keep([9], for: Self.key("p"), ticket: old)
        #expect(cache.page(Self.key("p")) == nil)
        cache.keep([8], for: Self.key("p"), ticket: cache.ticket())
        #expect(cache.page(Self.key("p")) == [8])
    }

    @Test func aPageIsKeptAtMostItsLifetimeAndTheCacheWithinItsBytes() {
        let cache = BellCache(capacityBytes: 320_000, lifetime: .seconds(5))
        cache.setListening(true)
        let start = ContinuousClock.now
        cache.keep([9], for: Self.key("p1"), ticket: cache.ticket(), now: start)
        #expect(cache.page(Self.key("p1"), now: start + .seconds(3.7)) == [9])
        #expect(cache.page(Self.key("p1"), now: start + .seconds(5)) == nil)
        for person in 0..<2_000 {
            cache.keep([UInt8](repeating: 7, count: 1_000), for: Self.key("q\(person)"), ticket: cache.ticket(), now: start)
        }
        #expect(cache.statistics.bytes <= 320_000)
        #expect(cache.statistics.bytes > 0)
    }

    @Test func announcementsRoundTripAndWhatCannotBeReadIsEverybody() {
        // nil: everybody (every name) may have changed.
        #expect(Announcement.names(from: #"["p1","a \"quoted\" id"]"#) == ["p1", "a \"quoted\" id"])
        #expect(Announcement.names(from: "*") == nil)
        #expect(Announcement.names(from: "p1,p2") == nil)
    }
}

/// The cache in the server against a real PostgreSQL, told of changes by the projection's NOTIFY.
/// On a cluster of its own, so that the inline driver applies the API's writes at once.
@Suite struct BellCacheTests {
    @Test func pagesAreAnsweredFromMemoryUntilTheBellChangesHoweverItChanges() async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        defer { db.client.close() }
        _ = try await db.store.append((0..<5).map { try NewEvent(SignedIn(personId: "p1", signInId: "s\($0)", platform: "web")) })
        _ = try await db.store.append([try NewEvent(SignedIn(personId: "p2", signInId: "t0", platform: "web"))])
        try await db.withProjectors { try await db.waitUntilProjected() }

        // A lifetime far past the test: every refresh below comes from an announcement or a write.
        let cache = BellCache(lifetime: .seconds(600))
        let listener = CacheListener(cache: cache, configuration: db.configuration)
        let listening = Task { try await listener.run() }
        defer { listening.cancel() }
        let api = APIServer(
            routes: BellRoutes.routes(client: try db.requestPool(), cache: cache), gate: AppVersionGate(client: db.client, refreshInterval: .zero),
            verifier: AccessTokenTests.verifier)
        let server = try HTTPServer(configuration: .init(port: 0, threads: 4), replying: { api.reply($0) })
        defer { server.shutdown() }
        let client = APITestServer(server: server, db: db)
        let p1 = ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "p1", scopes: [.accountRead, .accountWrite]))]
        try await Self.until("the cache listens") { cache.isListening }

        func unread() async throws -> Int? {
            let reply = try await client.send("GET", "/v1/me/notifications", headers: p1)
            #expect(reply.status == 200)
            return (reply.json["meta"] as? [String: Any])?["unread"] as? Int
        }
        #expect(try await unread() == 5)
        let afterFirst = cache.statistics
        #expect(try await unread() == 5)
        #expect(cache.statistics.hits == afterFirst.hits + 1, "the second read came from memory")

        // A change by another tier, projected by the async projector in another session.
        _ = try await db.store.append([try NewEvent(SignedIn(personId: "p1", signInId: "s5", platform: "web"))])
        try await db.withProjectors { try await db.waitUntilProjected() }
        try await Self.until("the projector's change is shown") { try await unread() == 6 }

        // The person's own write through this server: the very next read shows it.
        #expect(try await client.send("POST", "/v1/me/notifications/read", headers: p1).status == 204)
        #expect(try await unread() == 0)

        // A replay swapped in: everybody's pages are forgotten.
        #expect(try await unread() == 0)
        #expect(cache.statistics.bytes > 0)
        let replayer = Replayer(client: db.client, projections: [BellProjection()])
        try await replayer.prepare()
        try await replayer.catchUp()
        try await replayer.swap()
        try await Self.until("the swap is announced") { cache.statistics.bytes == 0 }

        // The listening session lost: the cache answers nothing until it listens again.
        #expect(try await unread() == 0)
        let killer = try db.connect()
        defer { killer.close() }
        try killer.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'inbox-api-caches-listener'")
        try await Self.until("the cache notices") { !cache.isListening }
        // A change it could not hear of meanwhile is shown once it listens again.
        _ = try await db.store.append([try NewEvent(SignedIn(personId: "p1", signInId: "s6", platform: "web"))])
        try await db.withProjectors { try await db.waitUntilProjected() }
        #expect(try await unread() == 1)
        try await Self.until("the cache listens again") { cache.isListening }
        #expect(try await unread() == 1)
        #expect(try await unread() == 1)
    }

    /// Waits up to a minute: in the whole suite, hundreds of tests share two cores, and the
    /// listener's first session has been seen to take more than ten seconds there.
    static func until(_ what: String, timeout: Duration = .seconds(60), _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while try await !condition() {
            guard ContinuousClock.now < deadline else {
                Issue.record("timed out waiting until \(what)")
                return
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
