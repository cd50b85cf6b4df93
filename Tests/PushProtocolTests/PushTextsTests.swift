import InboxDomain
import PushProtocol
import Testing

/// The words of pushes: every sent event in every language, the bell's titles, the phone's locale.
@Suite struct PushTextsTests {
    @Test func aRegistrationsLocalePicksOneOfOurLanguagesAndEnglishOtherwise() {
        let expected: [(String?, Language)] = [
            ("nl", .nl), ("nl-NL", .nl), ("nl_BE", .nl), ("NL-nl", .nl), ("de-CH", .de), ("de", .de), ("fr", .fr), ("fr_CA", .fr),
            ("pt-BR", .en), ("en-GB", .en), (nil, .en), ("", .en), ("n", .en), ("nds", .en), ("nld", .en), ("frr-DE", .en),
            ("de@", .en), ("zh-Hant", .en),
        ]
        for (locale, language) in expected { #expect(Language(locale: locale) == language, "\(locale ?? "nil")") }
    }

    @Test func everySentEventHasATitleAndBodyInEveryLanguageAndTheTitleIsTheBells() {
        let planned = Set(PushTexts.personEvents)
        #expect(planned == BellTexts.events.subtracting(NotificationPlanner.retiredEvents), "the push tables and the bell's sent events differ")
        for event in PushTexts.personEvents {
            let notification = PushNotification(category: .messages, event: event, ids: [:], notificationId: "n")
            for language in Language.allCases {
                let title = PushTexts.title(notification, language)
                let body = PushTexts.body(notification, language)
                #expect(!title.isEmpty && !body.isEmpty, "\(event) \(language)")
                #expect(title == BellTexts.title(event: event, category: "messages", language), "\(event) \(language)")
                #expect(body.utf8.count <= 120, "\(event) \(language) is not short")
            }
        }
    }

    @Test func aShopsNewsSpeaksAboutTheShopNotAboutThePerson() {
        for event in PushTexts.shopEvents {
            let news = PushNotification(category: .shop, event: event, ids: ["sellerId": "s"], notificationId: nil)
            let own = PushNotification(category: .messages, event: event, ids: [:], notificationId: "n")
            for language in Language.allCases {
                #expect(!PushTexts.title(news, language).isEmpty && !PushTexts.body(news, language).isEmpty, "\(event) \(language)")
                #expect(PushTexts.title(news, language) != PushTexts.title(own, language), "\(event) \(language)")
                #expect(PushTexts.body(news, language) != PushTexts.body(own, language), "\(event) \(language)")
            }
        }
        let message = PushNotification(category: .shop, event: "message_received", ids: [:], notificationId: nil)
        #expect(PushTexts.title(message, .en) == "A buyer wrote to your shop")
    }

    @Test func theLanguagesReallyDiffer() {
        for event in PushTexts.personEvents {
            let notification = PushNotification(category: .orders, event: event, ids: [:], notificationId: "n")
            let bodies = Set(Language.allCases.map { PushTexts.body(notification, $0) })
            #expect(bodies.count == Language.allCases.count, "\(event)")
        }
    }

    @Test func anUnknownEventFallsBackOnTheCategorysTitle() {
        for category in NotificationCategory.allCases {
            let notification = PushNotification(category: category, event: "something_new", ids: [:], notificationId: nil)
            for language in Language.allCases {
                #expect(PushTexts.title(notification, language) == PreferenceTexts.title(category, language))
                #expect(PushTexts.title(notification, language) == BellTexts.title(event: "something_new", category: category.rawValue, language))
                #expect(!PushTexts.body(notification, language).isEmpty)
            }
        }
    }
}
