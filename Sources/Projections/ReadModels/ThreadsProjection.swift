import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// Conversations as each side lists them, their messages, and per owner and side the number of
/// conversations with unread messages (`meta.unread`).
///
/// - A side's owner is the buyer (buyer side) or the shop (seller side): the shop's inbox, and
///   its read state, is shared by everybody who works there.
/// - A message's number in its thread is its stream version, so order within a thread never
///   depends on commit order.
/// - Unread is `last_incoming_seq > read_through_seq`, both only ever raised: applying an event
///   twice, or ahead of older ones, ends in the same state, and the counters move by the change
///   of that flag.
/// - A message from the other side brings an archived thread back; a message from the buyer
///   clears the shop's "no reply needed".
public struct ThreadsProjection: Projection {
    public let name = "threads"
    public let version = 1
    public let tableNames = ["conversations", "thread_sides", "messages", "unread_conversations", "thread_watches"]
    public let eventTypes: Set<String> = [
        ConversationStarted.eventType, MessageSent.eventType, ConversationRead.eventType, ConversationArchived.eventType,
        ConversationUnarchived.eventType, ConversationMarkedNoReplyNeeded.eventType, ConversationClosedByBlock.eventType,
        OrderPaid.eventType, WatchStatusChanged.eventType,
    ]

    public init() {}

    public func createTables(in context: ProjectionContext) throws {
        try context.connection.execute(
            """
            CREATE TABLE \(context.table("conversations")) (
                conversation_id   text        PRIMARY KEY,
                kind              text        NOT NULL,
                buyer_id          text        NOT NULL,
                shop_id           text,
                watch_id          text,
                order_id          text,
                started_at        timestamptz NOT NULL,
                last_message_id   text,
                last_message_seq  bigint      NOT NULL DEFAULT 0,
                last_message_at   timestamptz,
                last_message_side text,
                last_message_body text,
                message_count     integer     NOT NULL DEFAULT 0,
                closed_by_block   boolean     NOT NULL DEFAULT false,
                no_reply_needed   boolean     NOT NULL DEFAULT false,
                led_to_order      boolean     NOT NULL DEFAULT false
            );
            CREATE TABLE \(context.table("thread_sides")) (
                conversation_id   text        NOT NULL,
                side              text        NOT NULL,
                owner_id          text        NOT NULL,
                last_activity_at  timestamptz NOT NULL,
                last_incoming_seq bigint      NOT NULL DEFAULT 0,
                read_through_seq  bigint      NOT NULL DEFAULT 0,
                archived          boolean     NOT NULL DEFAULT false,
                unread            boolean     GENERATED ALWAYS AS (last_incoming_seq > read_through_seq) STORED,
                PRIMARY KEY (conversation_id, side)
            );
            CREATE TABLE \(context.table("messages")) (
                message_id         text        PRIMARY KEY,
                conversation_id    text        NOT NULL,
                seq                bigint      NOT NULL,
                author_side        text        NOT NULL,
                author_id          text        NOT NULL,
                body               text        NOT NULL,
                attachment_handles jsonb       NOT NULL,
                offer_amount       bigint,
                offer_currency     text,
                sent_at            timestamptz NOT NULL
            );
            CREATE TABLE \(context.table("unread_conversations")) (
                owner_id     text    NOT NULL,
                side         text    NOT NULL,
                unread_count integer NOT NULL CHECK (unread_count >= 0),
                PRIMARY KEY (owner_id, side)
            );
            CREATE TABLE \(context.table("thread_watches")) (
                watch_id text PRIMARY KEY,
                shop_id  text NOT NULL,
                status   text NOT NULL
            );
            """)
    }

    public func createIndexes(in context: ProjectionContext) throws {
        try context.connection.execute(
            """
            CREATE INDEX IF NOT EXISTS conversations_watch ON \(context.table("conversations")) (watch_id);
            CREATE INDEX IF NOT EXISTS thread_sides_list ON \(context.table("thread_sides"))
                (owner_id, side, last_activity_at DESC, conversation_id DESC);
            CREATE UNIQUE INDEX IF NOT EXISTS messages_conversation_seq ON \(context.table("messages")) (conversation_id, seq);
            """)
    }

