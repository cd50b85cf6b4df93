import Foundation
import InboxDomain
import NotificationOutbox
@testable import Projections
import Testing

/// The bell fold's rules, without a database: events in, entries, counters and outbox rows out.
@Suite struct BellFoldTests {
    typealias Fold = BellFold
    let watchThread = ConversationStarted(conversationId: "c1", buyerId: "b1", shopId: "s1", watchId: "w1")

    func fold(
        _ events: [ProjectedEvent], facts: Fold.Facts = Fold.Facts(), entries: [String: Fold.Entry] = [:], sending: Bool = true
    ) throws -> Fold {
        try Fold.fold(events, facts: facts, entries: entries, sendsNotifications: sending)
    }

    func fromShop(_ id: String) -> MessageSent {
        MessageSent(conversationId: "c1", messageId: id, authorSide: .seller, authorId: "p9", body: "Yes, it is still for sale")
    }

    /// An entry stored by an earlier batch, made by the event at `position`.
    func stored(_ id: String, of person: String, at position: Int64, read: Bool = false) -> Fold.Entry {
        Fold.Entry(
            id: id, personId: person, category: "messages", event: "message_received", idsJSON: "", createdAt: TestLog.time(of: position),
            readAt: read ? TestLog.time(of: position) : nil, sourcePosition: position, existed: true)
    }

    func entries(_ list: Fold.Entry...) -> [String: Fold.Entry] { Dictionary(uniqueKeysWithValues: list.map { ($0.id, $0) }) }

    @Test func aMessageFromTheShopRingsTheBuyersBellAndIsSent() throws {
        var log = TestLog()
        let fold = try fold(log.record(watchThread, fromShop("m1")))
        let id = BellProjection.notificationId(position: 2, recipient: "b1")
        #expect(fold.created == [id])
        #expect(fold.entries[id]?.personId == "b1")
        #expect(fold.entries[id]?.event == "message_received")
        #expect(fold.outbox.map(\.notificationId) == [id])
        #expect(fold.facts.changedConversations == ["c1"])
    }

