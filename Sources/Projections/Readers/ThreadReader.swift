import Foundation
import InboxDomain
import PostgresClient

/// A conversation as one side lists it.
public struct ThreadSummary: Sendable, Hashable {
    public var conversationId: String
    public var kind: String
    public var buyerId: String
    public var shopId: String?
    public var watchId: String?
    public var lastActivityAt: Date
    public var lastMessageId: String?
    public var lastMessageBody: String?
    public var lastMessageSide: String?
    public var unread: Bool
    public var archived: Bool
    public var noReplyNeeded: Bool
    public var closed: Bool
}

/// A message of a conversation.
public struct ThreadMessage: Sendable, Hashable {
    public var id: String
    public var seq: Int64
    public var authorSide: String
    public var authorId: String
    public var body: String
    public var attachmentHandles: [String]
    public var offer: Money?
    public var sentAt: Date
}

/// Reads conversations and messages from the live tables in keyset pages, and the maintained
/// count of conversations with unread messages.
public enum ThreadReader {
    /// Conversations of `owner` (a buyer's person id, or a shop id for the seller side), by last
    /// activity, newest first. A conversation started during a walk is newer than every cursor and
    /// does not disturb it; one whose activity moves it past the cursor shows on the next walk.
    public static func conversations(
        owner: String, side: ConversationSide, archived: Bool? = nil, after cursor: KeysetCursor? = nil, limit: Int,
        on connection: PostgresConnection
    ) throws -> KeysetPage<ThreadSummary> {
        let limit = max(1, limit)
        let filter = archived.map { $0 ? "AND s.archived" : "AND NOT s.archived" } ?? ""
        let rows = try connection.query(
            """
            SELECT s.conversation_id, c.kind, c.buyer_id, c.shop_id, c.watch_id, s.last_activity_at, c.last_message_id,
                c.last_message_body, c.last_message_side, s.unread, s.archived, c.no_reply_needed, c.closed_by_block,
                (extract(epoch FROM s.last_activity_at) * 1000000)::bigint AS activity_us
            FROM thread_sides s JOIN conversations c USING (conversation_id)
            WHERE s.owner_id = $1 AND s.side = $2 \(filter)
              AND ($3::bigint IS NULL
                   OR (s.last_activity_at, s.conversation_id) < (timestamptz 'epoch' + $3::bigint * interval '1 microsecond', $4::text))
            ORDER BY s.last_activity_at DESC, s.conversation_id DESC
            LIMIT $5
            """, owner, side.rawValue, cursor?.key, cursor?.id, Int64(limit + 1))
        let read = try rows.map { row -> (row: ThreadSummary, key: Int64, id: String) in
            let thread = ThreadSummary(
                conversationId: try row.decode(String.self, "conversation_id"), kind: try row.decode(String.self, "kind"),
                buyerId: try row.decode(String.self, "buyer_id"), shopId: try row.decode(String?.self, "shop_id"),
                watchId: try row.decode(String?.self, "watch_id"), lastActivityAt: try row.decode(Date.self, "last_activity_at"),
                lastMessageId: try row.decode(String?.self, "last_message_id"),
                lastMessageBody: try row.decode(String?.self, "last_message_body"),
                lastMessageSide: try row.decode(String?.self, "last_message_side"), unread: try row.decode(Bool.self, "unread"),
                archived: try row.decode(Bool.self, "archived"), noReplyNeeded: try row.decode(Bool.self, "no_reply_needed"),
                closed: try row.decode(Bool.self, "closed_by_block"))
            return (thread, try row.decode(Int64.self, "activity_us"), thread.conversationId)
        }
        return KeysetPage(reading: read, limit: limit)
    }

    /// Messages of a conversation, newest first. Messages sent during a walk are newer than every
    /// cursor, so a walk neither skips nor repeats one.
    public static func messages(
        conversation: String, after cursor: KeysetCursor? = nil, limit: Int, on connection: PostgresConnection
    ) throws -> KeysetPage<ThreadMessage> {
        let limit = max(1, limit)
        let rows = try connection.query(
            """
            SELECT message_id, seq, author_side, author_id, body, attachment_handles, offer_amount, offer_currency, sent_at
            FROM messages WHERE conversation_id = $1 AND ($2::bigint IS NULL OR seq < $2)
            ORDER BY seq DESC LIMIT $3
            """, conversation, cursor?.key, Int64(limit + 1))
        let read = try rows.map { row -> (row: ThreadMessage, key: Int64, id: String) in
            let amount = try row.decode(Int64?.self, "offer_amount")
            let currency = try row.decode(String?.self, "offer_currency")
            let message = ThreadMessage(
                id: try row.decode(String.self, "message_id"), seq: try row.decode(Int64.self, "seq"),
                authorSide: try row.decode(String.self, "author_side"), authorId: try row.decode(String.self, "author_id"),
                body: try row.decode(String.self, "body"), attachmentHandles: try Self.strings(row.decode(PostgresRawJSON.self, "attachment_handles")),
                offer: amount.flatMap { amount in currency.map { Money(amount: amount, currency: $0) } },
                sentAt: try row.decode(Date.self, "sent_at"))
            return (message, message.seq, message.id)
        }
        return KeysetPage(reading: read, limit: limit)
    }

    static func strings(_ json: PostgresRawJSON) throws -> [String] {
        try JSONDecoder().decode([String].self, from: Data(json.text.utf8))
    }

    /// The number of `owner`'s conversations on `side` with unread messages (`meta.unread`).
    public static func unreadConversations(owner: String, side: ConversationSide, on connection: PostgresConnection) throws -> Int {
        Int(
            try connection.query(
                "SELECT unread_count FROM unread_conversations WHERE owner_id = $1 AND side = $2", owner, side.rawValue
            ).first?.decode(Int32.self, "unread_count") ?? 0)
    }
}
