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
    /// When the last message was sent (nil for a thread without one).
    public var lastMessageAt: Date?
    public var unread: Bool
    public var archived: Bool
    public var noReplyNeeded: Bool
    public var closed: Bool

    public init(
        conversationId: String, kind: String, buyerId: String, shopId: String?, watchId: String?, lastActivityAt: Date, lastMessageId: String?,
        lastMessageBody: String?, lastMessageSide: String?, lastMessageAt: Date?, unread: Bool, archived: Bool, noReplyNeeded: Bool, closed: Bool
    ) {
        self.conversationId = conversationId
        self.kind = kind
        self.buyerId = buyerId
        self.shopId = shopId
        self.watchId = watchId
        self.lastActivityAt = lastActivityAt
        self.lastMessageId = lastMessageId
        self.lastMessageBody = lastMessageBody
        self.lastMessageSide = lastMessageSide
        self.lastMessageAt = lastMessageAt
        self.unread = unread
        self.archived = archived
        self.noReplyNeeded = noReplyNeeded
        self.closed = closed
    }
}

/// Who a thread is between and whether it may be written to, as one person asks (`ThreadReader.access`).
public struct ThreadAccess: Sendable, Hashable {
    public var buyerId: String
    public var shopId: String?
    public var kind: ConversationKind
    public var closedByBlock: Bool
    /// Wristler blocked the buyer's account.
    public var buyerBlocked: Bool
    /// The person asking works at the thread's shop.
    public var personWorksAtShop: Bool

    public init(buyerId: String, shopId: String?, kind: ConversationKind, closedByBlock: Bool, buyerBlocked: Bool, personWorksAtShop: Bool) {
        self.buyerId = buyerId
        self.shopId = shopId
        self.kind = kind
        self.closedByBlock = closedByBlock
        self.buyerBlocked = buyerBlocked
        self.personWorksAtShop = personWorksAtShop
    }

    init(row: PostgresRow) throws {
        buyerId = try row.decode(String.self, "buyer_id")
        shopId = try row.decode(String?.self, "shop_id")
        kind = ConversationKind(rawValue: try row.decode(String.self, "kind")) ?? .watch
        closedByBlock = try row.decode(Bool.self, "closed_by_block")
        buyerBlocked = try row.decode(Bool.self, "buyer_blocked")
        personWorksAtShop = try row.decode(Bool.self, "works_at_shop")
    }

    /// The side `person` (who asked) has: the buyer's if they are the buyer, the seller's if they
    /// work at the shop of a thread about a watch (Wristler's aftercare threads have no seller
    /// side); nil for anybody else. Somebody who is both has the buyer's.
    public func side(of person: String) -> ConversationSide? {
        if buyerId == person { return .buyer }
        if kind == .watch && shopId != nil && personWorksAtShop { return .seller }
        return nil
    }
}

/// A message of a conversation.
public struct ThreadMessage: Sendable, Hashable {
    public var id: String
    public var seq: Int64
    public var authorSide: String
    public var authorId: String
    /// Nil when erased: its author's data key is gone.
    public var body: String?
    public var attachmentHandles: [String]
    public var offer: Money?
    public var sentAt: Date

