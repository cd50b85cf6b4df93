import Foundation
import Lifecycle
import PostgresClient
import Projections
import Synchronization
import Threads

/// Bell pages as last answered, by person and request, kept until the person's bell changes.
///
/// A bell is read far more often than it changes (the app asks on every launch and every badge),
/// and PostgreSQL is most of a bell page's cost. A page is answered from here while it is known
/// to be current:
/// - the bell projection announces whose bell a transaction changed (`BellChanges`), delivered by
///   PostgreSQL when, and only when, it commits; `CacheListener` forgets those people's pages;
/// - a write of the person's own through this server forgets their pages before it is answered,
///   so their next read here shows it;
/// - a page read while its person's bell changed is not kept (each change is numbered, and a page
///   is kept only when no change of its person came after its read began);
/// - while the listener is not listening (starting, or its session lost) nothing is answered from
///   here or kept, and everything is forgotten when it listens again;
/// - a page is kept at most `lifetime` (each page between three quarters of it and all of it, so
///   that pages kept at once do not all go at once), which bounds what a silent failure could cost.
///
/// Another API node's write reaches this one's pages when its announcement arrives, a few
/// milliseconds after it commits (docs/api.md).
public final class BellCache: Sendable {
    public struct Key: Hashable, Sendable {
        public var person: String
        public var unread: Bool?
        public var cursor: String?
        public var limit: Int
        public var language: String

        public init(person: String, unread: Bool?, cursor: String?, limit: Int, language: String) {
            self.person = person
            self.unread = unread
            self.cursor = cursor
            self.limit = limit
            self.language = language
        }
    }

    /// Where a read began: kept only if nothing of its person changed since.
    public struct Ticket: Sendable {
        let change: UInt64
    }

    private struct Page {
        var body: [UInt8]
        var expiresAt: ContinuousClock.Instant
    }

    private struct Person {
        /// The number of the last change of this person's bell seen here.
        var changedAt: UInt64 = 0
        var pages: [Key: Page] = [:]

        var bytes: Int { pages.values.reduce(0) { $0 + $1.body.count } }
    }

    /// The people of one stripe.
    private struct Shard {
        var people: [String: Person] = [:]
        var bytes = 0
    }

    public let capacityBytes: Int
    public let lifetime: Duration
    private let shards: Striped<Shard>
    private let listening = Atomic<Bool>(false)
    /// Counts every change seen (one person's, or everybody's).
    private let changes = Atomic<UInt64>(0)
    /// Reads that began before this change are not kept (everybody changed, or people were let go).
    private let floor = Atomic<UInt64>(0)
    private let hits = Atomic<Int>(0)
    private let misses = Atomic<Int>(0)

    public init(capacityBytes: Int = 64 << 20, lifetime: Duration = .seconds(300)) {
        self.capacityBytes = capacityBytes
        self.lifetime = lifetime
        shards = Striped(count: 32) { Shard() }
    }

    private var shardCapacity: Int { max(1, capacityBytes / shards.count) }
    /// People remembered per stripe (most of them only for the number of their last change).
    private static let peoplePerShard = 4_096

    /// The page kept for `key`, if it is current.
    public func page(_ key: Key, now: ContinuousClock.Instant = .now) -> [UInt8]? {
        let body: [UInt8]? =
            listening.load(ordering: .acquiring)
            ? shards.withLock(for: key.person) { shard in
                guard let page = shard.people[key.person]?.pages[key], now < page.expiresAt else { return nil }
                return page.body
            } : nil
        if body == nil { misses.add(1, ordering: .relaxed) } else { hits.add(1, ordering: .relaxed) }
        return body
    }

    /// Taken before reading a page from the database; nil while nothing may be kept.
    public func ticket() -> Ticket? {
        listening.load(ordering: .acquiring) ? Ticket(change: changes.load(ordering: .acquiring)) : nil
    }

    /// Keeps `body` for `key` unless the person's bell changed since `ticket` was taken.
    public func keep(_ body: [UInt8], for key: Key, ticket: Ticket?, now: ContinuousClock.Instant = .now) {
        guard let ticket else { return }
        shards.withLock(for: key.person) { shard in
            guard listening.load(ordering: .acquiring), ticket.change >= floor.load(ordering: .acquiring) else { return }
            var person = shard.people[key.person] ?? Person()
            guard person.changedAt <= ticket.change else { return }
            shard.bytes += body.count - (person.pages[key]?.body.count ?? 0)
            person.pages[key] = Page(body: body, expiresAt: now + lifetime * Double.random(in: 0.75...1))
            shard.people[key.person] = person
            if shard.bytes > shardCapacity || shard.people.count > Self.peoplePerShard {
                letGo(&shard, below: shardCapacity * 3 / 4)
            }
        }
    }

