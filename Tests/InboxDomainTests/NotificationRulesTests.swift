import Foundation
import InboxDomain
import Testing

/// `PreferenceRules`: switches, locks, saved searches.
@Suite struct PreferenceRulesTests {
    @Test func everyCategoryIsOnUnlessTurnedOff() {
        for category in NotificationCategory.allCases where category != .savedSearches {
            #expect(PreferenceRules.channels(for: category, stored: { _ in nil }) == [.push, .email], "\(category)")
        }
    }

    @Test func securityAndOrdersPushAreLockedOnAndTheirMailIsNot() {
        for category in [NotificationCategory.security, .orders] {
            #expect(PreferenceRules.isLocked(category, .push))
            #expect(!PreferenceRules.isLocked(category, .email))
            #expect(PreferenceRules.channels(for: category, stored: { _ in false }) == [.push], "\(category)")
        }
        #expect(!PreferenceRules.isLocked(.messages, .push))
        #expect(PreferenceRules.channels(for: .messages, stored: { $0 == .push ? false : nil }) == [.email])
    }

    @Test func savedSearchesAreGovernedPerSearch() {
        #expect(PreferenceRules.isManagedPerSearch(.savedSearches))
        #expect(!PreferenceRules.isSwitchable(.savedSearches, .push))
        let switchOff: (NotificationChannel) -> Bool? = { _ in false }
        #expect(PreferenceRules.channels(for: .savedSearches, stored: switchOff, savedSearch: .init(interval: .daily, push: true)) == [.push, .email])
        #expect(PreferenceRules.channels(for: .savedSearches, stored: switchOff, savedSearch: .init(interval: .never, push: true)) == [.push])
        #expect(PreferenceRules.channels(for: .savedSearches, stored: switchOff, savedSearch: .init(interval: .instant, push: false)) == [.email])
        #expect(PreferenceRules.channels(for: .savedSearches, stored: { _ in nil }, savedSearch: nil) == [], "a deleted search sends nothing")
    }
}

/// `NotificationPlanner`: which event makes which notification for whom (the table in docs/events.md).
@Suite struct NotificationPlannerTests {
    static let conversation = NotificationPlanner.ConversationFacts(buyerId: "buyer", shopId: "shop", watchId: "w1", kind: .watch, isClosed: false)

    static func message(_ side: AuthorSide, offer: Money? = nil) -> InboxDomain.MessageSent {
        InboxDomain.MessageSent(conversationId: "c1", messageId: "m1", authorSide: side, authorId: "x", body: "Hi", offer: offer)
    }

