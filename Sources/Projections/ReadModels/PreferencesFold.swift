import Foundation
import InboxDomain

/// The pure middle of `PreferencesProjection`: a batch's events and the saved searches they name
/// in, the switches and saved-search rows to write out.
///
/// Per switch, the event latest in the log wins; the rows it writes carry that event's position,
/// and the store takes a row only over an older one. A saved search is changed only by events later
/// than the one that last set it, and not at all once deleted.
struct PreferencesFold {
    struct SwitchKey: Hashable {
        let person: String
        let category: String
        let channel: String
    }

    struct SavedSearchRow {
        var id: String
        var personId: String
        /// Nil when erased (its person's key is gone).
        var name: String?
        var queryJSON: String
        var interval: String
        var push: Bool
        var createdAt: Date
        var updatedAt: Date
        var deleted: Bool
        var position: Int64
    }

    /// The saved searches a batch's events name, to load first.
    typealias Keys = Set<String>

    private(set) var switches: [SwitchKey: (enabled: Bool, position: Int64)] = [:]
    private(set) var searches: [String: SavedSearchRow]
    private(set) var changedSearches: Set<String> = []
    /// The people erased in the batch (`person_erased`): their searches' names go.
    private(set) var erasedPeople: Set<String> = []

    /// The saved-search rows to write.
    var writtenSearches: [SavedSearchRow] { changedSearches.compactMap { searches[$0] } }

    static let rules: FoldRules<Keys, PreferencesFold> = {
        var rules = FoldRules<Keys, PreferencesFold>(ignoring: [
            ConversationStarted.self, MessageSent.self, ConversationRead.self, ConversationArchived.self,
            ConversationUnarchived.self, ConversationMarkedNoReplyNeeded.self, ConversationClosedByBlock.self, ConversationReopened.self,
            OrderPaid.self, OrderShipped.self, OrderDelivered.self, OrderCancelled.self, OrderRefunded.self,
            WatchStatusChanged.self, WatchPriceChanged.self, FavouriteAdded.self, FavouriteRemoved.self,
            SavedSearchMatched.self,
            SignedIn.self, PasswordChanged.self, SecondFactorEnabled.self, SecondFactorDisabled.self, EmailChanged.self, SignedOut.self, SignInLinked.self, SignInUnlinked.self, RecoveryCodesRenewed.self, SignInAttemptsFailed.self, RefreshTokenReused.self,
            AccountBlocked.self, AccountClosed.self,
            NotificationRead.self, AllNotificationsRead.self, NotificationDeleted.self, AllNotificationsDeleted.self,
            LegacyNotificationImported.self,
            ShopMemberAdded.self, ShopMemberRemoved.self, PersonBlocked.self, PersonUnblocked.self, ShopBlocked.self, ShopUnblocked.self,
        ])
        rules.on(NotificationPreferenceChanged.self) { fold, e, event in
            let key = SwitchKey(person: e.personId, category: e.category.rawValue, channel: e.channel.rawValue)
            fold.switches[key] = (e.enabled, event.record.position)
        }
        rules.on(SavedSearchCreated.self, load: { keys, e, _ in keys.insert(e.savedSearchId) }) { try $0.create($1, event: $2) }
        rules.on(SavedSearchChanged.self, load: { keys, e, _ in keys.insert(e.savedSearchId) }) { try $0.change($1, event: $2) }
        rules.on(SavedSearchDeleted.self, load: { keys, e, _ in keys.insert(e.savedSearchId) }) { $0.delete($1, event: $2) }
        rules.on(PersonErased.self) { fold, e, _ in
            fold.erasedPeople.insert(e.personId)
            for (id, search) in fold.searches where search.personId == e.personId && search.name != nil {
                fold.searches[id]?.name = nil
                fold.changedSearches.insert(id)
            }
        }
        return rules
    }()

    /// The saved searches `events` name.
    static func keys(of events: [ProjectedEvent]) -> Keys { rules.keys(of: events, from: []) }

    /// What `events` make of the preferences, given the saved searches they name as stored.
    static func fold(_ events: [ProjectedEvent], searches: [String: SavedSearchRow]) throws -> PreferencesFold {
        try rules.fold(events, from: PreferencesFold(searches: searches))
    }

    private init(searches: [String: SavedSearchRow]) {
        self.searches = searches
    }

    /// The first creation of a search counts; a second one for the same id is ignored.
    private mutating func create(_ e: SavedSearchCreated, event: ProjectedEvent) throws {
        guard searches[e.savedSearchId] == nil else { return }
        let at = event.record.recordedAt
        searches[e.savedSearchId] = SavedSearchRow(
            id: e.savedSearchId, personId: e.personId, name: e.name.text, queryJSON: try Self.json(e.query), interval: e.interval.rawValue,
            push: e.push, createdAt: at, updatedAt: at, deleted: false, position: event.record.position)
        changedSearches.insert(e.savedSearchId)
    }

    /// Absent fields keep their value; a search that does not exist or is deleted stays as it is.
    private mutating func change(_ e: SavedSearchChanged, event: ProjectedEvent) throws {
        let position = event.record.position
        guard var row = searches[e.savedSearchId], position > row.position, !row.deleted else { return }
        if let name = e.name { row.name = name.text }
        if let query = e.query { row.queryJSON = try Self.json(query) }
        if let interval = e.interval { row.interval = interval.rawValue }
        if let push = e.push { row.push = push }
        row.updatedAt = event.record.recordedAt
        row.position = position
        searches[e.savedSearchId] = row
        changedSearches.insert(e.savedSearchId)
    }

    private mutating func delete(_ e: SavedSearchDeleted, event: ProjectedEvent) {
        let position = event.record.position
        guard var row = searches[e.savedSearchId], position > row.position else { return }
        row.deleted = true
        row.updatedAt = event.record.recordedAt
        row.position = position
        searches[e.savedSearchId] = row
        changedSearches.insert(e.savedSearchId)
    }

    static func json(_ value: JSONValue) throws -> String {
        String(decoding: try JSONEncoder().encode(value), as: UTF8.self)
    }
}
