import Foundation
import InboxDomain
import NotificationOutbox

/// The pure middle of `BellProjection`: a batch's events, the bell's facts and the entries they
/// touch in; the entries, facts and outbox rows to write out (no connection, no clock).
///
/// Each event sees the facts as they stood at its place in the log: the notifications it makes are
/// planned (`NotificationPlanner`) before the facts take it in. "All read" and "all deleted" cover
/// the person's entries made by events earlier in the log (by position), whatever the batch.
struct BellFold {
    struct Entry {
        var id: String
        var personId: String
        var category: String
        var event: String
        var idsJSON: String
        var createdAt: Date
        var readAt: Date?
        var sourcePosition: Int64
        var existed: Bool
        var readChanged = false
        var deleted = false
    }

    struct Counter: Equatable {
        var unread: Int32 = 0
        var total: Int32 = 0
    }

    /// What a batch needs loaded: the facts of its conversations, watches and saved searches, the
    /// entries its marks and imports name, and per person the entries its last "all read" and
    /// "all deleted" cover (those made before that position); and for deciding its notifications,
    /// the people its events name and the shops whose news they are (`BellProjection.factLoads`).
    struct Keys {
        var conversations: Set<String> = []
        var watches: Set<String> = []
        var searches: Set<String> = []
        var entries: Set<String> = []
        var readAllUpTo: [String: Int64] = [:]
        var deleteAllUpTo: [String: Int64] = [:]
        var people: Set<String> = []
        var shops: Set<String> = []

        /// Whether a notification of the batch can reach anybody: then the facts of its people are read.
        var reachesPeople: Bool { !people.isEmpty || !conversations.isEmpty || !watches.isEmpty || !shops.isEmpty }
    }

    private(set) var facts: Facts
    private(set) var entries: [String: Entry]
    private(set) var byPerson: [String: [String]] = [:]
    /// The entries this batch made, in order.
    private(set) var created: [String] = []
    /// The notifications to send, one per person, decided (none when `sendsNotifications` is off: a replay).
    private(set) var outbox: [OutboxNotification] = []
    /// The entries that were there before this batch and that it read or deleted, in order.
    private var changedBefore: [String] = []
    let sendsNotifications: Bool

    init(facts: Facts, entries: [String: Entry], sendsNotifications: Bool) {
        self.facts = facts
        self.entries = entries
        self.sendsNotifications = sendsNotifications
        for (id, entry) in entries { byPerson[entry.personId, default: []].append(id) }
    }

    /// What `events` need loaded.
    static func keys(of events: [ProjectedEvent]) -> Keys { rules.keys(of: events, from: Keys()) }

    /// Folds `events` into the entries and facts held, which are all there are (a replay's fold
    /// keeps them in memory between batches, rather than loading what each batch touches): what
    /// `fold` does, in place. `writes` and `outbox` are then this batch's; `settle` makes the
    /// entries what the table holds after them, for the next batch. The rules throw nothing.
    mutating func apply(_ events: [ProjectedEvent]) throws {
        created.removeAll(keepingCapacity: true)
        outbox.removeAll(keepingCapacity: true)
        changedBefore.removeAll(keepingCapacity: true)
        try Self.rules.apply(events, to: &self)
    }

    /// The entries and facts as the tables hold them once `writes` (this batch's) are written:
    /// deleted entries gone, the batch's new ones there, read marks stored, nothing changed yet.
    mutating func settle(_ writes: Writes) {
        for entry in writes.deletes { remove(entry.id, of: entry.personId) }
        for id in created {
            guard var entry = entries[id] else { continue }
            if entry.deleted {
                // Made and deleted in one batch: never in the table.
                remove(id, of: entry.personId)
                continue
            }
            entry.existed = true
            entry.readChanged = false
            entries[id] = entry
        }
        for entry in writes.reads { entries[entry.id]?.readChanged = false }
        facts.settle()
    }

    private mutating func remove(_ id: String, of person: String) {
        entries[id] = nil
        byPerson[person]?.removeAll { $0 == id }
    }

    /// What `events` make of the bell, given the facts and entries they touch as stored.
    static func fold(_ events: [ProjectedEvent], facts: Facts, entries: [String: Entry], sendsNotifications: Bool) throws -> BellFold {
        var fold = BellFold(facts: facts, entries: entries, sendsNotifications: sendsNotifications)
        // Room for what most batches make (an entry an event at most, but for a watch's many
        // favouriters), so that the table is not grown again and again while they are made.
        fold.entries.reserveCapacity(entries.count + events.count)
        return try rules.fold(events, from: fold)
    }

