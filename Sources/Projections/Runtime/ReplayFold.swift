import EventLog
import Foundation
import Dispatch
import InboxDomain
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
    mutating func apply(_ events: [ProjectedEvent]) throws
    /// Writes, and lets go of, the rows no later event can change (a message), so that the fold
    /// does not hold them until the end. Called after every batch.
    mutating func writeSettled(in context: ProjectionContext) throws
    func write(in context: ProjectionContext) throws
}

extension ReplayFold {
    mutating func writeSettled(in context: ProjectionContext) throws {}
}

enum ReplayFolds {
    /// The in-memory fold of `projection`, for those that have one; the others replay through SQL.
    static func make(for projection: any Projection) -> (any ReplayFold)? {
        switch projection {
        case is BellProjection: BellReplayFold()
        case is ThreadsProjection: ThreadsReplayFold()
        default: nil
        }
    }
}

extension ProjectionBatchApplier {
    /// Applies a decoded batch to an in-memory fold: whole if it can, else event by event, parking
    /// the events that fail on their own (as `apply(_:to:in:)` does behind savepoints).
    static func apply(_ batch: DecodedBatch, to fold: inout some ReplayFold, projection: any Projection) throws -> Outcome {
        var outcome = Outcome()
        let types = projection.eventTypes
        for (record, error) in batch.unreadable where !InboxCatalogue.isKnown(record.type) || types.contains(record.type) {
            outcome.parked.append(deadLetter(record, projection: projection, error: error))
        }
        let relevant = batch.events.filter { types.contains($0.record.type) }
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
    private var facts = BellFold.Facts()
    private var entries: [String: BellFold.Entry] = [:]
    private var byPerson: [String: [String]] = [:]
    /// Everybody who ever had an entry has a counter row, even at 0 (`BellFold.Writes.counters`).
    private var counted: Set<String> = []

    mutating func apply(_ events: [ProjectedEvent]) throws {
        let keys = BellFold.keys(of: events)
        // What BellProjection.loadEntries reads from the table.
        var loaded: [String: BellFold.Entry] = [:]
        for id in keys.entries { if let entry = entries[id] { loaded[id] = entry } }
        for (person, upTo) in keys.readAllUpTo {
            for id in byPerson[person] ?? [] {
                if let entry = entries[id], entry.sourcePosition < upTo, entry.readAt == nil { loaded[id] = entry }
            }
        }
        for (person, upTo) in keys.deleteAllUpTo {
            for id in byPerson[person] ?? [] {
                if let entry = entries[id], entry.sourcePosition < upTo { loaded[id] = entry }
            }
        }
        // All the facts: the fold reads only those of the batch's keys, as if they were loaded.
        let fold = try BellFold.fold(events, facts: facts, entries: loaded, sendsNotifications: false)
        var facts = fold.facts
        facts.changedConversations = []
        facts.favouriteChanges = [:]
        facts.changedSearches = []
        self.facts = facts
        let writes = fold.writes
        for entry in writes.deletes {
            entries[entry.id] = nil
            byPerson[entry.personId]?.removeAll { $0 == entry.id }
        }
        for entry in writes.reads { entries[entry.id]?.readAt = entry.readAt }
        for var entry in writes.inserts where entries[entry.id] == nil {
            entry.existed = true
            entry.readChanged = false
            entries[entry.id] = entry
            byPerson[entry.personId, default: []].append(entry.id)
        }
        counted.formUnion(writes.counters.keys)
    }

    func write(in context: ProjectionContext) throws {
        let connection = context.connection
        try connection.copyIn(
            """
            COPY \(context.table("bell_entries")) (notification_id, person_id, category, event, ids, created_at, read_at, source_position)
            FROM STDIN
            """
        ) { writer in
            for entry in entries.values {
                try writer.write(row: [
                    entry.id, entry.personId, entry.category, entry.event, entry.idsJSON, entry.createdAt.postgresText,
                    entry.readAt?.postgresText, String(entry.sourcePosition),
                ])
            }
        }
        try connection.copyIn("COPY \(context.table("bell_counters")) (person_id, unread_count, total_count) FROM STDIN") { writer in
            for person in counted {
                let ids = byPerson[person] ?? []
                let unread = ids.reduce(0) { $0 + (entries[$1]?.readAt == nil ? 1 : 0) }
                try writer.write(row: [person, String(unread), String(ids.count)])
            }
        }
        try connection.copyIn(
            "COPY \(context.table("bell_conversations")) (conversation_id, buyer_id, shop_id, watch_id, kind, closed) FROM STDIN"
        ) { writer in
            for (id, conversation) in facts.conversations {
                try writer.write(row: [
                    id, conversation.buyerId, conversation.shopId, conversation.watchId, conversation.kind.rawValue,
                    conversation.isClosed.postgresText,
                ])
            }
        }
        try connection.copyIn("COPY \(context.table("bell_favourites")) (watch_id, person_id) FROM STDIN") { writer in
            for (watch, people) in facts.favouriters {
                for person in people { try writer.write(row: [watch, person]) }
            }
        }
        try connection.copyIn("COPY \(context.table("bell_saved_searches")) (saved_search_id, person_id, deleted) FROM STDIN") { writer in
            for (id, search) in facts.searches { try writer.write(row: [id, search.personId, search.deleted.postgresText]) }
        }
    }
}

/// The threads in memory: conversations, their sides, where each message stands, and the watches;
/// the messages a batch made until they are written after it. The unread counters are counted from
/// the sides once, at the end.
struct ThreadsReplayFold: ReplayFold {
    private var conversations: [String: ThreadsFold.Conversation] = [:]
    private var sides: [ThreadsFold.SideKey: ThreadsFold.Side] = [:]
    private var places: [String: ThreadsFold.MessagePlace] = [:]
    private var messages: [ThreadsFold.Message] = []
    private var watches: [String: ThreadsFold.Watch] = [:]

