import EventLog
import Foundation
import InboxDomain
import PostgresClient

extension BellFold {
    /// The bell's own record of what events do not carry: conversations' buyers and shops, who saved
    /// which watch, which saved searches exist (with their `interval` and `push`), and what the
    /// decision of a notification reads about its people: who works at which shop, the switches
    /// people changed, and the accounts Wristler blocked. Loaded for the keys of a batch, folded
    /// event by event (so each event sees the facts as they stood at its place in the log), and
    /// written back.
    struct Facts {
        var conversations: [String: NotificationPlanner.ConversationFacts] = [:]
        var changedConversations: Set<String> = []
        var favouriters: [String: Set<String>] = [:]
        var favouriteChanges: [PairKey: Bool] = [:]
        /// Who works at which shop, people's switches and saved searches, blocked accounts.
        var audience = AudienceFacts()
        var changedSearches: Set<String> = []
        var memberChanges: [PairKey: Bool] = [:]
        var switchChanges: [SwitchKey: Bool] = [:]
        var newlyBlocked: Set<String> = []
        /// Whether the changes above are kept for writing back batch by batch; off in a fold held
        /// in memory (`BellReplayFold`), which writes every fact once at its end.
        var recordsChanges = true

        /// A watch and a person, or a shop and a person.
        struct PairKey: Hashable {
            let of: String
            let personId: String
        }

        struct SwitchKey: Hashable {
            let personId: String
            let category: NotificationCategory
            let channel: NotificationChannel
        }

        /// The first start of a conversation counts.
        mutating func start(_ e: ConversationStarted) {
            guard conversations[e.conversationId] == nil else { return }
            conversations[e.conversationId] = NotificationPlanner.ConversationFacts(
                buyerId: e.buyerId, shopId: e.shopId, watchId: e.watchId, kind: e.kind, isClosed: false)
            if recordsChanges { changedConversations.insert(e.conversationId) }
        }

        mutating func close(_ id: String) { setClosed(true, id) }

        mutating func reopen(_ id: String) { setClosed(false, id) }

        private mutating func setClosed(_ closed: Bool, _ id: String) {
            guard var conversation = conversations[id], conversation.isClosed != closed else { return }
            conversation.isClosed = closed
            conversations[id] = conversation
            if recordsChanges { changedConversations.insert(id) }
        }

        mutating func setFavourite(_ isFavourite: Bool, watch: String, person: String) {
            if isFavourite {
                favouriters[watch, default: []].insert(person)
            } else {
                favouriters[watch]?.remove(person)
            }
            if recordsChanges { favouriteChanges[PairKey(of: watch, personId: person)] = isFavourite }
        }

        func favouriters(of watch: String) -> [String] { Array(favouriters[watch] ?? []) }

        /// The first creation of a search counts.
        mutating func createSearch(_ e: SavedSearchCreated) {
            guard audience.searches[e.savedSearchId] == nil else { return }
            audience.searches[e.savedSearchId] = AudienceFacts.Search(
                personId: e.personId, deleted: false, settings: SavedSearchSettings(interval: e.interval, push: e.push))
            if recordsChanges { changedSearches.insert(e.savedSearchId) }
        }

        /// Absent fields keep their value; a search that does not exist or is deleted stays as it is.
        mutating func changeSearch(_ e: SavedSearchChanged) {
            guard var search = audience.searches[e.savedSearchId], !search.deleted else { return }
            if let interval = e.interval { search.settings.interval = interval }
            if let push = e.push { search.settings.push = push }
            guard search != audience.searches[e.savedSearchId] else { return }
            audience.searches[e.savedSearchId] = search
            if recordsChanges { changedSearches.insert(e.savedSearchId) }
        }

        mutating func deleteSearch(_ id: String) {
            guard var search = audience.searches[id], !search.deleted else { return }
            search.deleted = true
            audience.searches[id] = search
            if recordsChanges { changedSearches.insert(id) }
        }

        mutating func setMember(_ isMember: Bool, shop: String, person: String) {
            if isMember {
                audience.members[shop, default: []].insert(person)
            } else {
                audience.members[shop]?.remove(person)
            }
            if recordsChanges { memberChanges[PairKey(of: shop, personId: person)] = isMember }
        }

        mutating func setSwitch(_ e: NotificationPreferenceChanged) {
            audience.switches[e.personId, default: [:]][e.category, default: [:]][e.channel] = e.enabled
            if recordsChanges { switchChanges[SwitchKey(personId: e.personId, category: e.category, channel: e.channel)] = e.enabled }
        }

        mutating func block(_ person: String) {
            if audience.blocked.insert(person).inserted && recordsChanges { newlyBlocked.insert(person) }
        }

        /// Forgets what was changed (the changes were written).
        mutating func settle() {
            changedConversations = []
            favouriteChanges = [:]
            changedSearches = []
            memberChanges = [:]
            switchChanges = [:]
            newlyBlocked = []
        }
    }
}