    /// Makes the entries and outbox rows of what `event` notifies, planned with `facts`: a bell
    /// entry for each notification about a person, and (live) its outbox row, decided for each
    /// person it is for from the facts as they stand at this event's place in the log.
    mutating func notify(_ event: ProjectedEvent, _ planner: NotificationPlanner.Facts = NotificationPlanner.Facts()) {
        let position = event.record.position
        let at = event.record.recordedAt
        for notification in NotificationPlanner.notifications(for: event.payload, facts: planner) {
            let idsJSON = OutboxNotification.json(notification.ids)
            let kind = notification.kind
            switch notification.audience {
            case .person(let person):
                let id = BellProjection.notificationId(position: position, recipient: person)
                addEntry(
                    Entry(
                        id: id, personId: person, category: kind.category.rawValue, event: kind.word, idsJSON: idsJSON, createdAt: at, readAt: nil,
                        sourcePosition: position, existed: false))
                guard sendsNotifications else { continue }
                outbox.append(
                    OutboxNotification(
                        notificationId: id, kind: kind, addressee: person, idsJSON: idsJSON, sourcePosition: position, happenedAt: at,
                        recipients: [.init(personId: person, delivery: facts.audience.delivery(kind, ids: notification.ids, for: person))]))
            case .shop(let shop):
                // A shop's news is only sent, never in a bell: nothing to make in a replay.
                guard sendsNotifications else { continue }
                let people = facts.audience.members(of: shop)
                outbox.append(
                    OutboxNotification(
                        notificationId: BellProjection.notificationId(position: position, recipient: "shop:\(shop)"), kind: kind, addressee: shop,
                        idsJSON: idsJSON, sourcePosition: position, happenedAt: at,
                        recipients: people.isEmpty
                            ? [.nobody(kind, ids: notification.ids)]
                            : people.map { .init(personId: $0, delivery: facts.audience.delivery(kind, ids: notification.ids, for: $0)) }))
            }
        }
    }

    /// An entry carried over from the previous system: in the bell with its own id, words and
    /// read state, never sent. Made unless it exists (an import sent twice).
    mutating func importLegacy(_ legacy: LegacyNotificationImported, _ event: ProjectedEvent) {
        let createdAt = legacy.createdDate ?? event.record.recordedAt
        addEntry(
            Entry(
                id: legacy.notificationId, personId: legacy.personId, category: legacy.category.rawValue, event: legacy.event,
                idsJSON: OutboxNotification.json(legacy.ids), createdAt: createdAt, readAt: legacy.read ? createdAt : nil,
                sourcePosition: event.record.position, existed: false))
    }

    /// Adds `entry` unless an entry with its id is there.
    private mutating func addEntry(_ entry: Entry) {
        if entries[entry.id] != nil { return }
        entries[entry.id] = entry
        byPerson[entry.personId, default: []].append(entry.id)
        created.append(entry.id)
    }

    /// Marks the person's entry read, if it is theirs, there and unread.
    mutating func read(_ id: String, of person: String, at: Date) {
        guard var entry = entries[id], entry.personId == person, !entry.deleted, entry.readAt == nil else { return }
        if entry.existed { changedBefore.append(id) }
        entry.readAt = at
        entry.readChanged = true
        entries[id] = entry
    }

    /// Removes the person's entry, read or not, if it is theirs.
    mutating func delete(_ id: String, of person: String) {
        guard var entry = entries[id], entry.personId == person else { return }
        if entry.existed && !entry.deleted && !entry.readChanged { changedBefore.append(id) }
        entry.deleted = true
        entries[id] = entry
    }

    /// Marks read every entry of the person made by an event before `event`.
    mutating func readAll(of person: String, _ event: ProjectedEvent) {
        for id in byPerson[person] ?? [] {
            guard let entry = entries[id], entry.sourcePosition < event.record.position else { continue }
            read(id, of: person, at: event.record.recordedAt)
        }
    }

    /// Removes every entry of the person made by an event before `event`.
    mutating func deleteAll(of person: String, _ event: ProjectedEvent) {
        for id in byPerson[person] ?? [] {
            guard let entry = entries[id], entry.sourcePosition < event.record.position else { continue }
            delete(id, of: person)
        }
    }
}

