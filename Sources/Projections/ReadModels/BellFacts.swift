import EventLog
import Foundation
import InboxDomain
import PostgresClient

extension BellProjection {
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

        static func load(conversations ids: Set<String>, watches: Set<String>, searches: Set<String>, context: ProjectionContext) throws -> Facts {
            var facts = Facts()
            let connection = context.connection
            if !ids.isEmpty {
                for row in try connection.query(
                    "SELECT * FROM \(context.table("bell_conversations")) WHERE conversation_id = ANY($1)", Array(ids))
                {
                    facts.conversations[try row.decode(String.self, "conversation_id")] = NotificationPlanner.ConversationFacts(
                        buyerId: try row.decode(String.self, "buyer_id"), shopId: try row.decode(String?.self, "shop_id"),
                        watchId: try row.decode(String?.self, "watch_id"),
                        kind: ConversationKind(rawValue: try row.decode(String.self, "kind")) ?? .watch,
                        isClosed: try row.decode(Bool.self, "closed"))
                }
            }
            if !watches.isEmpty {
                for row in try connection.query(
                    "SELECT watch_id, person_id FROM \(context.table("bell_favourites")) WHERE watch_id = ANY($1)", Array(watches))
                {
                    facts.favouriters[try row.decode(String.self, "watch_id"), default: []].insert(try row.decode(String.self, "person_id"))
                }
            }
            if !searches.isEmpty {
                for row in try connection.query(
                    "SELECT * FROM \(context.table("bell_saved_searches")) WHERE saved_search_id = ANY($1)", Array(searches))
                {
                    facts.searches[try row.decode(String.self, "saved_search_id")] = (
                        try row.decode(String.self, "person_id"), try row.decode(Bool.self, "deleted")
                    )
                }
            }
            return facts
        }

        /// The facts the planner needs for `event`, as they stand now.
        func planning(for event: any CatalogueEvent) -> NotificationPlanner.Facts {
            switch event {
            case let e as MessageSent: NotificationPlanner.Facts(conversation: conversations[e.conversationId])
            case let e as WatchPriceChanged: NotificationPlanner.Facts(favouriters: Array(favouriters[e.watchId] ?? []))
            case let e as WatchStatusChanged: NotificationPlanner.Facts(favouriters: Array(favouriters[e.watchId] ?? []))
            case let e as SavedSearchMatched:
                NotificationPlanner.Facts(savedSearchExists: searches[e.savedSearchId].map { !$0.deleted && $0.personId == e.personId } ?? false)
            default: NotificationPlanner.Facts()
            }
        }

        /// Takes in what `event` changes about the facts.
        mutating func fold(_ event: any CatalogueEvent) {
            switch event {
            case let e as ConversationStarted:
                guard conversations[e.conversationId] == nil else { return }
                conversations[e.conversationId] = NotificationPlanner.ConversationFacts(
                    buyerId: e.buyerId, shopId: e.shopId, watchId: e.watchId, kind: e.kind, isClosed: false)
                changedConversations.insert(e.conversationId)
            case let e as ConversationClosedByBlock:
                guard var conversation = conversations[e.conversationId], !conversation.isClosed else { return }
                conversation.isClosed = true
                conversations[e.conversationId] = conversation
                changedConversations.insert(e.conversationId)
            case let e as FavouriteAdded:
                favouriters[e.watchId, default: []].insert(e.personId)
                favouriteChanges[FavouriteKey(watchId: e.watchId, personId: e.personId)] = true
            case let e as FavouriteRemoved:
                favouriters[e.watchId]?.remove(e.personId)
                favouriteChanges[FavouriteKey(watchId: e.watchId, personId: e.personId)] = false
            case let e as SavedSearchCreated:
                guard searches[e.savedSearchId] == nil else { return }
                searches[e.savedSearchId] = (e.personId, false)
                changedSearches.insert(e.savedSearchId)
            case let e as SavedSearchDeleted:
                guard let search = searches[e.savedSearchId], !search.deleted else { return }
                searches[e.savedSearchId] = (search.personId, true)
                changedSearches.insert(e.savedSearchId)
            default: break
            }
        }

        func store(context: ProjectionContext) throws {
            let connection = context.connection
            let ids = Array(changedConversations)
            if !ids.isEmpty {
                let facts = ids.map { conversations[$0]! }
                try connection.query(
                    """
                    INSERT INTO \(context.table("bell_conversations")) (conversation_id, buyer_id, shop_id, watch_id, kind, closed)
                    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::boolean[])
                    ON CONFLICT (conversation_id) DO UPDATE SET closed = excluded.closed
                    """, ids, facts.map(\.buyerId), facts.map(\.shopId), facts.map(\.watchId), facts.map(\.kind.rawValue),
                    facts.map(\.isClosed))
            }
            let added = favouriteChanges.filter(\.value).map(\.key)
            let removed = favouriteChanges.filter { !$0.value }.map(\.key)
            if !removed.isEmpty {
                try connection.query(
                    """
                    DELETE FROM \(context.table("bell_favourites")) t USING unnest($1::text[], $2::text[]) AS u(w, p)
                    WHERE t.watch_id = u.w AND t.person_id = u.p
                    """, removed.map(\.watchId), removed.map(\.personId))
            }
            if !added.isEmpty {
                try connection.query(
                    """
                    INSERT INTO \(context.table("bell_favourites")) (watch_id, person_id)
                    SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING
                    """, added.map(\.watchId), added.map(\.personId))
            }
            let searchIds = Array(changedSearches)
            if !searchIds.isEmpty {
                try connection.query(
                    """
                    INSERT INTO \(context.table("bell_saved_searches")) (saved_search_id, person_id, deleted)
                    SELECT * FROM unnest($1::text[], $2::text[], $3::boolean[])
                    ON CONFLICT (saved_search_id) DO UPDATE SET deleted = excluded.deleted
                    """, searchIds, searchIds.map { searches[$0]!.personId }, searchIds.map { searches[$0]!.deleted })
            }
        }
    }
}
