import EventLog
import Foundation
import Dispatch
import InboxDomain
import NotificationOutbox
import PostgresClient

/// A projection's tables built by a replay in memory and written once, with COPY, at the end,
/// instead of loaded and upserted batch by batch: the same fold as the live projector, on rows
/// kept in dictionaries rather than read back from the tables.
///
/// Why: applying a batch through SQL loads every row the batch touches and writes every changed
/// row back, with its indexes, so a hot row (a busy conversation, a person's bell) is read and
/// rewritten once per batch; the server's share of that was half a replay's time. In memory each
/// row is written once.
///
/// The contract, on top of the projection's: `apply` either takes the whole batch in or throws
/// and leaves the state as it was (the replay then applies the batch event by event and parks the
/// events that fail on their own, as the SQL driver does); `write` fills the context's empty
/// tables with exactly the rows the live projector would hold after the same events.
protocol ReplayFold: Sendable {
    /// No rows yet: the state a replay (or one slice of it) starts from, or a live projector whose
    /// tables are empty (`mode` `.live`: the bell then enqueues what it sends, and the write
    /// announces that everything changed).
    init(mode: ProjectionMode)
    mutating func apply(_ events: [ProjectedEvent]) throws
    /// Lets go of the rows no later event can change (a message), so that the fold does not hold
    /// them until the end, and returns what writes them (nil: none). Called after every batch; the
    /// write may run while the next batch is folded.
    mutating func takeSettled() -> ReplaySettledWrite?
    /// Fills the tables with the rows of this fold (of all the log, or of one slice).
    func write(in context: ProjectionContext) throws
    /// What a live catch-up (`.live`) writes besides `write`'s rows, on a session and in a
    /// transaction of its own, at the same time as them: rows a second write leaves as they are
    /// (the bell's outbox, under its "each notification once" key). The catch-up commits them
    /// before its own transaction, so that a crash between the two loses nothing: the next try
    /// writes them again, and the key keeps what is there. Nil: nothing.
    func sideWrite() -> ReplaySettledWrite?
    /// What is made of every slice's rows once they are all written (counters counted in SQL).
    static func finish(in context: ProjectionContext) throws
    /// Where an event of a type this fold handles goes when the log is cut into slices: the slice
    /// whose rows it can change (`ReplaySliceRouter`). Nil for a type the fold does not handle.
    static func route(_ event: ProjectedEvent, _ router: ReplaySliceRouter) -> ReplaySliceRoute?
}

/// Writes a fold's settled rows on the connection of the context it is given.
typealias ReplaySettledWrite = @Sendable (ProjectionContext) throws -> Void

extension ReplayFold {
    mutating func takeSettled() -> ReplaySettledWrite? { nil }
    func sideWrite() -> ReplaySettledWrite? { nil }
    static func finish(in context: ProjectionContext) throws {
        // Live, whoever keeps conversation lists in memory learns that all of them changed.
        if context.mode != .replay { try ThreadChanges.announceEverything(on: context.connection) }}
}

/// How a fold's tables are written: COPYs of at most `rowsPerStatement` rows each.
/// Outside a transaction (a replay's slice) each is a transaction of its own that holds back the
/// log's readers (gap-safe reads, docs/event-log.md) for a fraction of a second, where one COPY of
/// a slice's bell entries took seconds; inside one (a live catch-up) they are that transaction's.
enum ReplayCopy {
    static let rowsPerStatement = 50_000

    static func copy<Rows: Collection>(
        _ rows: Rows, into sql: String, on connection: PostgresConnection, rowsPerStatement: Int = rowsPerStatement,
        row: (Rows.Element) -> [String?]
    ) throws {
        try connection.copyIn(rows, into: sql, rowsPerStatement: rowsPerStatement, row: row)
    }
}

/// A fold that cannot go on (not about an event: `ProjectionBatchApplier.isAboutTheEvents` is
/// false for it, so the replay stops instead of applying the batch event by event).
struct ReplayFoldFailure: Error, CustomStringConvertible {
    let description: String
}

enum ReplayFolds {
    /// The in-memory fold of `projection`, for those that have one; the others replay through SQL.
    static func make(for projection: any Projection) -> (any ReplayFold.Type)? {
        switch projection {
        case is BellProjection: BellReplayFold.self
        case is ThreadsProjection: ThreadsReplayFold.self
        default: nil
        }
    }
}

