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
public struct ThreadsProjection: StagedProjection {
    public let name = "threads"
    public let version = 1
    public let tableNames = ["conversations", "thread_sides", "messages", "unread_conversations", "thread_watches"]
    public var eventTypes: Set<String> { ThreadsFold.rules.handledTypes }
    public var ignoredEventTypes: Set<String> { ThreadsFold.rules.ignoredTypes }

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
                -- NULL: erased (its author's data key is gone; sql/029).
                body               text,
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

    /// `conversations_waiting` serves the schedule's shop reminders (docs/schedule.md): only the
    /// threads whose last message is a buyer's. It came after version 1 without changing the
    /// tables' rows, so it is not a new version: sql/012 adds it to live tables made before it.
    public func createIndexes(in context: ProjectionContext) throws {
        try context.connection.execute(
            """
            CREATE INDEX IF NOT EXISTS conversations_watch ON \(context.table("conversations")) (watch_id);
            CREATE INDEX IF NOT EXISTS conversations_waiting ON \(context.table("conversations")) (last_message_at)
                WHERE last_message_side = 'buyer' AND kind = 'watch';
            CREATE INDEX IF NOT EXISTS thread_sides_list ON \(context.table("thread_sides"))
                (owner_id, side, last_activity_at DESC, conversation_id DESC);
            CREATE UNIQUE INDEX IF NOT EXISTS messages_conversation_seq ON \(context.table("messages")) (conversation_id, seq);
            """)
    }

    public func loads(for events: [ProjectedEvent], in context: ProjectionContext) -> [PostgresStatement] {
        let keys = ThreadsFold.keys(of: events)
        let conversationIds = Array(keys.conversations)
        let messageIds = Array(keys.messages)
        return [
            conversationIds.isEmpty ? nil : PostgresStatement("SELECT * FROM \(context.table("conversations")) WHERE conversation_id = ANY($1)", conversationIds),
            conversationIds.isEmpty ? nil : PostgresStatement("SELECT * FROM \(context.table("thread_sides")) WHERE conversation_id = ANY($1)", conversationIds),
            messageIds.isEmpty
                ? nil : PostgresStatement("SELECT message_id, conversation_id, seq FROM \(context.table("messages")) WHERE message_id = ANY($1)", messageIds),
        ].compactMap { $0 }
    }

    public func writes(for events: [ProjectedEvent], loaded: [PostgresRows], in context: ProjectionContext) throws -> [PostgresStatement] {
        let keys = ThreadsFold.keys(of: events)
        var loaded = loaded[...]
        let conversations = keys.conversations.isEmpty ? [:] : try Self.conversations(loaded.removeFirst())
        let sides = keys.conversations.isEmpty ? [:] : try Self.sides(loaded.removeFirst())
        let places = keys.messages.isEmpty ? [:] : try Self.messagePlaces(loaded.removeFirst())
        let fold = try ThreadsFold.fold(events, conversations: conversations, sides: sides, messages: places)
        let changedSides = fold.changedSides
        let changedConversations = fold.changedConversations
        let writes = [
            writeWatches(fold.watches, context: context), writeConversations(changedConversations, context: context),
            writeMessages(fold.newMessages, context: context), writeSides(changedSides, context: context),
        ].compactMap { $0 } + writeUnreadCounts(ThreadsFold.unreadDeltas(of: changedSides), context: context)
            + Self.erasure(fold.erasedPeople, context: context)
        // Live and inline, whoever keeps conversation lists in memory learns whose changed when this commits.
        let announcements =
            context.mode == .replay
            ? [] : Announcement.statements(Self.subjects(changedConversations, changedSides), channel: ThreadChanges.channel)
        return writes + announcements
    }

    /// The bodies of `people`'s messages stored before, and of the threads whose last message is
    /// theirs, go (`person_erased`). Every list may have shown one: live, all are announced.
    static func erasure(_ people: Set<String>, context: ProjectionContext) -> [PostgresStatement] {
        if people.isEmpty { return [] }
        let ids = Array(people)
        return [
            PostgresStatement(
                "UPDATE \(context.table("messages")) SET body = NULL WHERE author_id = ANY($1::text[]) AND body IS NOT NULL", ids),
            PostgresStatement(
                """
                UPDATE \(context.table("conversations")) c SET last_message_body = NULL FROM \(context.table("messages")) m
                WHERE m.message_id = c.last_message_id AND m.author_id = ANY($1::text[]) AND c.last_message_body IS NOT NULL
                """, ids),
        ] + (context.mode == .replay ? [] : [PostgresStatement("SELECT pg_notify($1, '*')", ThreadChanges.channel)])
    }

    /// The lists a batch changed (`ThreadChanges`): both sides of every thread it touched, and the
    /// messages of every thread it touched.
    static func subjects(_ conversations: [ThreadsFold.Conversation], _ sides: [ThreadsFold.Side]) -> Set<String> {
        var subjects = Set<String>()
        for conversation in conversations {
            subjects.insert(ThreadChanges.conversation(conversation.id))
            subjects.insert(ThreadChanges.buyer(conversation.buyerId))
            if let shop = conversation.shopId { subjects.insert(ThreadChanges.seller(shop)) }
        }
        for side in sides {
            subjects.insert(side.side == ConversationSide.buyer.rawValue ? ThreadChanges.buyer(side.ownerId) : ThreadChanges.seller(side.ownerId))
        }
        return subjects
    }

    private func writeConversations(_ c: [ThreadsFold.Conversation], context: ProjectionContext) -> PostgresStatement? {
        if c.isEmpty { return nil }
        return PostgresStatement(
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

    private func writeMessages(_ m: [ThreadsFold.Message], context: ProjectionContext) -> PostgresStatement? {
        if m.isEmpty { return nil }
        return PostgresStatement(
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

    private func writeSides(_ s: [ThreadsFold.Side], context: ProjectionContext) -> PostgresStatement? {
        if s.isEmpty { return nil }
        return PostgresStatement(
            """
            INSERT INTO \(context.table("thread_sides")) AS t (conversation_id, side, owner_id, last_activity_at,
                last_incoming_seq, read_through_seq, archived)
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::bigint[], $6::bigint[], $7::boolean[])
            ON CONFLICT (conversation_id, side) DO UPDATE SET last_activity_at = excluded.last_activity_at,
                last_incoming_seq = excluded.last_incoming_seq, read_through_seq = excluded.read_through_seq,
                archived = excluded.archived
            """, s.map(\.conversationId), s.map(\.side), s.map(\.ownerId), s.map(\.lastActivityAt), s.map(\.lastIncomingSeq),
            s.map(\.readThroughSeq), s.map(\.archived))
    }

    private func writeUnreadCounts(_ deltas: [ThreadsFold.OwnerSide: Int32], context: ProjectionContext) -> [PostgresStatement] {
        let keys = Array(deltas.keys)
        if keys.isEmpty { return [] }
        // Rows first, then the changes (see BellProjection: checks come before conflicts).
        return [
            PostgresStatement(
            """
            INSERT INTO \(context.table("unread_conversations")) (owner_id, side, unread_count)
            SELECT o, s, 0 FROM unnest($1::text[], $2::text[]) AS u(o, s) ON CONFLICT (owner_id, side) DO NOTHING
            """, keys.map(\.ownerId), keys.map(\.side)),
            PostgresStatement(
            """
            UPDATE \(context.table("unread_conversations")) t SET unread_count = t.unread_count + u.delta
            FROM unnest($1::text[], $2::text[], $3::int[]) AS u(owner, side, delta)
            WHERE t.owner_id = u.owner AND t.side = u.side
            """, keys.map(\.ownerId), keys.map(\.side), keys.map { deltas[$0]! }),
        ]
    }

    private func writeWatches(_ watches: [String: ThreadsFold.Watch], context: ProjectionContext) -> PostgresStatement? {
        if watches.isEmpty { return nil }
        let ids = Array(watches.keys)
        return PostgresStatement(
            """
            INSERT INTO \(context.table("thread_watches")) (watch_id, shop_id, status)
            SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
            ON CONFLICT (watch_id) DO UPDATE SET shop_id = excluded.shop_id, status = excluded.status
            """, ids, ids.map { watches[$0]!.shopId }, ids.map { watches[$0]!.status })
    }

    private static func conversations(_ rows: PostgresRows) throws -> [String: ThreadsFold.Conversation] {
        var result: [String: ThreadsFold.Conversation] = [:]
        for row in rows {
            var conversation = ThreadsFold.Conversation(
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

    /// Not locked when read: inline writers and the async projector are serialized by the checkpoint row.
    private static func sides(_ rows: PostgresRows) throws -> [ThreadsFold.SideKey: ThreadsFold.Side] {
        var result: [ThreadsFold.SideKey: ThreadsFold.Side] = [:]
        for row in rows {
            var side = ThreadsFold.Side(
                conversationId: try row.decode(String.self, "conversation_id"), side: try row.decode(String.self, "side"),
                ownerId: try row.decode(String.self, "owner_id"), lastActivityAt: try row.decode(Date.self, "last_activity_at"))
            side.lastIncomingSeq = try row.decode(Int64.self, "last_incoming_seq")
            side.readThroughSeq = try row.decode(Int64.self, "read_through_seq")
            side.archived = try row.decode(Bool.self, "archived")
            side.unreadBefore = side.unread
            side.existed = true
            result[ThreadsFold.SideKey(conversationId: side.conversationId, side: side.side)] = side
        }
        return result
    }

    private static func messagePlaces(_ rows: PostgresRows) throws -> [String: ThreadsFold.MessagePlace] {
        var result: [String: ThreadsFold.MessagePlace] = [:]
        for row in rows {
            result[try row.decode(String.self, "message_id")] = ThreadsFold.MessagePlace(
                conversationId: try row.decode(String.self, "conversation_id"), seq: try row.decode(Int64.self, "seq"))
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