    mutating func apply(_ events: [ProjectedEvent]) throws {
        let keys = ThreadsFold.keys(of: events)
        // What ThreadsProjection.apply reads from the tables.
        var loadedConversations: [String: ThreadsFold.Conversation] = [:]
        var loadedSides: [ThreadsFold.SideKey: ThreadsFold.Side] = [:]
        for id in keys.conversations {
            if let conversation = conversations[id] { loadedConversations[id] = conversation }
            for side in ConversationSide.allCases {
                let key = ThreadsFold.SideKey(conversationId: id, side: side.rawValue)
                if let row = sides[key] { loadedSides[key] = row }
            }
        }
        var loadedPlaces: [String: ThreadsFold.MessagePlace] = [:]
        for id in keys.messages { if let place = places[id] { loadedPlaces[id] = place } }
        let fold = try ThreadsFold.fold(events, conversations: loadedConversations, sides: loadedSides, messages: loadedPlaces)
        // The messages table's primary key would refuse a message id twice.
        var newIds = Set<String>()
        for message in fold.newMessages where places[message.id] != nil || !newIds.insert(message.id).inserted {
            throw ProjectionError("message \(message.id) is already in the thread tables")
        }
        for conversation in fold.changedConversations {
            guard var row = conversations[conversation.id] else {
                conversations[conversation.id] = conversation
                continue
            }
            // What the upsert sets on a conflict; the rest of the row stays as first written.
            row.lastMessageId = conversation.lastMessageId
            row.lastMessageSeq = conversation.lastMessageSeq
            row.lastMessageAt = conversation.lastMessageAt
            row.lastMessageSide = conversation.lastMessageSide
            row.lastMessageBody = conversation.lastMessageBody
            row.messageCount = conversation.messageCount
            row.closedByBlock = conversation.closedByBlock
            row.noReplyNeeded = conversation.noReplyNeeded
            row.ledToOrder = conversation.ledToOrder
            conversations[conversation.id] = row
        }
        for side in fold.changedSides {
            let key = ThreadsFold.SideKey(conversationId: side.conversationId, side: side.side)
            var row = sides[key] ?? side
            row.lastActivityAt = side.lastActivityAt
            row.lastIncomingSeq = side.lastIncomingSeq
            row.readThroughSeq = side.readThroughSeq
            row.archived = side.archived
            row.unreadBefore = row.unread
            row.existed = true
            sides[key] = row
        }
        for message in fold.newMessages {
            places[message.id] = ThreadsFold.MessagePlace(conversationId: message.conversationId, seq: message.seq)
        }
        messages.append(contentsOf: fold.newMessages)
        watches.merge(fold.watches) { _, new in new }
    }