extension ProjectionBatchApplier {
    /// The batch's events `projection` cannot read, parked (as `apply(_:to:in:)` parks them).
    static func unreadable(_ batch: DecodedBatch, projection: any Projection) -> [DeadLetter] {
        let types = projection.eventTypes
        return batch.unreadable.filter { !InboxCatalogue.isKnown($0.record.type) || types.contains($0.record.type) }.map {
            deadLetter($0.record, projection: projection, error: $0.error)
        }
    }

    /// Applies events of the projection's types to an in-memory fold: whole if it can, else event
    /// by event, parking the events that fail on their own (as `apply(_:to:in:)` does behind
    /// savepoints).
    static func apply(_ relevant: [ProjectedEvent], to fold: inout some ReplayFold, projection: any Projection) throws -> Outcome {
        var outcome = Outcome()
        if relevant.isEmpty { return outcome }
        do {
            try fold.apply(relevant)
            outcome.applied = relevant.count
            return outcome
        } catch {
            guard isAboutTheEvents(error) else { throw error }
        }
        for event in relevant {
            do {
                try fold.apply([event])
                outcome.applied += 1
            } catch {
                guard isAboutTheEvents(error) else { throw error }
                outcome.parked.append(deadLetter(event.record, projection: projection, error: "\(error)"))
            }
        }
        return outcome
    }
}

/// The bell in memory: its facts, its entries (with each person's), and who has a counter row.
struct BellReplayFold: ReplayFold {
    /// Every entry and fact so far, folded in place batch after batch (`BellFold.apply`).
    private var rows: BellFold
    /// Everybody who ever had an entry has a counter row, even at 0 (`BellFold.Writes.counters`).
    private var counted: Set<String> = []
    /// What a live catch-up sends (a replay sends nothing).
    private var outbox: [OutboxNotification] = []

    init(mode: ProjectionMode) {
        var facts = BellFold.Facts()
        facts.recordsChanges = false
        rows = BellFold(facts: facts, entries: [:], sendsNotifications: mode != .replay)
    }

    private var entries: [String: BellFold.Entry] { rows.entries }
    private var facts: BellFold.Facts { rows.facts }

    mutating func apply(_ events: [ProjectedEvent]) throws {
        do {
            try rows.apply(events)
        } catch {
            // Not the batch's whole, and not taken back: the replay stops rather than go on from it.
            throw ReplayFoldFailure(description: "the bell's replay fold failed part way through a batch: \(error)")
        }
        let writes = rows.writes
        rows.settle(writes)
        counted.formUnion(writes.counters.keys)
        outbox += rows.outbox
    }

    /// A person's entries are in the person's slice; a conversation's facts in its first buyer's
    /// (whose bell its messages ring); a saved search's in its first creator's; who saved a watch,
    /// who works at a shop, a person's switches and whether Wristler blocked them in the person's. A watch's price or sale rings the bells of the people who saved it, in
    /// every slice.
    static func route(_ event: ProjectedEvent, _ router: ReplaySliceRouter) -> ReplaySliceRoute? {
        switch event.payload {
        case let e as ConversationStarted: .slice(router.conversation(e.conversationId))
        case let e as ConversationClosedByBlock: .slice(router.conversation(e.conversationId))
        case let e as ConversationReopened: .slice(router.conversation(e.conversationId))
        case let e as MessageSent: .slice(router.conversation(e.conversationId))
        case let e as FavouriteAdded: .slice(router.person(e.personId))
        case let e as FavouriteRemoved: .slice(router.person(e.personId))
        case is WatchPriceChanged, is WatchStatusChanged: .everywhere
        case let e as SavedSearchCreated: .slice(router.search(e.savedSearchId))
        case let e as SavedSearchChanged: .slice(router.search(e.savedSearchId))
        case let e as SavedSearchDeleted: .slice(router.search(e.savedSearchId))
        case let e as ShopMemberAdded: .slice(router.person(e.personId))
        case let e as ShopMemberRemoved: .slice(router.person(e.personId))
        case let e as NotificationPreferenceChanged: .slice(router.person(e.personId))
        case let e as AccountBlocked: .slice(router.person(e.personId))
        case let e as SavedSearchMatched: .slice(router.person(e.personId))
        case let e as any OrderEvent: .slice(router.person(e.buyerId))
        case let e as SignedIn: .slice(router.person(e.personId))
        case let e as PasswordChanged: .slice(router.person(e.personId))
        case let e as SecondFactorEnabled: .slice(router.person(e.personId))
        case let e as SecondFactorDisabled: .slice(router.person(e.personId))
        case let e as EmailChanged: .slice(router.person(e.personId))
        case let e as SignedOut: .slice(router.person(e.personId))
        case let e as SignInLinked: .slice(router.person(e.personId))
        case let e as SignInUnlinked: .slice(router.person(e.personId))
        case let e as RecoveryCodesRenewed: .slice(router.person(e.personId))
        case let e as SignInAttemptsFailed: .slice(router.person(e.personId))
        case let e as RefreshTokenReused: .slice(router.person(e.personId))
        case let e as LegacyNotificationImported: .slice(router.person(e.personId))
        case let e as NotificationRead: .slice(router.person(e.personId))
        case let e as NotificationDeleted: .slice(router.person(e.personId))
        case let e as AllNotificationsRead: .slice(router.person(e.personId))
        case let e as AllNotificationsDeleted: .slice(router.person(e.personId))
        default: nil
        }
    }