    struct Conversation {
        var id: String
        var kind: String
        var buyerId: String
        var shopId: String?
        var watchId: String?
        var orderId: String?
        var startedAt: Date
        var lastMessageId: String?
        var lastMessageSeq: Int64 = 0
        var lastMessageAt: Date?
        var lastMessageSide: String?
        var lastMessageBody: String?
        var messageCount: Int32 = 0
        var closedByBlock = false
        var noReplyNeeded = false
        var ledToOrder = false
    }

    struct Side {
        var conversationId: String
        var side: String
        var ownerId: String
        var lastActivityAt: Date
        var lastIncomingSeq: Int64 = 0
        var readThroughSeq: Int64 = 0
        var archived = false
        var unreadBefore = false
        /// Whether the row was in the table before this batch.
        var existed = false
        var unread: Bool { lastIncomingSeq > readThroughSeq }
    }

    struct SideKey: Hashable {
        let conversationId: String
        let side: String
    }

    /// Whose unread counter: a buyer's, or a shop's seller side.
    struct OwnerSide: Hashable {
        let ownerId: String
        let side: String
    }

    struct Message {
        var id: String
        var conversationId: String
        var seq: Int64
        var authorSide: String
        var authorId: String
        var body: String
        var attachmentHandles: [String]
        var offer: Money?
        var sentAt: Date
    }