    /// A message is never changed once made: written after the batch that made it.
    mutating func writeSettled(in context: ProjectionContext) throws {
        if messages.isEmpty { return }
        try Self.copy(messages, in: context)
        messages.removeAll()
    }

    private static func copy(_ messages: [ThreadsFold.Message], in context: ProjectionContext) throws {
        if messages.isEmpty { return }
        try context.connection.copyIn(
            """
            COPY \(context.table("messages")) (message_id, conversation_id, seq, author_side, author_id, body, attachment_handles,
                offer_amount, offer_currency, sent_at) FROM STDIN
            """
        ) { writer in
            for m in messages {
                try writer.write(row: [
                    m.id, m.conversationId, String(m.seq), m.authorSide, m.authorId, m.body,
                    ThreadsProjection.jsonArray(m.attachmentHandles), m.offer.map { String($0.amount) }, m.offer?.currency,
                    m.sentAt.postgresText,
                ])
            }
        }
    }

    func write(in context: ProjectionContext) throws {
        let connection = context.connection
        try connection.copyIn(
            """
            COPY \(context.table("conversations")) (conversation_id, kind, buyer_id, shop_id, watch_id, order_id, started_at,
                last_message_id, last_message_seq, last_message_at, last_message_side, last_message_body, message_count,
                closed_by_block, no_reply_needed, led_to_order) FROM STDIN
            """
        ) { writer in
            for c in conversations.values {
                try writer.write(row: [
                    c.id, c.kind, c.buyerId, c.shopId, c.watchId, c.orderId, c.startedAt.postgresText, c.lastMessageId,
                    String(c.lastMessageSeq), c.lastMessageAt?.postgresText, c.lastMessageSide, c.lastMessageBody,
                    String(c.messageCount), c.closedByBlock.postgresText, c.noReplyNeeded.postgresText, c.ledToOrder.postgresText,
                ])
            }
        }
        try connection.copyIn(
            """
            COPY \(context.table("thread_sides")) (conversation_id, side, owner_id, last_activity_at, last_incoming_seq,
                read_through_seq, archived) FROM STDIN
            """
        ) { writer in
            for s in sides.values {
                try writer.write(row: [
                    s.conversationId, s.side, s.ownerId, s.lastActivityAt.postgresText, String(s.lastIncomingSeq),
                    String(s.readThroughSeq), s.archived.postgresText,
                ])
            }
        }
        try Self.copy(messages, in: context)
        try connection.copyIn("COPY \(context.table("thread_watches")) (watch_id, shop_id, status) FROM STDIN") { writer in
            for (id, watch) in watches { try writer.write(row: [id, watch.shopId, watch.status]) }
        }
        // Every owner of a side has a counter row from the side's start (ThreadsFold.unreadDeltas),
        // counting the owner's unread sides.
        try connection.execute(
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

    init(_ fold: any ReplayFold) { self.fold = fold }

    func apply(_ batch: DecodedBatch, projection: any Projection) async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            Self.workers.async {
                do {
                    let applied = try ProjectionBatchApplier.apply(batch, to: &self.fold, projection: projection)
                    self.outcome.applied += applied.applied
                    self.outcome.parked += applied.parked
                    continuation.resume()
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        }
    }

    func writeSettled(in context: ProjectionContext) throws { try fold.writeSettled(in: context) }

    func write(in context: ProjectionContext) throws { try fold.write(in: context) }
}