extension BellFold {
    /// The entry rows to insert, mark read and delete, and how the counters move by the reads and
    /// deletes. Inserts are counted by what the table takes (`BellProjection.store`).
    struct Writes {
        var inserts: [Entry] = []
        var reads: [Entry] = []
        var deletes: [Entry] = []
        /// Per person, how the counters move; everybody who got an entry has one, whatever the batch
        /// nets out to, so the counter rows do not depend on where the log is cut into batches.
        var counters: [String: Counter] = [:]
    }

    var writes: Writes {
        var writes = Writes()
        for id in created {
            guard let entry = entries[id] else { continue }
            if writes.counters[entry.personId] == nil { writes.counters[entry.personId] = Counter() }
            if !entry.deleted { writes.inserts.append(entry) }
        }
        for id in changedBefore {
            guard let entry = entries[id] else { continue }
            if entry.deleted {
                writes.deletes.append(entry)
                writes.counters[entry.personId, default: Counter()].total -= 1
                // An entry read in this batch was counted unread before it.
                if entry.readAt == nil || entry.readChanged { writes.counters[entry.personId, default: Counter()].unread -= 1 }
            } else if entry.readChanged {
                writes.reads.append(entry)
                writes.counters[entry.personId, default: Counter()].unread -= 1
            }
        }
        return writes
    }
}

extension BellFold {
    typealias Rules = FoldRules<Keys, BellFold>

    static let rules: Rules = {
        // A block between two people closes their conversations (`conversation_closed_by_block`),
        // which is the fact a message's notification reads.
        var rules = Rules(ignoring: [
            ConversationRead.self, ConversationArchived.self, ConversationUnarchived.self, ConversationMarkedNoReplyNeeded.self,
            PersonBlocked.self, PersonUnblocked.self, ShopBlocked.self, ShopUnblocked.self, AccountClosed.self,
            // The bell holds no personal text (ids and the catalogue's titles).
            PersonErased.self,
        ])
        addConversationAndWatchRules(to: &rules)
        addSavedSearchRules(to: &rules)
        addAudienceRules(to: &rules)
        addBellOperationRules(to: &rules)
        return rules
    }()

    /// Orders, security events, conversations and watches: notifications, and the facts they need.
    private static func addConversationAndWatchRules(to rules: inout Rules) {
        // Notifications about the person an event names.
        func notifies<E: CatalogueEvent>(_ type: E.Type, person: @escaping @Sendable (E) -> String) {
            rules.on(type, load: { keys, e, _ in keys.people.insert(person(e)) }) { fold, _, event in fold.notify(event) }
        }
        notifies(SignedIn.self) { $0.personId }
        notifies(PasswordChanged.self) { $0.personId }
        notifies(SecondFactorEnabled.self) { $0.personId }
        notifies(SecondFactorDisabled.self) { $0.personId }
        notifies(EmailChanged.self) { $0.personId }
        notifies(SignedOut.self) { $0.personId }
        notifies(SignInLinked.self) { $0.personId }
        notifies(SignInUnlinked.self) { $0.personId }
        notifies(RecoveryCodesRenewed.self) { $0.personId }
        notifies(SignInAttemptsFailed.self) { $0.personId }
        notifies(RefreshTokenReused.self) { $0.personId }
        notifies(OrderShipped.self) { $0.buyerId }
        notifies(OrderDelivered.self) { $0.buyerId }
        notifies(OrderCancelled.self) { $0.buyerId }
        notifies(OrderRefunded.self) { $0.buyerId }
        // A paid order is the buyer's, and the shop's news.
        rules.on(
            OrderPaid.self,
            load: { keys, e, _ in
                keys.people.insert(e.buyerId)
                keys.shops.insert(e.shopId)
            }
        ) { fold, _, event in fold.notify(event) }
        // Conversations: the buyer and shop of a message's thread, and whether it was closed before it.
        rules.on(
            ConversationStarted.self,
            load: { keys, e, _ in
                keys.conversations.insert(e.conversationId)
                keys.people.insert(e.buyerId)
                if let shop = e.shopId { keys.shops.insert(shop) }
            }
        ) { fold, e, _ in fold.facts.start(e) }
        rules.on(ConversationClosedByBlock.self, load: { keys, e, _ in keys.conversations.insert(e.conversationId) }) { fold, e, _ in
            fold.facts.close(e.conversationId)
        }
        rules.on(ConversationReopened.self, load: { keys, e, _ in keys.conversations.insert(e.conversationId) }) { fold, e, _ in
            fold.facts.reopen(e.conversationId)
        }
        rules.on(MessageSent.self, load: { keys, e, _ in keys.conversations.insert(e.conversationId) }) { fold, e, event in
            fold.notify(event, NotificationPlanner.Facts(conversation: fold.facts.conversations[e.conversationId]))
        }
        // Watches: who has one as a favourite when its price drops or it is sold.
        rules.on(
            FavouriteAdded.self,
            load: { keys, e, _ in
                keys.watches.insert(e.watchId)
                keys.people.insert(e.personId)
            }
        ) { fold, e, _ in fold.facts.setFavourite(true, watch: e.watchId, person: e.personId) }
        rules.on(FavouriteRemoved.self, load: { keys, e, _ in keys.watches.insert(e.watchId) }) { fold, e, _ in
            fold.facts.setFavourite(false, watch: e.watchId, person: e.personId)
        }
        rules.on(WatchPriceChanged.self, load: { keys, e, _ in keys.watches.insert(e.watchId) }) { fold, e, event in
            fold.notify(event, NotificationPlanner.Facts(favouriters: fold.facts.favouriters(of: e.watchId)))
        }
        rules.on(WatchStatusChanged.self, load: { keys, e, _ in keys.watches.insert(e.watchId) }) { fold, e, event in
            fold.notify(event, NotificationPlanner.Facts(favouriters: fold.facts.favouriters(of: e.watchId)))
        }
    }

