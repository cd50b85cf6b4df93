import Foundation
import Lifecycle
import PostgresClient
import Projections
import Synchronization
import Threads

/// Conversation list pages, and pages of a thread's messages, as last answered, kept until
/// something they show changes, as the `BellCache` keeps bell pages.
///
/// A page depends on several subjects (`ThreadChanges`): a buyer's list on `buyer:<person>`; a
/// seller's list on `member:<person>` (which shops) and `seller:<shop>` for each of their shops;
/// a page of a thread's messages on `conversation:<id>` and its reader's `member:<person>` (the
/// access check).
/// Each subject has the number of its last change seen here; a page remembers its subjects and
/// the change count when its read began (its ticket), and is answered only while none of its
/// subjects changed after that:
/// - the threads and people projections announce the subjects a transaction changed, delivered
///   by PostgreSQL when, and only when, it commits (`CacheListener`);
/// - a write through this server forgets the subjects of its thread before it is answered, so the
///   writer's next read shows it;
/// - a page read while one of its subjects changed is never answered (its change comes after the
///   page's ticket), whichever arrives first;
/// - while the listener is not listening nothing is answered or kept, and everything is forgotten
///   when it listens again;
/// - a page is kept at most `lifetime`, which bounds what a silent failure could cost; memory is
///   bounded by `capacityBytes` (pages) and by a count of subjects per stripe (forgetting a
///   subject's change raises a floor under which no page is answered).
public final class ConversationListCache: AnnouncedCache, Sendable {
    public struct Key: Hashable, Sendable {
        public var person: String
        public var side: String
        public var archived: Bool
        public var cursor: String?
        public var limit: Int
        /// Which filters the request named (its links repeat them): bit 0 the side, bit 1 archived.
        public var named: Int
        /// The thread whose messages the page shows; nil for a list page.
        public var conversation: String?

        public init(person: String, side: String, archived: Bool, cursor: String?, limit: Int, named: Int, conversation: String? = nil) {
            self.person = person
            self.side = side
            self.archived = archived
            self.cursor = cursor
            self.limit = limit
            self.named = named
            self.conversation = conversation
        }

        /// The page of `conversation`'s messages `person` asked for.
        public static func messages(of conversation: String, person: String, cursor: String?, limit: Int) -> Key {
            Key(person: person, side: "", archived: false, cursor: cursor, limit: limit, named: 0, conversation: conversation)
        }
    }

    /// Where a read began: its page is answered only while none of its subjects changed since.
    public struct Ticket: Sendable {
        let change: UInt64
    }

    private struct Page {
        var body: [UInt8]
        var subjects: [String]
        var readAt: UInt64
        var expiresAt: ContinuousClock.Instant
    }

    private struct PageShard {
        var pages: [Key: Page] = [:]
        var bytes = 0
    }

    public let capacityBytes: Int
    public let lifetime: Duration
    private let pages: Striped<PageShard>
    /// The number of the last change of each subject seen here.
    private let subjects: Striped<[String: UInt64]>
    private let listening = Atomic<Bool>(false)
    private let changes = Atomic<UInt64>(0)
    /// Pages read before this change are not answered (everything changed, or subjects were let go).
    private let floor = Atomic<UInt64>(0)
    private let hits = Atomic<Int>(0)
    private let misses = Atomic<Int>(0)
    /// Subjects remembered per stripe before the oldest half is let go.
    public static let subjectsPerShard = 8_192

    public init(capacityBytes: Int = 64 << 20, lifetime: Duration = .seconds(300)) {
        self.capacityBytes = capacityBytes
        self.lifetime = lifetime
        pages = Striped(count: 32) { PageShard() }
        subjects = Striped(count: 32) { [:] }
    }

    private var shardCapacity: Int { max(1, capacityBytes / pages.count) }

    /// The page kept for `key`, if it is current.
    public func page(_ key: Key, now: ContinuousClock.Instant = .now) -> [UInt8]? {
        var body: [UInt8]?
        if listening.load(ordering: .acquiring), let page = pages.withLock(for: key.person, { $0.pages[key] }), now < page.expiresAt,
            page.readAt >= floor.load(ordering: .acquiring),
            page.subjects.allSatisfy({ subject in (subjects.withLock(for: subject) { $0[subject] } ?? 0) <= page.readAt })
        {
            body = page.body
        }
        if body == nil { misses.add(1, ordering: .relaxed) } else { hits.add(1, ordering: .relaxed) }
        return body
    }

    /// Taken before reading a page from the database; nil while nothing may be kept.
    public func ticket() -> Ticket? {
        listening.load(ordering: .acquiring) ? Ticket(change: changes.load(ordering: .acquiring)) : nil
    }

    /// Keeps `body` for `key`, read from `subjects` after `ticket` was taken.
    public func keep(_ body: [UInt8], for key: Key, subjects: [String], ticket: Ticket?, now: ContinuousClock.Instant = .now) {
        guard let ticket, listening.load(ordering: .acquiring) else { return }
        pages.withLock(for: key.person) { shard in
            shard.bytes += body.count - (shard.pages[key]?.body.count ?? 0)
            shard.pages[key] = Page(body: body, subjects: subjects, readAt: ticket.change, expiresAt: now + lifetime * Double.random(in: 0.75...1))
            if shard.bytes > shardCapacity {
                // Let other pages go (in no particular order) until a quarter is free; the page
                // just read only when it does not fit alone.
                for (other, page) in shard.pages where other != key {
                    shard.pages[other] = nil
                    shard.bytes -= page.body.count
                    if shard.bytes <= shardCapacity * 3 / 4 { break }
                }
                if shard.bytes > shardCapacity {
                    shard.pages[key] = nil
                    shard.bytes -= body.count
                }
            }
        }
    }

    /// The subjects named changed: pages that show them are no longer answered.
    public func changed(_ names: [String]) {
        for name in names {
            let change = changes.add(1, ordering: .acquiringAndReleasing).newValue
            subjects.withLock(for: name) { known in
                known[name] = change
                if known.count > Self.subjectsPerShard {
                    // Whose changes are forgotten is unknown from then on: no page read before stays answered.
                    floor.store(changes.add(1, ordering: .acquiringAndReleasing).newValue, ordering: .releasing)
                    known = [name: change]
                }
            }
        }
    }

    /// Anything may have changed (a replay's tables were swapped in, or a payload was unreadable).
    public func changedEverything() {
        floor.store(changes.add(1, ordering: .acquiringAndReleasing).newValue, ordering: .releasing)
        pages.forEach { $0 = PageShard() }
    }

    public func setListening(_ listening: Bool) {
        if !listening { self.listening.store(false, ordering: .releasing) }
        changedEverything()
        if listening { self.listening.store(true, ordering: .releasing) }
    }

    public var isListening: Bool { listening.load(ordering: .acquiring) }

    /// Pages answered from here and not, since the start; the bytes kept now.
    public var statistics: (hits: Int, misses: Int, bytes: Int) {
        var bytes = 0
        pages.forEach { bytes += $0.bytes }
        return (hits.load(ordering: .relaxed), misses.load(ordering: .relaxed), bytes)
    }
}

/// A cache told of changes announced on a PostgreSQL channel (`Announcement`): `CacheListener`
/// passes each payload's names on, or everything for `*`.
public protocol AnnouncedCache: Sendable {
    func changed(_ names: [String])
    func changedEverything()
    func setListening(_ listening: Bool)
    var isListening: Bool { get }
}