    /// Forgets the pages of `people`, whose bells changed.
    public func changed(people: some Sequence<String>) {
        for name in people {
            let change = changes.add(1, ordering: .acquiringAndReleasing).newValue
            shards.withLock(for: name) { shard in
                var person = shard.people[name] ?? Person()
                shard.bytes -= person.bytes
                person.pages = [:]
                person.changedAt = max(person.changedAt, change)
                shard.people[name] = person
                if shard.people.count > Self.peoplePerShard { letGo(&shard, below: shard.bytes) }
            }
        }
    }

    /// Forgets every page: anybody's bell may have changed.
    public func changedEverybody() {
        // The floor first: a read that keeps its page after a stripe was emptied cannot pass it.
        floor.store(changes.add(1, ordering: .acquiringAndReleasing).newValue, ordering: .releasing)
        shards.forEach { $0 = Shard() }
    }

    /// Whether pages may be answered and kept: only while every change is being heard of.
    public func setListening(_ listening: Bool) {
        if !listening { self.listening.store(false, ordering: .releasing) }
        changedEverybody()
        if listening { self.listening.store(true, ordering: .releasing) }
    }

    public var isListening: Bool { listening.load(ordering: .acquiring) }

    /// Pages answered from here and not, since the start; the bytes kept now.
    public var statistics: (hits: Int, misses: Int, bytes: Int) {
        var bytes = 0
        shards.forEach { bytes += $0.bytes }
        return (hits.load(ordering: .relaxed), misses.load(ordering: .relaxed), bytes)
    }

    /// Lets people go (in no particular order) until their pages take at most `bytes` and few
    /// enough people are remembered. Whose changes those people missed is forgotten with them, so
    /// first the floor rises, under the stripe's lock: no read that began before is kept after.
    private func letGo(_ shard: inout Shard, below bytes: Int) {
        floor.store(changes.add(1, ordering: .acquiringAndReleasing).newValue, ordering: .releasing)
        for (name, person) in shard.people {
            shard.people[name] = nil
            shard.bytes -= person.bytes
            if shard.bytes <= bytes && shard.people.count <= Self.peoplePerShard / 2 { break }
        }
    }
}

extension BellCache: AnnouncedCache {
    public func changed(_ names: [String]) { changed(people: names) }
    public func changedEverything() { changedEverybody() }
}

/// Listens for announced changes (`Announcement`: `BellChanges`, `ThreadChanges`) on a session
/// of its own and tells each channel's cache: a `Service` on a `LeasedLoop` without a lease.
/// While it is not listening (before its first LISTEN, after its session was lost, once stopped)
/// the caches answer nothing.
public final class CacheListener: Service {
    private let loop: LeasedLoop<CacheListening>

    public init(
        caches: [(channel: String, cache: any AnnouncedCache)], configuration: PostgresConfiguration,
        clock: any Clock<Duration> = ContinuousClock(), logger: Logger = .silent
    ) {
        loop = LeasedLoop(
            name: "api-caches", work: CacheListening(caches: caches, logger: logger), configuration: configuration,
            channels: caches.map(\.channel), options: .init(pollInterval: .seconds(60), backoff: Backoff(initial: .milliseconds(100), maximum: .seconds(2))),
            clock: clock, logger: logger, isRetryable: { _ in true })
    }

    /// The bell cache's listener alone.
    public convenience init(
        cache: BellCache, configuration: PostgresConfiguration, clock: any Clock<Duration> = ContinuousClock(), logger: Logger = .silent
    ) {
        self.init(caches: [(BellChanges.channel, cache)], configuration: configuration, clock: clock, logger: logger)
    }

    public func run() async throws {
        try await loop.run(from: ())
    }
}


/// The listener's turns: nothing to read, only announcements to pass on.
struct CacheListening: LoopWork {
    let caches: [(channel: String, cache: any AnnouncedCache)]
    let logger: Logger

    func begin(_ state: inout Void, on session: LeasedSession) async throws {
        // Whatever changed while nobody listened is unknown: start from empty caches.
        for (_, cache) in caches { cache.setListening(true) }
    }

    func step(_ state: inout Void, on session: LeasedSession) async throws -> LoopStep { .wait(nil) }

    func received(_ notifications: [PostgresNotification], state: inout Void) {
        for notification in notifications {
            for (channel, cache) in caches where channel == notification.channel {
                if let names = Announcement.names(from: notification.payload) { cache.changed(names) } else { cache.changedEverything() }
            }
        }
    }

    func ended(_ state: inout Void) {
        // Stopping is not a fault; a lost session is, until the listener is back.
        if caches.contains(where: { $0.cache.isListening }) && !Task.isCancelled {
            logger.warning("the API's caches stopped answering from memory until they listen again")
        }
        for (_, cache) in caches { cache.setListening(false) }
    }
}
