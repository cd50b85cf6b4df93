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
            PlannedNotification(audience: .person("buyer"), kind: .messageReceived, ids: ["conversationId": "c1", "messageId": "m1", "watchId": "w1"])
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
            PlannedNotification(audience: .person("buyer"), kind: .orderShipped, ids: ["orderId": "o1", "watchId": "w1", "conversationId": "c1"])
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

    @Test func aMatchForADeletedSearchMakesNothingAndLegacyEntriesAreNotPlanned() {
        let match = SavedSearchMatched(savedSearchId: "s1", personId: "p1", watchIds: ["w1"])
        #expect(NotificationPlanner.notifications(for: match, facts: .init(savedSearchExists: false)).isEmpty)
        #expect(NotificationPlanner.notifications(for: match, facts: .init()).first?.ids == ["savedSearchId": "s1", "watchId": "w1"])
        // A legacy entry goes into the bell as it came (`BellFold.importLegacy`): nothing is sent.
        let legacy = LegacyNotificationImported(
            personId: "p1", notificationId: "n1", category: .messages, event: "offer_received", ids: [:], createdAt: "2024-05-01T10:00:00Z",
            read: false)
        #expect(NotificationPlanner.notifications(for: legacy, facts: .init()).isEmpty)
        #expect(NotificationKind(word: "offer_received", audience: .person)?.isSent == false)
    }

    @Test func securityEventsAreAboutThePersonAndABlockedAccountMakesNoEntry() {
        #expect(NotificationPlanner.notifications(for: SignedIn(personId: "p1", signInId: "s9", platform: "web"), facts: .init()).first?.event == "new_sign_in")
        #expect(NotificationPlanner.notifications(for: PasswordChanged(personId: "p1"), facts: .init()).first?.category == .security)
        #expect(NotificationPlanner.notifications(for: AccountBlocked(personId: "p1"), facts: .init()).isEmpty)
    }
}

/// Every bell entry the tier can make has its words in every language.
@Suite struct BellTextsTests {
    @Test func everyKindHasATitleInEveryLanguageAndItsStoredWordReadsBack() {
        for kind in NotificationKind.allCases {
            let titles = Language.allCases.map { BellTexts.title(kind, $0) }
            #expect(titles.allSatisfy { !$0.isEmpty }, "\(kind)")
            #expect(titles[0] != titles[1], "\(kind): Dutch is not English")
            #expect(NotificationKind(word: kind.word, audience: kind.audience) == kind)
            #expect(BellTexts.title(event: kind.word, category: kind.category.rawValue, .de) == titles[2])
        }
        #expect(BellTexts.title(event: "something_new", category: "orders", .nl) == "Bestellingen", "an unknown event falls back on its category")
    }

    @Test func theSeedsWordsAndCategories() {
        let person = NotificationKind.allCases.filter { $0.audience == .person && $0.isSent }.map(\.word)
        #expect(
            Set(person) == [
                "message_received", "offer_made", "order_paid", "order_shipped", "order_delivered", "order_cancelled", "order_refunded",
                "price_dropped", "watch_sold", "saved_search_matched", "new_sign_in", "password_changed", "second_factor_enabled",
                "second_factor_disabled", "email_changed", "signed_out", "sign_in_linked", "sign_in_unlinked", "recovery_codes_renewed",
                // Beyond the seeds (issue 38): an app that does not know them shows their category's words.
                "sign_in_attempts_failed", "refresh_token_reused",
            ])
        let shop = NotificationKind.allCases.filter { $0.audience == .shop }
        #expect(Set(shop.map(\.word)) == ["message_received", "offer_made", "order_paid", "shop_unanswered"])
        #expect(shop.allSatisfy { $0.category == .shop })
    }
}