    func write(in context: ProjectionContext) throws {
        let connection = context.connection
        try ReplayCopy.copy(
            entries.values.inPrimaryKeyOrder(\.id),
            into: """
                COPY \(context.table("bell_entries")) (notification_id, person_id, category, event, ids, created_at, read_at, source_position)
                FROM STDIN
                """, on: connection
        ) { entry in
            [
                entry.id, entry.personId, entry.category, entry.event, entry.idsJSON, entry.createdAt.postgresText,
                entry.readAt?.postgresText, String(entry.sourcePosition),
            ]
        }
        try ReplayCopy.copy(counted, into: "COPY \(context.table("bell_counters")) (person_id, unread_count, total_count) FROM STDIN", on: connection) {
            person in
            let ids = rows.byPerson[person] ?? []
            let unread = ids.reduce(0) { $0 + (entries[$1]?.readAt == nil ? 1 : 0) }
            return [person, String(unread), String(ids.count)]
        }
        try ReplayCopy.copy(
            facts.conversations.inPrimaryKeyOrder(\.key),
            into: "COPY \(context.table("bell_conversations")) (conversation_id, buyer_id, shop_id, watch_id, kind, closed) FROM STDIN",
            on: connection
        ) { id, conversation in
            [id, conversation.buyerId, conversation.shopId, conversation.watchId, conversation.kind.rawValue, conversation.isClosed.postgresText]
        }
        try ReplayCopy.copy(
            facts.favouriters.flatMap { watch, people in people.map { (watch, $0) } },
            into: "COPY \(context.table("bell_favourites")) (watch_id, person_id) FROM STDIN", on: connection
        ) { watch, person in [watch, person] }
        try ReplayCopy.copy(
            facts.audience.searches,
            into: "COPY \(context.table("bell_saved_searches")) (saved_search_id, person_id, deleted, interval, push) FROM STDIN", on: connection
        ) { id, search in [id, search.personId, search.deleted.postgresText, search.settings.interval.rawValue, search.settings.push.postgresText] }
        let members: [(shop: String, person: String)] = facts.audience.members.flatMap { shop, people in people.map { (shop, $0) } }
        try ReplayCopy.copy(members, into: "COPY \(context.table("bell_shop_members")) (shop_id, person_id) FROM STDIN", on: connection) {
            [$0.shop, $0.person]
        }
        var switches: [[String?]] = []
        for (person, categories) in facts.audience.switches {
            for (category, channels) in categories {
                for (channel, enabled) in channels { switches.append([person, category.rawValue, channel.rawValue, enabled.postgresText]) }
            }
        }
        try ReplayCopy.copy(switches, into: "COPY \(context.table("bell_switches")) (person_id, category, channel, enabled) FROM STDIN", on: connection) {
            $0
        }
        try ReplayCopy.copy(facts.audience.blocked, into: "COPY \(context.table("bell_blocked_accounts")) (person_id) FROM STDIN", on: connection) {
            [$0]
        }
        // Live, the outbox is `sideWrite`'s.
        guard context.mode != .replay else { return }
        try BellChanges.announceEverybody(on: connection)
    }