    /// A match notifies only while its search exists, and reaches the person by its `interval` and `push`.
    private static func addSavedSearchRules(to rules: inout Rules) {
        rules.on(SavedSearchCreated.self, load: { keys, e, _ in keys.searches.insert(e.savedSearchId) }) { fold, e, _ in
            fold.facts.createSearch(e)
        }
        rules.on(SavedSearchChanged.self, load: { keys, e, _ in keys.searches.insert(e.savedSearchId) }) { fold, e, _ in
            fold.facts.changeSearch(e)
        }
        rules.on(SavedSearchDeleted.self, load: { keys, e, _ in keys.searches.insert(e.savedSearchId) }) { fold, e, _ in
            fold.facts.deleteSearch(e.savedSearchId)
        }
        rules.on(
            SavedSearchMatched.self,
            load: { keys, e, _ in
                keys.searches.insert(e.savedSearchId)
                keys.people.insert(e.personId)
            }
        ) { fold, e, event in
            fold.notify(event, NotificationPlanner.Facts(savedSearchExists: fold.facts.audience.searchExists(e.savedSearchId, of: e.personId)))
        }
    }

    /// What a notification's delivery reads about its people: who works at which shop, their
    /// switches, and the accounts Wristler blocked.
    private static func addAudienceRules(to rules: inout Rules) {
        rules.on(ShopMemberAdded.self, load: { keys, e, _ in keys.people.insert(e.personId) }) { fold, e, _ in
            fold.facts.setMember(true, shop: e.shopId, person: e.personId)
        }
        rules.on(ShopMemberRemoved.self) { fold, e, _ in fold.facts.setMember(false, shop: e.shopId, person: e.personId) }
        rules.on(NotificationPreferenceChanged.self, load: { keys, e, _ in keys.people.insert(e.personId) }) { fold, e, _ in
            fold.facts.setSwitch(e)
        }
        rules.on(AccountBlocked.self) { fold, e, _ in fold.facts.block(e.personId) }
    }

    /// The bell's own operations, and imports that keep their ids.
    private static func addBellOperationRules(to rules: inout Rules) {
        rules.on(LegacyNotificationImported.self, load: { keys, e, _ in keys.entries.insert(e.notificationId) }) { fold, e, event in
            fold.importLegacy(e, event)
        }
        rules.on(NotificationRead.self, load: { keys, e, _ in keys.entries.insert(e.notificationId) }) { fold, e, event in
            fold.read(e.notificationId, of: e.personId, at: event.record.recordedAt)
        }
        rules.on(NotificationDeleted.self, load: { keys, e, _ in keys.entries.insert(e.notificationId) }) { fold, e, _ in
            fold.delete(e.notificationId, of: e.personId)
        }
        rules.on(AllNotificationsRead.self, load: { keys, e, event in keys.readAllUpTo[e.personId] = event.record.position }) {
            fold, e, event in fold.readAll(of: e.personId, event)
        }
        rules.on(AllNotificationsDeleted.self, load: { keys, e, event in keys.deleteAllUpTo[e.personId] = event.record.position }) {
            fold, e, event in fold.deleteAll(of: e.personId, event)
        }
    }
}
