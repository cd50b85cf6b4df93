import EventLog
import Foundation
import InboxDomain
import PostgresClient

extension BellFold {
    /// The bell's own record of what events do not carry: conversations' buyers and shops, who saved
    /// which watch, and which saved searches exist. Loaded for the keys of a batch, folded event by
    /// event (so each event sees the facts as they stood at its place in the log), and written back.
    struct Facts {
        var conversations: [String: NotificationPlanner.ConversationFacts] = [:]
        var changedConversations: Set<String> = []
        var favouriters: [String: Set<String>] = [:]
        var favouriteChanges: [FavouriteKey: Bool] = [:]
        var searches: [String: (personId: String, deleted: Bool)] = [:]
        var changedSearches: Set<String> = []

        struct FavouriteKey: Hashable {
            let watchId: String
            let personId: String
        }

        /// The first start of a conversation counts.
        mutating func start(_ e: ConversationStarted) {
            guard conversations[e.conversationId] == nil else { return }
            conversations[e.conversationId] = NotificationPlanner.ConversationFacts(
                buyerId: e.buyerId, shopId: e.shopId, watchId: e.watchId, kind: e.kind, isClosed: false)
            changedConversations.insert(e.conversationId)
        }

        mutating func close(_ id: String) {
            guard var conversation = conversations[id], !conversation.isClosed else { return }
            conversation.isClosed = true
            conversations[id] = conversation
            changedConversations.insert(id)
        }

        mutating func setFavourite(_ isFavourite: Bool, watch: String, person: String) {
            if isFavourite {
                favouriters[watch, default: []].insert(person)
            } else {
                favouriters[watch]?.remove(person)
            }
            favouriteChanges[FavouriteKey(watchId: watch, personId: person)] = isFavourite
        }

        func favouriters(of watch: String) -> [String] { Array(favouriters[watch] ?? []) }

        /// The first creation of a search counts.
        mutating func createSearch(_ id: String, of person: String) {
            guard searches[id] == nil else { return }
            searches[id] = (person, false)
            changedSearches.insert(id)
        }

        mutating func deleteSearch(_ id: String) {
            guard let search = searches[id], !search.deleted else { return }
            searches[id] = (search.personId, true)
            changedSearches.insert(id)
        }

        /// Whether the search was created for `person` and is not deleted.
        func searchExists(_ id: String, of person: String) -> Bool {
            searches[id].map { !$0.deleted && $0.personId == person } ?? false
        }
    }
}

extension BellProjection {
    /// The reads of the facts of the conversations, watches and saved searches a batch names, one
    /// statement per table that has any (`facts(_:from:)` takes their results in this order).
    func factLoads(_ keys: BellFold.Keys, context: ProjectionContext) -> [PostgresStatement] {
        [
            keys.conversations.isEmpty
                ? nil
                : PostgresStatement("SELECT * FROM \(context.table("bell_conversations")) WHERE conversation_id = ANY($1)", Array(keys.conversations)),
            keys.watches.isEmpty
                ? nil
                : PostgresStatement("SELECT watch_id, person_id FROM \(context.table("bell_favourites")) WHERE watch_id = ANY($1)", Array(keys.watches)),
            keys.searches.isEmpty
                ? nil
                : PostgresStatement("SELECT * FROM \(context.table("bell_saved_searches")) WHERE saved_search_id = ANY($1)", Array(keys.searches)),
        ].compactMap { $0 }
    }

    /// The facts out of `factLoads`' results, taken from the front of `loaded`.
    func facts(_ keys: BellFold.Keys, from loaded: inout ArraySlice<PostgresRows>) throws -> BellFold.Facts {
        var facts = BellFold.Facts()
        if !keys.conversations.isEmpty {
            for row in loaded.removeFirst() {
                facts.conversations[try row.decode(String.self, "conversation_id")] = NotificationPlanner.ConversationFacts(
                    buyerId: try row.decode(String.self, "buyer_id"), shopId: try row.decode(String?.self, "shop_id"),
                    watchId: try row.decode(String?.self, "watch_id"),
                    kind: ConversationKind(rawValue: try row.decode(String.self, "kind")) ?? .watch,
                    isClosed: try row.decode(Bool.self, "closed"))
            }
        }
        if !keys.watches.isEmpty {
            for row in loaded.removeFirst() {
                facts.favouriters[try row.decode(String.self, "watch_id"), default: []].insert(try row.decode(String.self, "person_id"))
            }
        }
        if !keys.searches.isEmpty {
            for row in loaded.removeFirst() {
                facts.searches[try row.decode(String.self, "saved_search_id")] = (
                    try row.decode(String.self, "person_id"), try row.decode(Bool.self, "deleted")
                )
            }
        }
        return facts
    }

    /// The writes of what the batch changed about the facts.
    func factWrites(_ facts: BellFold.Facts, context: ProjectionContext) -> [PostgresStatement] {
        var statements: [PostgresStatement] = []
        let ids = Array(facts.changedConversations)
        if !ids.isEmpty {
            let rows = ids.map { facts.conversations[$0]! }
            statements.append(
                PostgresStatement(
                    """
                    INSERT INTO \(context.table("bell_conversations")) (conversation_id, buyer_id, shop_id, watch_id, kind, closed)
                    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::boolean[])
                    ON CONFLICT (conversation_id) DO UPDATE SET closed = excluded.closed
                    """, ids, rows.map(\.buyerId), rows.map(\.shopId), rows.map(\.watchId), rows.map(\.kind.rawValue), rows.map(\.isClosed)))
        }
        let added = facts.favouriteChanges.filter(\.value).map(\.key)
        let removed = facts.favouriteChanges.filter { !$0.value }.map(\.key)
        if !removed.isEmpty {
            statements.append(
                PostgresStatement(
                    """
                    DELETE FROM \(context.table("bell_favourites")) t USING unnest($1::text[], $2::text[]) AS u(w, p)
                    WHERE t.watch_id = u.w AND t.person_id = u.p
                    """, removed.map(\.watchId), removed.map(\.personId)))
        }
        if !added.isEmpty {
            statements.append(
                PostgresStatement(
                    """
                    INSERT INTO \(context.table("bell_favourites")) (watch_id, person_id)
                    SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING
                    """, added.map(\.watchId), added.map(\.personId)))
        }
        let searchIds = Array(facts.changedSearches)
        if !searchIds.isEmpty {
            statements.append(
                PostgresStatement(
                    """
                    INSERT INTO \(context.table("bell_saved_searches")) (saved_search_id, person_id, deleted)
                    SELECT * FROM unnest($1::text[], $2::text[], $3::boolean[])
                    ON CONFLICT (saved_search_id) DO UPDATE SET deleted = excluded.deleted
                    """, searchIds, searchIds.map { facts.searches[$0]!.personId }, searchIds.map { facts.searches[$0]!.deleted }))
        }
        return statements
    }
}