    func sideWrite() -> ReplaySettledWrite? {
        guard rows.sendsNotifications, !outbox.isEmpty else { return nil }
        let outbox = self.outbox
        // The live path's enqueue (`BellProjection`), in the log's order: the fan-out's queue order.
        return { context in try NotificationOutbox.copy(outbox, on: context.connection) }
    }
}

/// The threads in memory: conversations, their sides, where each message stands, and the watches;
/// the messages a batch made until they are written after it. The unread counters are counted from
/// the sides once, at the end.
struct ThreadsReplayFold: ReplayFold {
    init(mode: ProjectionMode) {}

    /// Every row so far, folded in place batch after batch (`ThreadsFold.apply`).
    private var rows = ThreadsFold(conversations: [:], sides: [:], messages: [:])
    /// The messages made since the last `takeSettled`.
    private var messages: [ThreadsFold.Message] = []
    private var watches: [String: ThreadsFold.Watch] = [:]
    /// People erased since the last `takeSettled`: their messages written before lose their bodies.
    private var erased: Set<String> = []

    mutating func apply(_ events: [ProjectedEvent]) throws {
        try rows.apply(events)
        messages.append(contentsOf: rows.newMessages)
        watches.merge(rows.watches) { _, new in new }
        erased.formUnion(rows.erasedPeople)
    }

    /// A thread's rows are in its first buyer's slice; a watch's status in its own.
    static func route(_ event: ProjectedEvent, _ router: ReplaySliceRouter) -> ReplaySliceRoute? {
        switch event.payload {
        case let e as ConversationStarted: .slice(router.conversation(e.conversationId))
        case let e as MessageSent: .slice(router.conversation(e.conversationId))
        case let e as ConversationRead: .slice(router.conversation(e.conversationId))
        case let e as ConversationArchived: .slice(router.conversation(e.conversationId))
        case let e as ConversationUnarchived: .slice(router.conversation(e.conversationId))
        case let e as ConversationMarkedNoReplyNeeded: .slice(router.conversation(e.conversationId))
        case let e as ConversationClosedByBlock: .slice(router.conversation(e.conversationId))
        case let e as ConversationReopened: .slice(router.conversation(e.conversationId))
        // An order about no thread is nothing to threads.
        case let e as OrderPaid: e.conversationId.map { .slice(router.conversation($0)) } ?? .nowhere
        case let e as WatchStatusChanged: .slice(router.key(e.watchId))
        // A person's messages may be in every slice.
        case is PersonErased: .everywhere
        default: nil
        }
    }

    /// A message is never changed once made but by an erasure: written after the batch that made
    /// it, and emptied by an erasure after.
    mutating func takeSettled() -> ReplaySettledWrite? {
        if messages.isEmpty && erased.isEmpty { return nil }
        let settled = messages
        let people = erased
        messages = []
        erased = []
        return { context in
            try Self.copy(settled, in: context)
            for statement in ThreadsProjection.erasure(people, context: context) {
                _ = try context.connection.query(statement.sql, binds: statement.binds)
            }
        }
    }

    private static func copy(_ messages: [ThreadsFold.Message], in context: ProjectionContext) throws {
        try ReplayCopy.copy(
            messages,
            into: """
                COPY \(context.table("messages")) (message_id, conversation_id, seq, author_side, author_id, body, attachment_handles,
                    offer_amount, offer_currency, sent_at) FROM STDIN
                """, on: context.connection
        ) { m in
            [
                m.id, m.conversationId, String(m.seq), m.authorSide, m.authorId, m.body,
                ThreadsProjection.jsonArray(m.attachmentHandles), m.offer.map { String($0.amount) }, m.offer?.currency,
                m.sentAt.postgresText,
            ]
        }
    }