/// `NotificationDelivery.decide`: how one notification reaches one person, from their facts.
@Suite struct NotificationDeliveryTests {
    @Test func aNotificationIsPushedAndMailedUnlessItsSwitchIsOffOrTheAccountIsBlocked() {
        let on = NotificationDelivery.decide(.priceDropped, ids: ["watchId": "w"], facts: RecipientFacts())
        #expect(on == NotificationDelivery(pushSkipped: nil, mail: .notifications, mailSkipped: nil))
        let off = NotificationDelivery.decide(
            .priceDropped, ids: [:], facts: RecipientFacts(switches: [.savedWatches: [.push: false, .email: false]]))
        #expect(off == NotificationDelivery(pushSkipped: .preferenceOff, mail: .notifications, mailSkipped: .preferenceOff))
        let locked = NotificationDelivery.decide(.newSignIn, ids: [:], facts: RecipientFacts(switches: [.security: [.push: false]]))
        #expect(locked.pushSkipped == nil, "security push is locked on")
        let blocked = NotificationDelivery.decide(.newSignIn, ids: [:], facts: RecipientFacts(isBlocked: true))
        #expect(blocked == NotificationDelivery(pushSkipped: .blocked, mail: .notifications, mailSkipped: .blocked))
        #expect(NotificationDelivery.decide(.shopUnanswered, ids: ["sellerId": "s"], facts: RecipientFacts()).mail == nil, "never mailed")
    }

    @Test func aMatchFollowsItsSearchAndNothingGoesForAGoneOne() {
        let ids = ["savedSearchId": "q"]
        let daily = NotificationDelivery.decide(.savedSearchMatched, ids: ids, facts: RecipientFacts(), savedSearch: .init(interval: .daily, push: false))
        #expect(daily == NotificationDelivery(pushSkipped: .preferenceOff, mail: .search(savedSearchId: "q"), mailSkipped: nil))
        let gone = NotificationDelivery.decide(.savedSearchMatched, ids: ids, facts: RecipientFacts(), savedSearch: nil)
        #expect(gone.pushSkipped == .preferenceOff && gone.mailSkipped == .preferenceOff)
    }

    @Test func theAudiencesFactsDecideForEachPersonOfAShop() {
        var facts = AudienceFacts()
        facts.members["s"] = ["b", "a"]
        facts.switches["b"] = [.shop: [.email: false]]
        #expect(facts.members(of: "s") == ["a", "b"])
        #expect(facts.delivery(.shopOrderPaid, ids: ["sellerId": "s"], for: "a").isMailed)
        #expect(!facts.delivery(.shopOrderPaid, ids: ["sellerId": "s"], for: "b").isMailed)
        facts.searches["q"] = .init(personId: "a", deleted: false, settings: .init(interval: .instant, push: true))
        #expect(facts.delivery(.savedSearchMatched, ids: ["savedSearchId": "q"], for: "a").pushSkipped == nil)
        #expect(facts.delivery(.savedSearchMatched, ids: ["savedSearchId": "q"], for: "b").pushSkipped == .preferenceOff, "not b's search")
    }
}

/// `NotificationDelivery.decide` is `PreferenceRules.channels`, for every kind and every choice.
@Suite struct DeliveryAgreesWithTheRulesTests {
    @Test func everyKindUnderEveryChoiceGivesTheChannelsOfTheRules() {
        let choices: [Bool?] = [nil, true, false]
        let searches: [SavedSearchSettings?] = [nil, .init(interval: .never, push: true), .init(interval: .daily, push: false)]
        for kind in NotificationKind.allCases {
            for push in choices {
                for email in choices {
                    for search in searches {
                        var switches: [NotificationChannel: Bool] = [:]
                        switches[.push] = push
                        switches[.email] = email
                        let delivery = NotificationDelivery.decide(
                            kind, ids: ["savedSearchId": "q", "sellerId": "s"], facts: RecipientFacts(switches: [kind.category: switches]),
                            savedSearch: search)
                        let channels = PreferenceRules.channels(for: kind.category, stored: { switches[$0] }, savedSearch: search)
                        #expect((delivery.pushSkipped == nil) == channels.contains(.push), "\(kind) \(String(describing: push))")
                        if delivery.mail != nil { #expect(delivery.isMailed == channels.contains(.email), "\(kind) \(String(describing: email))") }
                    }
                }
            }
        }
    }
}