    public func apply(_ events: [ProjectedEvent], in context: ProjectionContext) throws {
        var conversationIds: Set<String> = []
        var messageIds: Set<String> = []
        var watches: [String: (shopId: String, status: String)] = [:]
        for event in events {
            switch event.payload {
            case let e as ConversationStarted: conversationIds.insert(e.conversationId)
            case let e as MessageSent:
                conversationIds.insert(e.conversationId)
                messageIds.insert(e.messageId)
            case let e as ConversationRead:
                conversationIds.insert(e.conversationId)
                messageIds.insert(e.upToMessageId)
            case let e as ConversationArchived: conversationIds.insert(e.conversationId)
            case let e as ConversationUnarchived: conversationIds.insert(e.conversationId)
            case let e as ConversationMarkedNoReplyNeeded: conversationIds.insert(e.conversationId)
            case let e as ConversationClosedByBlock: conversationIds.insert(e.conversationId)
            case let e as OrderPaid: if let id = e.conversationId { conversationIds.insert(id) }
            case let e as WatchStatusChanged: watches[e.watchId] = (e.shopId, e.status.rawValue)
            default: break
            }
        }
        let connection = context.connection
        try writeWatches(watches, context: context)
        if conversationIds.isEmpty { return }

        var conversations = try loadConversations(Array(conversationIds), context: context)
        var sides = try loadSides(Array(conversationIds), context: context)
        // Message id -> (conversation, seq) for messages already stored.
        var knownMessages = try loadMessageSeqs(Array(messageIds), context: context)
        var newMessages: [Message] = []
        var touchedConversations: Set<String> = []
        var touchedSides: Set<SideKey> = []

        func conversation(_ id: String, for event: ProjectedEvent) throws -> Conversation {
            guard let found = conversations[id] else {
                throw ProjectionError("\(event.record.type) at position \(event.record.position): conversation \(id) was never started")
            }
            return found
        }
        func update(_ key: SideKey, _ change: (inout Side) -> Void) {
            guard var side = sides[key] else { return }
            change(&side)
            sides[key] = side
            touchedSides.insert(key)
        }

        for event in events {
            switch event.payload {
            case let e as ConversationStarted:
                guard conversations[e.conversationId] == nil else { continue }
                let at = event.record.recordedAt
                conversations[e.conversationId] = Conversation(
                    id: e.conversationId, kind: e.kind.rawValue, buyerId: e.buyerId, shopId: e.shopId, watchId: e.watchId,
                    orderId: e.orderId, startedAt: at)
                touchedConversations.insert(e.conversationId)
                let buyer = SideKey(conversationId: e.conversationId, side: ConversationSide.buyer.rawValue)
                sides[buyer] = Side(conversationId: e.conversationId, side: buyer.side, ownerId: e.buyerId, lastActivityAt: at)
                touchedSides.insert(buyer)
                if e.kind == .watch, let shopId = e.shopId {
                    let seller = SideKey(conversationId: e.conversationId, side: ConversationSide.seller.rawValue)
                    sides[seller] = Side(conversationId: e.conversationId, side: seller.side, ownerId: shopId, lastActivityAt: at)
                    touchedSides.insert(seller)
                }
            case let e as MessageSent:
                var thread = try conversation(e.conversationId, for: event)
                let seq = event.record.streamVersion
                let at = event.record.recordedAt
                // A message applied before (inline, ahead of this projector) is not stored or counted
                // again, but what it does to the thread is: an event applied since may have undone it.
                if knownMessages[e.messageId] == nil {
                    knownMessages[e.messageId] = (e.conversationId, seq)
                    newMessages.append(
                        Message(
                            id: e.messageId, conversationId: e.conversationId, seq: seq, authorSide: e.authorSide.rawValue,
                            authorId: e.authorId, body: e.body, attachmentHandles: e.attachmentHandles, offer: e.offer, sentAt: at))
                    thread.messageCount += 1
                }
                if seq > thread.lastMessageSeq {
                    thread.lastMessageSeq = seq
                    thread.lastMessageId = e.messageId
                    thread.lastMessageAt = at
                    thread.lastMessageSide = e.authorSide.rawValue
                    thread.lastMessageBody = e.body
                }
                if e.authorSide == .buyer { thread.noReplyNeeded = false }
                conversations[e.conversationId] = thread
                touchedConversations.insert(e.conversationId)
                for side in ConversationSide.allCases {
                    let own = side.rawValue == e.authorSide.rawValue
                    update(SideKey(conversationId: e.conversationId, side: side.rawValue)) { row in
                        row.lastActivityAt = max(row.lastActivityAt, at)
                        if own {
                            row.readThroughSeq = max(row.readThroughSeq, seq)
                        } else {
                            row.lastIncomingSeq = max(row.lastIncomingSeq, seq)
                            row.archived = false
                        }
                    }
                }
            case let e as ConversationRead:
                _ = try conversation(e.conversationId, for: event)
                // A mark for a message this projection has not seen yet is left to the async
                // projector, which reaches the message first.
                guard let message = knownMessages[e.upToMessageId], message.conversationId == e.conversationId else { continue }
                update(SideKey(conversationId: e.conversationId, side: e.side.rawValue)) { row in
                    row.readThroughSeq = max(row.readThroughSeq, message.seq)
                }
            case let e as ConversationArchived:
                _ = try conversation(e.conversationId, for: event)
                update(SideKey(conversationId: e.conversationId, side: e.side.rawValue)) { $0.archived = true }
            case let e as ConversationUnarchived:
                _ = try conversation(e.conversationId, for: event)
                update(SideKey(conversationId: e.conversationId, side: e.side.rawValue)) { $0.archived = false }
            case let e as ConversationMarkedNoReplyNeeded:
                var thread = try conversation(e.conversationId, for: event)
                thread.noReplyNeeded = true
                conversations[e.conversationId] = thread
                touchedConversations.insert(e.conversationId)
            case let e as ConversationClosedByBlock:
                var thread = try conversation(e.conversationId, for: event)
                thread.closedByBlock = true
                conversations[e.conversationId] = thread
                touchedConversations.insert(e.conversationId)
            case let e as OrderPaid:
                // An order about a thread this projection does not know is nothing to threads.
                guard let id = e.conversationId, var thread = conversations[id] else { continue }
                thread.ledToOrder = true
                conversations[id] = thread
                touchedConversations.insert(id)
            default: break
            }
        }

        let changedConversations = touchedConversations.compactMap { conversations[$0] }
        if !changedConversations.isEmpty {
            let c = changedConversations
            try connection.query(
                """
                INSERT INTO \(context.table("conversations")) AS t (conversation_id, kind, buyer_id, shop_id, watch_id, order_id,
                    started_at, last_message_id, last_message_seq, last_message_at, last_message_side, last_message_body,
                    message_count, closed_by_block, no_reply_needed, led_to_order)
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[],
                    $8::text[], $9::bigint[], $10::timestamptz[], $11::text[], $12::text[], $13::int[], $14::boolean[],
                    $15::boolean[], $16::boolean[])
                ON CONFLICT (conversation_id) DO UPDATE SET last_message_id = excluded.last_message_id,
                    last_message_seq = excluded.last_message_seq, last_message_at = excluded.last_message_at,
                    last_message_side = excluded.last_message_side, last_message_body = excluded.last_message_body,
                    message_count = excluded.message_count, closed_by_block = excluded.closed_by_block,
                    no_reply_needed = excluded.no_reply_needed, led_to_order = excluded.led_to_order
                """, c.map(\.id), c.map(\.kind), c.map(\.buyerId), c.map(\.shopId), c.map(\.watchId), c.map(\.orderId),
                c.map(\.startedAt), c.map(\.lastMessageId), c.map(\.lastMessageSeq), c.map(\.lastMessageAt), c.map(\.lastMessageSide),
                c.map(\.lastMessageBody), c.map(\.messageCount), c.map(\.closedByBlock), c.map(\.noReplyNeeded), c.map(\.ledToOrder))
        }
        if !newMessages.isEmpty {
            let m = newMessages
            try connection.query(
                """
                INSERT INTO \(context.table("messages")) (message_id, conversation_id, seq, author_side, author_id, body,
                    attachment_handles, offer_amount, offer_currency, sent_at)
                SELECT u.id, u.conversation, u.seq, u.side, u.author, u.body, u.handles, u.amount, u.currency, u.sent
                FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::bigint[],
                    $9::text[], $10::timestamptz[]) AS u(id, conversation, seq, side, author, body, handles, amount, currency, sent)
                """, m.map(\.id), m.map(\.conversationId), m.map(\.seq), m.map(\.authorSide), m.map(\.authorId), m.map(\.body),
                m.map { PostgresRawJSON(Self.jsonArray($0.attachmentHandles)) }, m.map { $0.offer?.amount }, m.map { $0.offer?.currency },
                m.map(\.sentAt))
        }
        let changedSides = touchedSides.compactMap { sides[$0] }
        if !changedSides.isEmpty {
            let s = changedSides
            try connection.query(
                """
                INSERT INTO \(context.table("thread_sides")) AS t (conversation_id, side, owner_id, last_activity_at,
                    last_incoming_seq, read_through_seq, archived)
                SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::bigint[], $6::bigint[], $7::boolean[])
                ON CONFLICT (conversation_id, side) DO UPDATE SET last_activity_at = excluded.last_activity_at,
                    last_incoming_seq = excluded.last_incoming_seq, read_through_seq = excluded.read_through_seq,
                    archived = excluded.archived
                """, s.map(\.conversationId), s.map(\.side), s.map(\.ownerId), s.map(\.lastActivityAt), s.map(\.lastIncomingSeq),
                s.map(\.readThroughSeq), s.map(\.archived))
            // Every owner of a thread has a counter row from the thread's start, whatever the batch
            // nets out to, so the rows do not depend on where the log is cut into batches.
            var deltas: [OwnerSide: Int32] = [:]
            for side in s where side.unread != side.unreadBefore || !side.existed {
                deltas[OwnerSide(ownerId: side.ownerId, side: side.side), default: 0] += side.unread == side.unreadBefore ? 0 : side.unread ? 1 : -1
            }
            let keys = Array(deltas.keys)
            if !keys.isEmpty {
                // Rows first, then the changes (see BellProjection: checks come before conflicts).
                try connection.query(
                    """
                    INSERT INTO \(context.table("unread_conversations")) (owner_id, side, unread_count)
                    SELECT o, s, 0 FROM unnest($1::text[], $2::text[]) AS u(o, s) ON CONFLICT (owner_id, side) DO NOTHING
                    """, keys.map(\.ownerId), keys.map(\.side))
                try connection.query(
                    """
                    UPDATE \(context.table("unread_conversations")) t SET unread_count = t.unread_count + u.delta
                    FROM unnest($1::text[], $2::text[], $3::int[]) AS u(owner, side, delta)
                    WHERE t.owner_id = u.owner AND t.side = u.side
                    """, keys.map(\.ownerId), keys.map(\.side), keys.map { deltas[$0]! })
            }
        }
    }