    @Test func aSellersMessageRingsTheBuyersBellAndABuyersIsTheShopsNewsOnly() {
        let toBuyer = NotificationPlanner.notifications(for: Self.message(.seller), facts: .init(conversation: Self.conversation))
        #expect(toBuyer == [
            PlannedNotification(
                audience: .person("buyer"), category: .messages, event: "message_received",
                ids: ["conversationId": "c1", "messageId": "m1", "watchId": "w1"])
        ])
        #expect(toBuyer.allSatisfy { $0.isInBell })
        let toShop = NotificationPlanner.notifications(
            for: Self.message(.buyer, offer: Money(amount: 420_000, currency: "EUR")), facts: .init(conversation: Self.conversation))
        #expect(toShop.count == 1)
        #expect(toShop.first?.audience == .shop("shop"))
        #expect(toShop.first?.category == .shop)
        #expect(toShop.first?.event == "offer_made")
        #expect(toShop.first?.ids["sellerId"] == "shop")
        #expect(toShop.first?.isInBell == false)
    }

    @Test func aClosedOrUnknownThreadMakesNothing() {
        var closed = Self.conversation
        closed.isClosed = true
        #expect(NotificationPlanner.notifications(for: Self.message(.seller), facts: .init(conversation: closed)).isEmpty)
        #expect(NotificationPlanner.notifications(for: Self.message(.seller), facts: .init()).isEmpty)
    }

    @Test func aPaidOrderTellsTheBuyerAndTheShopAndLaterStepsOnlyTheBuyer() {
        let paid = OrderPaid(orderId: "o1", buyerId: "buyer", shopId: "shop", watchId: "w1", amount: Money(amount: 1, currency: "EUR"))
        let planned = NotificationPlanner.notifications(for: paid, facts: .init())
        #expect(planned.map(\.audience) == [.person("buyer"), .shop("shop")])
        #expect(planned.map(\.event) == ["order_paid", "order_paid"])
        let shipped = NotificationPlanner.notifications(
            for: OrderShipped(orderId: "o1", buyerId: "buyer", shopId: "shop", watchId: "w1", conversationId: "c1"), facts: .init())
        #expect(shipped == [
            PlannedNotification(
                audience: .person("buyer"), category: .orders, event: "order_shipped",
                ids: ["orderId": "o1", "watchId": "w1", "conversationId": "c1"])
        ])
    }

    @Test func onlyADropInTheSameCurrencyTellsThoseWhoSavedTheWatch() {
        func change(_ from: Money?, _ to: Money) -> [PlannedNotification] {
            NotificationPlanner.notifications(
                for: WatchPriceChanged(watchId: "w1", shopId: "shop", price: to, previousPrice: from), facts: .init(favouriters: ["b", "a"]))
        }
        let eur = { (amount: Int64) in Money(amount: amount, currency: "EUR") }
        #expect(change(eur(100), eur(90)).map(\.audience) == [.person("a"), .person("b")])
        #expect(change(eur(90), eur(100)).isEmpty)
        #expect(change(nil, eur(90)).isEmpty)
        #expect(change(Money(amount: 100, currency: "CHF"), eur(90)).isEmpty)
        let sold = NotificationPlanner.notifications(
            for: WatchStatusChanged(watchId: "w1", shopId: "shop", status: .sold), facts: .init(favouriters: ["a"]))
        #expect(sold.map(\.event) == ["watch_sold"])
    }

    @Test func aMatchForADeletedSearchMakesNothingAndLegacyEntriesAreNeverSent() {
        let match = SavedSearchMatched(savedSearchId: "s1", personId: "p1", watchIds: ["w1"])
        #expect(NotificationPlanner.notifications(for: match, facts: .init(savedSearchExists: false)).isEmpty)
        #expect(NotificationPlanner.notifications(for: match, facts: .init()).first?.ids == ["savedSearchId": "s1", "watchId": "w1"])
        let legacy = LegacyNotificationImported(
            personId: "p1", notificationId: "n1", category: .messages, event: "offer_received", ids: [:], createdAt: "2024-05-01T10:00:00Z",
            read: false)
        let planned = NotificationPlanner.notifications(for: legacy, facts: .init())
        #expect(planned.count == 1 && planned[0].isInBell && !planned[0].isSent)
        #expect(NotificationPlanner.retiredEvents.contains(planned[0].event))
    }

    @Test func securityEventsAreAboutThePersonAndABlockedAccountMakesNoEntry() {
        #expect(NotificationPlanner.notifications(for: SignedIn(personId: "p1", signInId: "s9", platform: "web"), facts: .init()).first?.event == "new_sign_in")
        #expect(NotificationPlanner.notifications(for: PasswordChanged(personId: "p1"), facts: .init()).first?.category == .security)
        #expect(NotificationPlanner.notifications(for: AccountBlocked(personId: "p1"), facts: .init()).isEmpty)
    }
}

/// Every bell entry the tier can make has its words in every language.
@Suite struct BellTextsTests {
    @Test func everyEventTheTierMakesHasATitleInEveryLanguage() {
        let made: Set<String> = [
            "message_received", "offer_made", "order_paid", "order_shipped", "order_delivered", "order_cancelled", "order_refunded",
            "price_dropped", "watch_sold", "saved_search_matched", "new_sign_in", "password_changed", "second_factor_enabled",
            "second_factor_disabled", "email_changed",
        ]
        #expect(made.union(NotificationPlanner.retiredEvents).isSubset(of: BellTexts.events))
        for event in BellTexts.events {
            let titles = Language.allCases.map { BellTexts.title(event: event, category: "messages", $0) }
            #expect(titles.allSatisfy { !$0.isEmpty }, "\(event)")
            #expect(titles[0] != titles[1], "\(event): Dutch is not English")
        }
        #expect(BellTexts.title(event: "something_new", category: "orders", .nl) == "Bestellingen", "an unknown event falls back on its category")
    }
}