    func write(in context: ProjectionContext) throws {
        let connection = context.connection
        try ReplayCopy.copy(
            rows.conversations.values.inPrimaryKeyOrder(\.id),
            into: """
                COPY \(context.table("conversations")) (conversation_id, kind, buyer_id, shop_id, watch_id, order_id, started_at,
                    last_message_id, last_message_seq, last_message_at, last_message_side, last_message_body, message_count,
                    closed_by_block, no_reply_needed, led_to_order) FROM STDIN
                """, on: connection
        ) { c in
            [
                c.id, c.kind, c.buyerId, c.shopId, c.watchId, c.orderId, c.startedAt.postgresText, c.lastMessageId,
                String(c.lastMessageSeq), c.lastMessageAt?.postgresText, c.lastMessageSide, c.lastMessageBody,
                String(c.messageCount), c.closedByBlock.postgresText, c.noReplyNeeded.postgresText, c.ledToOrder.postgresText,
            ]
        }
        try ReplayCopy.copy(
            rows.sides.values.inPrimaryKeyOrder({ ($0.conversationId, $0.side) }),
            into: """
                COPY \(context.table("thread_sides")) (conversation_id, side, owner_id, last_activity_at, last_incoming_seq,
                    read_through_seq, archived) FROM STDIN
                """, on: connection
        ) { s in
            [
                s.conversationId, s.side, s.ownerId, s.lastActivityAt.postgresText, String(s.lastIncomingSeq),
                String(s.readThroughSeq), s.archived.postgresText,
            ]
        }
        try Self.copy(messages, in: context)
        try ReplayCopy.copy(watches, into: "COPY \(context.table("thread_watches")) (watch_id, shop_id, status) FROM STDIN", on: connection) {
            id, watch in [id, watch.shopId, watch.status]
        }
    }

    static func finish(in context: ProjectionContext) throws {
        // Live, whoever keeps conversation lists in memory learns that all of them changed.
        if context.mode != .replay { try ThreadChanges.announceEverything(on: context.connection) }
        // Every owner of a side has a counter row from the side's start (ThreadsFold.unreadDeltas),
        // counting the owner's unread sides.
        try context.connection.execute(
            """
            INSERT INTO \(context.table("unread_conversations")) (owner_id, side, unread_count)
            SELECT owner_id, side, count(*) FILTER (WHERE unread) FROM \(context.table("thread_sides")) GROUP BY owner_id, side
            """)
    }
}

/// A replay's in-memory fold and what it has applied and parked so far, folded on a thread of
/// its own rather than one of the few the concurrency runtime has (a batch takes a core for a
/// while, and the readers of the log need those threads meanwhile).
///
/// Unchecked: one replay task owns it and hands it to one worker at a time, waiting for it.
final class ReplayFoldState: @unchecked Sendable {
    private var fold: any ReplayFold
    private(set) var outcome = ProjectionBatchApplier.Outcome()
    private static let workers = DispatchQueue(label: "inbox-replay-fold", attributes: .concurrent)

    init(_ type: any ReplayFold.Type, mode: ProjectionMode = .replay) { fold = type.init(mode: mode) }

    /// Folds `events` (all of the projection's types) on a worker thread.
    func apply(_ events: [ProjectedEvent], projection: any Projection) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            Self.workers.async {
                do {
                    let applied = try ProjectionBatchApplier.apply(events, to: &self.fold, projection: projection)
                    self.outcome.applied += applied.applied
                    self.outcome.parked += applied.parked
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    func takeSettled() -> ReplaySettledWrite? { fold.takeSettled() }

    func write(in context: ProjectionContext) throws { try fold.write(in: context) }

    func sideWrite() -> ReplaySettledWrite? { fold.sideWrite() }
}

extension Sequence {
    /// The elements in the order of their primary key, so that a COPY into a table with that key
    /// adds each row at the right end of the key's B-tree instead of at a random place in it (a
    /// descent and a split of a random page each). Swift orders the ids (ASCII) byte by byte, as
    /// PostgreSQL's "C" collation does; under another collation the rows are the same, only less
    /// often at the right end.
    func inPrimaryKeyOrder(_ key: (Element) -> String) -> [Element] {
        sorted { key($0) < key($1) }
    }

    func inPrimaryKeyOrder(_ key: (Element) -> (String, String)) -> [Element] {
        sorted { key($0) < key($1) }
    }
}