    private func writeWatches(_ watches: [String: (shopId: String, status: String)], context: ProjectionContext) throws {
        if watches.isEmpty { return }
        let ids = Array(watches.keys)
        try context.connection.query(
            """
            INSERT INTO \(context.table("thread_watches")) (watch_id, shop_id, status)
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
            ON CONFLICT (watch_id) DO UPDATE SET shop_id = excluded.shop_id, status = excluded.status
            """, ids, ids.map { watches[$0]!.shopId }, ids.map { watches[$0]!.status })
    }

    private func loadConversations(_ ids: [String], context: ProjectionContext) throws -> [String: Conversation] {
        var result: [String: Conversation] = [:]
        for row in try context.connection.query("SELECT * FROM \(context.table("conversations")) WHERE conversation_id = ANY($1)", ids) {
            var conversation = Conversation(
                id: try row.decode(String.self, "conversation_id"), kind: try row.decode(String.self, "kind"),
                buyerId: try row.decode(String.self, "buyer_id"), shopId: try row.decode(String?.self, "shop_id"),
                watchId: try row.decode(String?.self, "watch_id"), orderId: try row.decode(String?.self, "order_id"),
                startedAt: try row.decode(Date.self, "started_at"))
            conversation.lastMessageId = try row.decode(String?.self, "last_message_id")
            conversation.lastMessageSeq = try row.decode(Int64.self, "last_message_seq")
            conversation.lastMessageAt = try row.decode(Date?.self, "last_message_at")
            conversation.lastMessageSide = try row.decode(String?.self, "last_message_side")
            conversation.lastMessageBody = try row.decode(String?.self, "last_message_body")
            conversation.messageCount = try row.decode(Int32.self, "message_count")
            conversation.closedByBlock = try row.decode(Bool.self, "closed_by_block")
            conversation.noReplyNeeded = try row.decode(Bool.self, "no_reply_needed")
            conversation.ledToOrder = try row.decode(Bool.self, "led_to_order")
            result[conversation.id] = conversation
        }
        return result
    }