    @Test func aMessageInAClosedThreadDoesNotRingTheBell() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(watchThread, ConversationClosedByBlock(conversationId: "c1", blockerId: "b1", blockedId: "p9"), fromShop("m1")))
        #expect(fold.created.isEmpty)
        #expect(fold.outbox.isEmpty)
    }

    @Test func aMessageBeforeTheThreadWasClosedStillRingsTheBell() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(watchThread, fromShop("m1"), ConversationClosedByBlock(conversationId: "c1", blockerId: "b1", blockedId: "p9")))
        #expect(fold.created.count == 1)
    }

    @Test func aBuyersMessageGoesToTheShopAndIntoNoBell() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(watchThread, MessageSent(conversationId: "c1", messageId: "m1", authorSide: .buyer, authorId: "b1", body: "Hi")))
        #expect(fold.created.isEmpty)
        #expect(fold.outbox.map(\.kind) == [.shopMessageReceived])
        #expect(fold.outbox.first?.addressee == "s1")
        #expect(fold.outbox.first?.recipients == [.nobody(.shopMessageReceived, ids: ["sellerId": "s1"])], "nobody works at s1: counted, sent to nobody")
    }

    // MARK: Decided as of the event's place in the log

    let paid = OrderPaid(orderId: "o1", buyerId: "b1", shopId: "s1", watchId: "w1", amount: Money(amount: 100, currency: "EUR"))

    /// The outbox rows of the shop's news (kind `shopOrderPaid`), by person.
    func shopNews(_ fold: Fold) -> [String: NotificationDelivery] {
        Dictionary(fold.outbox.filter { $0.kind == .shopOrderPaid }.flatMap { $0.recipients.map { ($0.personId, $0.delivery) } }) { first, _ in first }
    }

    @Test func aMemberAddedBeforeAPaidOrderInTheSameBatchHearsOfItAndOneAddedAfterDoesNot() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(
                ShopMemberAdded(shopId: "s1", personId: "early"), paid, ShopMemberAdded(shopId: "s1", personId: "late")))
        let news = shopNews(fold)
        #expect(Set(news.keys) == ["early"])
        #expect(news["early"]?.pushSkipped == nil && news["early"]?.isMailed == true)
        #expect(news["early"]?.mail == .sold)
        #expect(fold.facts.memberChanges.count == 2)
    }

    @Test func aMemberRemovedBeforeAPaidOrderDoesNotHearOfItWhateverTheTablesSayLater() throws {
        var log = TestLog(after: 10)
        var facts = Fold.Facts()
        facts.audience.members["s1"] = ["stays", "leaves"]
        let fold = try fold(log.record(ShopMemberRemoved(shopId: "s1", personId: "leaves"), paid), facts: facts)
        #expect(Set(shopNews(fold).keys) == ["stays"])
    }

    @Test func eachPersonsSwitchesAsTheyStoodAtTheEventDecideThePushAndTheMail() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(
                ShopMemberAdded(shopId: "s1", personId: "quiet"), ShopMemberAdded(shopId: "s1", personId: "loud"),
                NotificationPreferenceChanged(personId: "quiet", category: .shop, channel: .push, enabled: false),
                NotificationPreferenceChanged(personId: "quiet", category: .shop, channel: .email, enabled: false),
                NotificationPreferenceChanged(personId: "b1", category: .orders, channel: .push, enabled: false),
                NotificationPreferenceChanged(personId: "b1", category: .orders, channel: .email, enabled: false),
                paid,
                NotificationPreferenceChanged(personId: "loud", category: .shop, channel: .push, enabled: false)))
        let news = shopNews(fold)
        #expect(news["quiet"] == NotificationDelivery(pushSkipped: .preferenceOff, mail: .sold, mailSkipped: .preferenceOff))
        #expect(news["loud"] == NotificationDelivery(pushSkipped: nil, mail: .sold, mailSkipped: nil), "turned off after the order")
        let own = fold.outbox.first { $0.kind == .orderPaid }
        #expect(own?.addressee == "b1" && own?.recipients.map(\.personId) == ["b1"])
        #expect(
            own?.recipients.first?.delivery == NotificationDelivery(pushSkipped: nil, mail: .notifications, mailSkipped: .preferenceOff),
            "orders push is locked on")
    }

    @Test func anAccountWristlerBlockedGetsNeitherPushNorMailButKeepsItsBell() throws {
        var log = TestLog()
        let fold = try fold(log.record(PasswordChanged(personId: "b1"), AccountBlocked(personId: "b1", reason: "fraud"), PasswordChanged(personId: "b1")))
        #expect(fold.created.count == 2)
        #expect(fold.outbox.map { $0.recipients[0].delivery.pushSkipped } == [nil, .blocked])
        #expect(fold.outbox.map { $0.recipients[0].delivery.mailSkipped } == [nil, .blocked])
    }

    @Test func aMatchFollowsItsSearchsPushAndIntervalAsTheyStoodAtTheMatch() throws {
        var log = TestLog()
        let match = SavedSearchMatched(savedSearchId: "q1", personId: "b1", watchIds: ["w1"])
        let fold = try fold(
            log.record(
                SavedSearchCreated(savedSearchId: "q1", personId: "b1", name: "GMT", query: .object([:]), interval: .never, push: true), match,
                SavedSearchChanged(savedSearchId: "q1", personId: "b1", interval: .daily, push: false), match))
        #expect(
            fold.outbox.map { $0.recipients[0].delivery } == [
                NotificationDelivery(pushSkipped: nil, mail: .search(savedSearchId: "q1"), mailSkipped: .preferenceOff),
                NotificationDelivery(pushSkipped: .preferenceOff, mail: .search(savedSearchId: "q1"), mailSkipped: nil),
            ])
    }

    @Test func theDecisionIsTheSameHoweverTheLogIsCutIntoBatches() throws {
        var log = TestLog()
        let events = log.record(
            ShopMemberAdded(shopId: "s1", personId: "m1"), NotificationPreferenceChanged(personId: "m1", category: .shop, channel: .email, enabled: false),
            paid, ShopMemberRemoved(shopId: "s1", personId: "m1"), ShopMemberAdded(shopId: "s1", personId: "m2"), paid)
        let whole = try fold(events).outbox
        var rows = Fold(facts: Fold.Facts(), entries: [:], sendsNotifications: true)
        var oneByOne: [OutboxNotification] = []
        for event in events {
            try rows.apply([event])
            oneByOne += rows.outbox
            rows.settle(rows.writes)
        }
        #expect(whole == oneByOne)
        #expect(whole.filter { $0.kind == .shopOrderPaid }.map { $0.recipients.map(\.personId) } == [["m1"], ["m2"]])
    }

    @Test func aReplayMakesTheEntriesButSendsNothing() throws {
        var log = TestLog()
        let fold = try fold(log.record(watchThread, fromShop("m1")), sending: false)
        #expect(fold.created.count == 1)
        #expect(fold.outbox.isEmpty)
    }

    @Test func allReadCoversOnlyEntriesMadeEarlierInTheLog() throws {
        var log = TestLog()
        let events = log.record(watchThread, fromShop("m1"), AllNotificationsRead(personId: "b1"), fromShop("m2"))
        let fold = try fold(events)
        let before = BellProjection.notificationId(position: 2, recipient: "b1")
        let after = BellProjection.notificationId(position: 4, recipient: "b1")
        #expect(fold.entries[before]?.readAt == TestLog.time(of: 3))
        #expect(fold.entries[after]?.readAt == nil)
        #expect(fold.writes.counters["b1"] == Fold.Counter(), "new entries are counted by what the table takes")
    }

    @Test func allReadCoversStoredEntriesByPositionNotByBatch() throws {
        var log = TestLog(after: 10)
        let earlier = stored("e1", of: "b1", at: 5)
        let fold = try fold(log.record(AllNotificationsRead(personId: "b1")), entries: entries(earlier))
        #expect(fold.entries["e1"]?.readAt == TestLog.time(of: 11))
        #expect(fold.writes.reads.map(\.id) == ["e1"])
        #expect(fold.writes.counters["b1"] == Fold.Counter(unread: -1, total: 0))
    }

    @Test func allDeletedRemovesOnlyEntriesMadeEarlierInTheLog() throws {
        var log = TestLog()
        let events = log.record(watchThread, fromShop("m1"), AllNotificationsDeleted(personId: "b1"), fromShop("m2"))
        let fold = try fold(events)
        #expect(fold.writes.inserts.map(\.sourcePosition) == [4])
    }

    @Test func readingAnEntryMovesTheUnreadCounterOnceAndDeletingItMovesBoth() throws {
        var log = TestLog(after: 10)
        let fold = try fold(
            log.record(
                NotificationRead(personId: "b1", notificationId: "e1"), NotificationRead(personId: "b1", notificationId: "e1"),
                NotificationDeleted(personId: "b1", notificationId: "e2")),
            entries: entries(stored("e1", of: "b1", at: 1), stored("e2", of: "b1", at: 2)))
        #expect(fold.writes.counters["b1"] == Fold.Counter(unread: -2, total: -1))
        #expect(fold.writes.deletes.map(\.id) == ["e2"])
    }

    /// A replay keeps every entry in one fold and folds batch after batch into it in place
    /// (`apply`, then `settle` once the batch's writes are taken): each batch's writes are what
    /// the batch did to the entries before it, as if they had been loaded from the table.
    @Test func foldingInPlaceBatchAfterBatchWritesWhatEachBatchDid() throws {
        var log = TestLog()
        var rows = Fold(facts: Fold.Facts(), entries: [:], sendsNotifications: false)
        let first = log.record(watchThread, fromShop("m1"), fromShop("m2"))
        let (e2, e3) = (BellProjection.notificationId(position: 2, recipient: "b1"), BellProjection.notificationId(position: 3, recipient: "b1"))
        try rows.apply(first)
        #expect(rows.writes.inserts.map(\.id) == [e2, e3])
        rows.settle(rows.writes)
        #expect(rows.entries[e2]?.existed == true)

        // Read one, delete the other, and make an entry that the same batch deletes.
        let second = log.record(
            NotificationRead(personId: "b1", notificationId: e2), fromShop("m3"), NotificationDeleted(personId: "b1", notificationId: e3))
        let e5 = BellProjection.notificationId(position: 5, recipient: "b1")
        let deleteNew = log.record(NotificationDeleted(personId: "b1", notificationId: e5))
        try rows.apply(second + [deleteNew])
        let writes = rows.writes
        #expect(writes.inserts.isEmpty, "made and deleted in one batch: never written")
        #expect(writes.reads.map(\.id) == [e2])
        #expect(writes.deletes.map(\.id) == [e3])
        #expect(writes.counters["b1"] == Fold.Counter(unread: -2, total: -1))
        #expect(rows.facts.changedConversations.isEmpty)
        rows.settle(writes)
        #expect(Set(rows.entries.keys) == [e2])
        #expect(rows.byPerson["b1"] == [e2])
        #expect(rows.entries[e2]?.readChanged == false)

        // A later batch sees only what is stored: the read entry, deleted now, moves the total only.
        try rows.apply(log.record(AllNotificationsDeleted(personId: "b1")))
        #expect(rows.writes.deletes.map(\.id) == [e2])
        #expect(rows.writes.counters["b1"] == Fold.Counter(unread: 0, total: -1))
        #expect(rows.writes.reads.isEmpty && rows.writes.inserts.isEmpty)
    }

    @Test func deletingAReadEntryLeavesTheUnreadCounter() throws {
        var log = TestLog(after: 10)
        let fold = try fold(
            log.record(NotificationDeleted(personId: "b1", notificationId: "e1")), entries: entries(stored("e1", of: "b1", at: 1, read: true)))
        #expect(fold.writes.counters["b1"] == Fold.Counter(unread: 0, total: -1))
    }

    @Test func aReadOrDeleteOfSomebodyElsesEntryOrOfNoEntryChangesNothing() throws {
        var log = TestLog(after: 10)
        let fold = try fold(
            log.record(
                NotificationRead(personId: "intruder", notificationId: "e1"), NotificationDeleted(personId: "intruder", notificationId: "e1"),
                NotificationRead(personId: "b1", notificationId: "no-such-entry")),
            entries: entries(stored("e1", of: "b1", at: 1)))
        #expect(fold.entries["e1"]?.readAt == nil)
        #expect(fold.entries["e1"]?.deleted == false)
        #expect(fold.writes.counters.isEmpty)
    }

    @Test func aPriceDropReachesWhoSavedTheWatchBeforeItAndNobodyWhoSavedItAfter() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(
                FavouriteAdded(personId: "early", watchId: "w1"),
                WatchPriceChanged(
                    watchId: "w1", shopId: "s1", price: Money(amount: 90, currency: "EUR"), previousPrice: Money(amount: 100, currency: "EUR")),
                FavouriteAdded(personId: "late", watchId: "w1")))
        #expect(fold.created.compactMap { fold.entries[$0]?.personId } == ["early"])
        #expect(fold.facts.favouriteChanges.count == 2)
    }

    @Test func aMatchOfADeletedOrUnknownSearchNotifiesNobody() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(
                SavedSearchCreated(savedSearchId: "q1", personId: "b1", name: "Speedmaster", query: .object([:]), interval: .daily, push: true),
                SavedSearchMatched(savedSearchId: "q1", personId: "b1", watchIds: ["w1"]),
                SavedSearchDeleted(savedSearchId: "q1", personId: "b1"),
                SavedSearchMatched(savedSearchId: "q1", personId: "b1", watchIds: ["w2"]),
                SavedSearchMatched(savedSearchId: "q-unknown", personId: "b1", watchIds: ["w3"])))
        #expect(fold.created.count == 1, "only the match while the search existed")
    }

    @Test func aLegacyImportKeepsItsIdIsNeverSentAndASecondImportChangesNothing() throws {
        var log = TestLog()
        let legacy = LegacyNotificationImported(
            personId: "b1", notificationId: "legacy-1", category: .messages, event: "offer_accepted", ids: [:],
            createdAt: "2024-05-01T10:00:00Z", read: true)
        let first = try fold(log.record(legacy))
        #expect(first.created == ["legacy-1"])
        #expect(first.entries["legacy-1"]?.readAt != nil)
        #expect(first.outbox.isEmpty)
        let again = try fold(log.record(legacy), entries: entries(stored("legacy-1", of: "b1", at: 1, read: true)))
        #expect(again.created.isEmpty)
        #expect(again.writes.counters.isEmpty)
    }

    @Test func everybodyWhoGotAnEntryHasACounterEvenIfTheBatchDeletedIt() throws {
        var log = TestLog()
        let fold = try fold(log.record(PasswordChanged(personId: "b1"), AllNotificationsDeleted(personId: "b1")))
        #expect(fold.writes.inserts.isEmpty)
        #expect(fold.writes.counters["b1"] == Fold.Counter())
    }
}