    public init(
        id: String, seq: Int64, authorSide: String, authorId: String, body: String?, attachmentHandles: [String], offer: Money?, sentAt: Date
    ) {
        self.id = id
        self.seq = seq
        self.authorSide = authorSide
        self.authorId = authorId
        self.body = body
        self.attachmentHandles = attachmentHandles
        self.offer = offer
        self.sentAt = sentAt
    }
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
        try conversations(owners: [owner], side: side, archived: archived, after: cursor, limit: limit, on: connection)
    }

    /// Conversations of several owners on one side together (the seller side of a person who works
    /// at several shops), by last activity, newest first, as one walk. One owner reads the list
    /// index in order; several are merged by a sort of their rows past the cursor.
    public static func conversations(
        owners: [String], side: ConversationSide, archived: Bool? = nil, after cursor: KeysetCursor? = nil, limit: Int,
        on connection: PostgresConnection
    ) throws -> KeysetPage<ThreadSummary> {
        let limit = max(1, limit)
        if owners.isEmpty { return KeysetPage(rows: [], next: nil) }
        let sql = listSQL(
            owners: owners.count == 1 ? "SELECT $1::text" : "SELECT unnest($1::text[])", archived: archived, after: cursor != nil)
        let rest = listParameters(side: side, after: cursor, limit: limit)
        let rows =
            owners.count == 1
            ? try connection.query(sql, binds: [PostgresBind(owners[0])] + rest)
            : try connection.query(sql, binds: [PostgresBind(owners)] + rest)
        let read = try rows.map { row -> (row: ThreadSummary, key: Int64, id: String) in
            let thread = try summary(row)
            return (thread, try row.decode(Int64.self, at: 14), thread.conversationId)
        }
        return KeysetPage(reading: read, limit: limit)
    }

    /// The list query: `owners` is a query of the owners' ids (from `$1`), `$2` the side, then
    /// with a cursor `$3`/`$4` its key and id and `$5` the limit, without one `$3` the limit. Each
    /// owner's page is read in the list index's order and cut at the limit (a shop's hundreds of
    /// threads are never all read and sorted), the owners' pages are merged, and only the final
    /// page is joined to its conversations. The first page has a statement of its own: with
    /// `$3 IS NULL OR ...` in one statement, PostgreSQL's generic plan could use the index for
    /// neither the cursor nor the order.
    static func listSQL(owners: String, archived: Bool?, after cursor: Bool) -> String {
        let filter = archived.map { $0 ? "AND s.archived" : "AND NOT s.archived" } ?? ""
        let seek =
            cursor ? "AND (s.last_activity_at, s.conversation_id) < (timestamptz 'epoch' + $3::bigint * interval '1 microsecond', $4::text)" : ""
        let limit = cursor ? "$5" : "$3"
        return """
            WITH page AS (
                SELECT p.* FROM (\(owners)) AS o(owner_id)
                CROSS JOIN LATERAL (
                    SELECT s.conversation_id, s.last_activity_at, s.unread, s.archived FROM thread_sides s
                    WHERE s.owner_id = o.owner_id AND s.side = $2 \(filter) \(seek)
                    ORDER BY s.last_activity_at DESC, s.conversation_id DESC
                    LIMIT \(limit)) AS p
                ORDER BY p.last_activity_at DESC, p.conversation_id DESC
                LIMIT \(limit))
            SELECT page.conversation_id, c.kind, c.buyer_id, c.shop_id, c.watch_id, page.last_activity_at, c.last_message_id,
                c.last_message_body, c.last_message_side, c.last_message_at, page.unread, page.archived, c.no_reply_needed, c.closed_by_block,
                (extract(epoch FROM page.last_activity_at) * 1000000)::bigint AS activity_us
            FROM page JOIN conversations c USING (conversation_id)
            ORDER BY page.last_activity_at DESC, page.conversation_id DESC
            """
    }

    /// `listSQL`'s parameters after the owners.
    static func listParameters(side: ConversationSide, after cursor: KeysetCursor?, limit: Int) -> [PostgresBind] {
        guard let cursor else { return [PostgresBind(side.rawValue), PostgresBind(Int64(limit + 1))] }
        return [PostgresBind(side.rawValue), PostgresBind(cursor.key), PostgresBind(cursor.id), PostgresBind(Int64(limit + 1))]
    }

    /// A page of a person's list on one side and that side's badge, in one round trip (pipeline
    /// mode): on the buyer side their own threads, on the seller side those of every shop they
    /// work at (`shop_members`), each shop's badge added up. `owners` are the owners the page was
    /// read from (the person, or their shops; with `withOwners` only, else empty): what a page
    /// kept in memory depends on.
    public static func listAndUnreadCount(
        person: String, side: ConversationSide, archived: Bool? = nil, after cursor: KeysetCursor? = nil, limit: Int, withOwners: Bool = false,
        on connection: PostgresConnection
    ) throws -> (page: KeysetPage<ThreadSummary>, unreadCount: Int, owners: [String]) {
        let limit = max(1, limit)
        let owners = side == .buyer ? "= $1" : "IN (SELECT shop_id FROM shop_members WHERE person_id = $1)"
        let ownerList = side == .buyer ? "SELECT $1::text" : "SELECT shop_id FROM shop_members WHERE person_id = $1"
        let results = try connection.pipeline(
            [
                PostgresStatement(
                    listSQL(owners: ownerList, archived: archived, after: cursor != nil),
                    binds: [PostgresBind(person)] + listParameters(side: side, after: cursor, limit: limit)),
                PostgresStatement(
                    "SELECT coalesce(sum(unread_count), 0)::bigint FROM unread_conversations WHERE owner_id \(owners) AND side = $2", person,
                    side.rawValue),
            ] + (withOwners && side == .seller ? [PostgresStatement(ownerList, person)] : []))
        let read = try results[0].map { row -> (row: ThreadSummary, key: Int64, id: String) in
            let thread = try summary(row)
            return (thread, try row.decode(Int64.self, at: 14), thread.conversationId)
        }
        let ownerIds = !withOwners ? [] : side == .buyer ? [person] : try results[2].map { try $0.decode(String.self, at: 0) }
        return (KeysetPage(reading: read, limit: limit), Int(try results[1].scalar(Int64.self)), ownerIds)
    }

    /// A summary from the first fourteen columns of a row, in the order `listSQL` and
    /// `conversation(_:side:on:)` select them (by position: a page decodes hundreds of values, and
    /// finding each by its name was a tenth of a list request).
    static func summary(_ row: PostgresRow) throws -> ThreadSummary {
        ThreadSummary(
            conversationId: try row.decode(String.self, at: 0), kind: try row.decode(String.self, at: 1),
            buyerId: try row.decode(String.self, at: 2), shopId: try row.decode(String?.self, at: 3),
            watchId: try row.decode(String?.self, at: 4), lastActivityAt: try row.decode(Date.self, at: 5),
            lastMessageId: try row.decode(String?.self, at: 6), lastMessageBody: try row.decode(String?.self, at: 7),
            lastMessageSide: try row.decode(String?.self, at: 8), lastMessageAt: try row.decode(Date?.self, at: 9),
            unread: try row.decode(Bool.self, at: 10), archived: try row.decode(Bool.self, at: 11),
            noReplyNeeded: try row.decode(Bool.self, at: 12), closed: try row.decode(Bool.self, at: 13))
    }

    /// One conversation as `side` sees it; nil when it is unknown or has no such side.
    public static func conversation(_ id: String, side: ConversationSide, on connection: PostgresConnection) throws -> ThreadSummary? {
        try connection.query(
            """
            SELECT s.conversation_id, c.kind, c.buyer_id, c.shop_id, c.watch_id, s.last_activity_at, c.last_message_id,
                c.last_message_body, c.last_message_side, c.last_message_at, s.unread, s.archived, c.no_reply_needed, c.closed_by_block
            FROM thread_sides s JOIN conversations c USING (conversation_id)
            WHERE s.conversation_id = $1 AND s.side = $2
            """, id, side.rawValue
        ).first.map(summary)
    }

    /// Who a conversation is between: its buyer and its shop (nil for a thread without one), and
    /// what it is about (`watch`, or Wristler's `aftercare`, which has no seller side).
    ///
    /// From the projection, or, for a thread it has not reached yet (an inline apply deferred behind
    /// another writer), from the thread's start in the log itself, so a participant is never told
    /// a thread that exists is not theirs.
    public static func parties(of id: String, on connection: PostgresConnection) throws -> (buyerId: String, shopId: String?, kind: ConversationKind)? {
        func read(_ row: PostgresRow) throws -> (String, String?, ConversationKind) {
            (
                try row.decode(String.self, "buyer_id"), try row.decode(String?.self, "shop_id"),
                ConversationKind(rawValue: try row.decode(String?.self, "kind") ?? "watch") ?? .watch
            )
        }
        if let projected = try connection.query("SELECT buyer_id, shop_id, kind FROM conversations WHERE conversation_id = $1", id).first {
            return try read(projected)
        }
        return try connection.query(
            """
            SELECT payload->>'buyerId' AS buyer_id, payload->>'shopId' AS shop_id, payload->>'kind' AS kind FROM events
            WHERE stream_id = $1 AND type = 'conversation_started' ORDER BY stream_version LIMIT 1
            """, Streams.conversation(id)
        ).first.map(read)
    }

    /// What deciding who may read and write a thread needs, for one person, in one statement:
    /// its parties, whether it is closed by a block, whether its buyer's account is blocked, and
    /// whether `person` works at its shop. For a thread the projection has not reached yet, the
    /// parties come from its start in the log (see `parties(of:on:)`), and it is not closed.
    /// `writing`: whether a block stands between the buyer and the shop is read live too (only a
    /// write needs it; a closed thread can be read).
    public static func access(to id: String, person: String, writing: Bool = false, on connection: PostgresConnection) throws -> ThreadAccess? {
        if let row = try connection.query(writing ? Self.writeAccessSQL : Self.accessSQL, id, person).first {
            return try ThreadAccess(row: row)
        }
        guard let parties = try parties(of: id, on: connection) else { return nil }
        let row = try connection.query(
            """
            SELECT EXISTS (SELECT 1 FROM shop_members WHERE shop_id = $1 AND person_id = $2) AS works_at_shop,
                EXISTS (SELECT 1 FROM blocked_accounts WHERE person_id = $3) AS buyer_blocked,
                \(parties.kind == .watch ? blockedBetween(buyer: "$3", shop: "$1") : "false") AS blocked_between
            """, parties.shopId, person, parties.buyerId
        ).first
        return ThreadAccess(
            buyerId: parties.buyerId, shopId: parties.shopId, kind: parties.kind,
            closedByBlock: try row?.decode(Bool.self, "blocked_between") ?? false,
            buyerBlocked: try row?.decode(Bool.self, "buyer_blocked") ?? false, personWorksAtShop: try row?.decode(Bool.self, "works_at_shop") ?? false)
    }

    static let accessSQL = """
        SELECT c.buyer_id, c.shop_id, c.kind, c.closed_by_block,
            EXISTS (SELECT 1 FROM blocked_accounts b WHERE b.person_id = c.buyer_id) AS buyer_blocked,
            EXISTS (SELECT 1 FROM shop_members m WHERE m.shop_id = c.shop_id AND m.person_id = $2) AS works_at_shop
        FROM conversations c WHERE c.conversation_id = $1
        """

    /// `accessSQL` for a write: a thread about a watch is closed while its buyer and its shop
    /// block each other, whether or not its `conversation_closed_by_block` is projected yet (a
    /// thread started while the block was written has none): the blocks people set are read live
    /// (`account_blocks`). About 17 µs more than `accessSQL` (pgbench, docs/messaging.md).
    static let writeAccessSQL = """
        SELECT c.buyer_id, c.shop_id, c.kind,
            c.closed_by_block OR (c.kind = 'watch' AND \(blockedBetween(buyer: "c.buyer_id", shop: "c.shop_id"))) AS closed_by_block,
            EXISTS (SELECT 1 FROM blocked_accounts b WHERE b.person_id = c.buyer_id) AS buyer_blocked,
            EXISTS (SELECT 1 FROM shop_members m WHERE m.shop_id = c.shop_id AND m.person_id = $2) AS works_at_shop
        FROM conversations c WHERE c.conversation_id = $1
        """

    /// `access(to:person:on:)` and a page of the thread's messages, in one round trip when the
    /// projection has the thread (the page is only handed out to a participant).
    public static func accessAndMessages(
        to id: String, person: String, after cursor: KeysetCursor? = nil, limit: Int, on connection: PostgresConnection
    ) throws -> (access: ThreadAccess?, page: KeysetPage<ThreadMessage>) {
        let limit = max(1, limit)
        let results = try connection.pipeline([
            PostgresStatement(accessSQL, id, person),
            PostgresStatement(messagesSQL, id, cursor?.key, Int64(limit + 1)),
        ])
        let access = try results[0].first.map(ThreadAccess.init(row:)) ?? Self.access(to: id, person: person, on: connection)
        return (access, try messagesPage(results[1], limit: limit))
    }

    /// The buyer's conversation about a watch, if there is one (the first started).
    public static func conversation(buyer: String, watch: String, on connection: PostgresConnection) throws -> String? {
        try connection.query(
            """
            SELECT conversation_id FROM conversations WHERE watch_id = $1 AND buyer_id = $2 AND kind = 'watch'
            ORDER BY started_at, conversation_id LIMIT 1
            """, watch, buyer
        ).first?.decode(String.self, "conversation_id")
    }

    /// A watch's shop and status as the catalogue's events last said (`thread_watches`).
    public static func watch(_ id: String, on connection: PostgresConnection) throws -> (shopId: String, status: WatchStatus?)? {
        try connection.query("SELECT shop_id, status FROM thread_watches WHERE watch_id = $1", id).first.map {
            (try $0.decode(String.self, "shop_id"), WatchStatus(rawValue: try $0.decode(String.self, "status")))
        }
    }

    /// Whether Wristler blocked `person`'s account (`blocked_accounts`).
    public static func isBlockedAccount(_ person: String, on connection: PostgresConnection) throws -> Bool {
        try connection.query("SELECT EXISTS (SELECT 1 FROM blocked_accounts WHERE person_id = $1)", person).scalar(Bool.self)
    }

    /// Whether `person` and `shop` block each other (`account_blocks`, the blocks people set
    /// through `/v1/me/blocks`): the person blocked the shop, or somebody who works there, or
    /// somebody who works there blocked the person.
    public static func isBlockedBetween(_ person: String, shop: String, on connection: PostgresConnection) throws -> Bool {
        try connection.query("SELECT \(blockedBetween(buyer: "$1", shop: "$2"))", person, shop).scalar(Bool.self)
    }

    /// The SQL of `isBlockedBetween` for a buyer and a shop given as SQL expressions.
    public static func blockedBetween(buyer: String, shop: String) -> String {
        """
        (EXISTS (SELECT 1 FROM account_blocks WHERE blocker_id = \(buyer) AND blocked_type = 'shops' AND blocked_id = \(shop))
            OR EXISTS (SELECT 1 FROM account_blocks a JOIN shop_members m ON m.person_id = a.blocked_id
                WHERE a.blocker_id = \(buyer) AND a.blocked_type = 'people' AND m.shop_id = \(shop))
            OR EXISTS (SELECT 1 FROM account_blocks a JOIN shop_members m ON m.person_id = a.blocker_id
                WHERE a.blocked_type = 'people' AND a.blocked_id = \(buyer) AND m.shop_id = \(shop)))
        """
    }

    /// One message of a conversation, nil when it has no such message.
    public static func message(_ id: String, conversation: String, on connection: PostgresConnection) throws -> ThreadMessage? {
        try connection.query(
            """
            SELECT message_id, seq, author_side, author_id, body, attachment_handles, offer_amount, offer_currency, sent_at
            FROM messages WHERE message_id = $1 AND conversation_id = $2
            """, id, conversation
        ).first.map(Self.message)
    }

    /// Messages of a conversation, newest first. Messages sent during a walk are newer than every
    /// cursor, so a walk neither skips nor repeats one.
    public static func messages(
        conversation: String, after cursor: KeysetCursor? = nil, limit: Int, on connection: PostgresConnection
    ) throws -> KeysetPage<ThreadMessage> {
        let limit = max(1, limit)
        return try messagesPage(try connection.query(messagesSQL, conversation, cursor?.key, Int64(limit + 1)), limit: limit)
    }

    static let messagesSQL = """
        SELECT message_id, seq, author_side, author_id, body, attachment_handles, offer_amount, offer_currency, sent_at
        FROM messages WHERE conversation_id = $1 AND ($2::bigint IS NULL OR seq < $2)
        ORDER BY seq DESC LIMIT $3
        """

    static func messagesPage(_ rows: PostgresRows, limit: Int) throws -> KeysetPage<ThreadMessage> {
        let read = try rows.map { row -> (row: ThreadMessage, key: Int64, id: String) in
            let found = try Self.message(row)
            return (found, found.seq, found.id)
        }
        return KeysetPage(reading: read, limit: limit)
    }

    static func message(_ row: PostgresRow) throws -> ThreadMessage {
        let amount = try row.decode(Int64?.self, "offer_amount")
        let currency = try row.decode(String?.self, "offer_currency")
        return ThreadMessage(
            id: try row.decode(String.self, "message_id"), seq: try row.decode(Int64.self, "seq"),
            authorSide: try row.decode(String.self, "author_side"), authorId: try row.decode(String.self, "author_id"),
            body: try row.decode(String?.self, "body"), attachmentHandles: try Self.strings(row.decode(PostgresRawJSON.self, "attachment_handles")),
            offer: amount.flatMap { amount in currency.map { Money(amount: amount, currency: $0) } },
            sentAt: try row.decode(Date.self, "sent_at"))
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