    private func loadSides(_ ids: [String], context: ProjectionContext) throws -> [SideKey: Side] {
        var result: [SideKey: Side] = [:]
        // Not locked here: inline writers and the async projector are serialized by the checkpoint row.
        for row in try context.connection.query(
            "SELECT * FROM \(context.table("thread_sides")) WHERE conversation_id = ANY($1)", ids)
        {
            var side = Side(
                conversationId: try row.decode(String.self, "conversation_id"), side: try row.decode(String.self, "side"),
                ownerId: try row.decode(String.self, "owner_id"), lastActivityAt: try row.decode(Date.self, "last_activity_at"))
            side.lastIncomingSeq = try row.decode(Int64.self, "last_incoming_seq")
            side.readThroughSeq = try row.decode(Int64.self, "read_through_seq")
            side.archived = try row.decode(Bool.self, "archived")
            side.unreadBefore = side.unread
            side.existed = true
            result[SideKey(conversationId: side.conversationId, side: side.side)] = side
        }
        return result
    }

    private func loadMessageSeqs(_ ids: [String], context: ProjectionContext) throws -> [String: (conversationId: String, seq: Int64)] {
        if ids.isEmpty { return [:] }
        var result: [String: (conversationId: String, seq: Int64)] = [:]
        for row in try context.connection.query(
            "SELECT message_id, conversation_id, seq FROM \(context.table("messages")) WHERE message_id = ANY($1)", ids)
        {
            result[try row.decode(String.self, "message_id")] = (try row.decode(String.self, "conversation_id"), try row.decode(Int64.self, "seq"))
        }
        return result
    }

    /// A JSON array of strings, written directly (once per message, on the projection's hot path).
    static func jsonArray(_ strings: [String]) -> String {
        var text = JSONText(capacity: 2 + strings.count * 40)
        text.raw(UInt8(ascii: "["))
        for (index, string) in strings.enumerated() {
            if index > 0 { text.raw(UInt8(ascii: ",")) }
            text.string(string)
        }
        text.raw(UInt8(ascii: "]"))
        return text.string
    }
}