extension BellProjection {
    /// The reads of the facts a batch needs, one statement per table that has any (`facts(_:from:)`
    /// takes their results in this order): its conversations, watches and saved searches; and when
    /// it sends (`sending`), the people of the shops it names and, for everybody a notification of
    /// the batch can reach (named by an event, the buyer of a conversation, who saved a watch, who
    /// works at a shop), their switches and whether Wristler blocked them.
    func factLoads(_ keys: BellFold.Keys, sending: Bool, context: ProjectionContext) -> [PostgresStatement] {
        var statements = [
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
        guard sending, keys.reachesPeople else { return statements }
        // The shops of the batch: named by its events ($shops), or the seller of one of its conversations.
        func shops(_ shops: Int, conversations: Int) -> String {
            """
            SELECT unnest($\(shops)::text[]) UNION SELECT shop_id FROM \(context.table("bell_conversations"))
                WHERE conversation_id = ANY($\(conversations)::text[]) AND shop_id IS NOT NULL
            """
        }
        let people = """
            SELECT unnest($1::text[])
            UNION SELECT buyer_id FROM \(context.table("bell_conversations")) WHERE conversation_id = ANY($2::text[])
            UNION SELECT person_id FROM \(context.table("bell_favourites")) WHERE watch_id = ANY($3::text[])
            UNION SELECT person_id FROM \(context.table("bell_shop_members")) WHERE shop_id IN (\(shops(4, conversations: 2)))
            """
        let conversations = Array(keys.conversations), shopIds = Array(keys.shops)
        let everybody: [any PostgresEncodable] = [Array(keys.people), conversations, Array(keys.watches), shopIds]
        statements.append(
            PostgresStatement(
                "SELECT shop_id, person_id FROM \(context.table("bell_shop_members")) WHERE shop_id IN (\(shops(2, conversations: 1)))",
                conversations, shopIds))
        statements.append(
            PostgresStatement(
                "SELECT person_id, category, channel, enabled FROM \(context.table("bell_switches")) WHERE person_id IN (\(people))",
                binds: everybody.map { PostgresBind($0) }))
        statements.append(
            PostgresStatement(
                "SELECT person_id FROM \(context.table("bell_blocked_accounts")) WHERE person_id IN (\(people))",
                binds: everybody.map { PostgresBind($0) }))
        return statements
    }

    /// The facts out of `factLoads`' results, taken from the front of `loaded`.
    func facts(_ keys: BellFold.Keys, sending: Bool, from loaded: inout ArraySlice<PostgresRows>) throws -> BellFold.Facts {
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
                try AudienceReader.addSearch(row, to: &facts.audience)
            }
        }
        guard sending, keys.reachesPeople else { return facts }
        for row in loaded.removeFirst() { try AudienceReader.addMember(row, to: &facts.audience) }
        for row in loaded.removeFirst() { try AudienceReader.addSwitch(row, to: &facts.audience) }
        for row in loaded.removeFirst() { try AudienceReader.addBlocked(row, to: &facts.audience) }
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
        statements += Self.pairWrites(facts.favouriteChanges, table: context.table("bell_favourites"), column: "watch_id")
        statements += Self.pairWrites(facts.memberChanges, table: context.table("bell_shop_members"), column: "shop_id")
        let searchIds = Array(facts.changedSearches)
        if !searchIds.isEmpty {
            let searches = searchIds.map { facts.audience.searches[$0]! }
            statements.append(
                PostgresStatement(
                    """
                    INSERT INTO \(context.table("bell_saved_searches")) (saved_search_id, person_id, deleted, interval, push)
                    SELECT * FROM unnest($1::text[], $2::text[], $3::boolean[], $4::text[], $5::boolean[])
                    ON CONFLICT (saved_search_id) DO UPDATE SET deleted = excluded.deleted, interval = excluded.interval, push = excluded.push
                    """, searchIds, searches.map(\.personId), searches.map(\.deleted), searches.map(\.settings.interval.rawValue), searches.map(\.settings.push)))
        }
        if !facts.switchChanges.isEmpty {
            let changes = Array(facts.switchChanges)
            statements.append(
                PostgresStatement(
                    """
                    INSERT INTO \(context.table("bell_switches")) (person_id, category, channel, enabled)
                    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[])
                    ON CONFLICT (person_id, category, channel) DO UPDATE SET enabled = excluded.enabled
                    """, changes.map(\.key.personId), changes.map(\.key.category.rawValue), changes.map(\.key.channel.rawValue), changes.map(\.value)))
        }
        if !facts.newlyBlocked.isEmpty {
            statements.append(
                PostgresStatement(
                    "INSERT INTO \(context.table("bell_blocked_accounts")) (person_id) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING",
                    Array(facts.newlyBlocked)))
        }
        return statements
    }

    /// The deletes and inserts of a pair table (`column` and `person_id`) by the changes to it.
    private static func pairWrites(_ changes: [BellFold.Facts.PairKey: Bool], table: String, column: String) -> [PostgresStatement] {
        let added = changes.filter(\.value).map(\.key)
        let removed = changes.filter { !$0.value }.map(\.key)
        var statements: [PostgresStatement] = []
        if !removed.isEmpty {
            statements.append(
                PostgresStatement(
                    """
                    DELETE FROM \(table) t USING unnest($1::text[], $2::text[]) AS u(o, p)
                    WHERE t.\(column) = u.o AND t.person_id = u.p
                    """, removed.map(\.of), removed.map(\.personId)))
        }
        if !added.isEmpty {
            statements.append(
                PostgresStatement(
                    "INSERT INTO \(table) (\(column), person_id) SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING",
                    added.map(\.of), added.map(\.personId)))
        }
        return statements
    }
}
