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

    /// The kinds that are sent (every kind but the retired ones, which older bell entries carry).
    static let sent = NotificationKind.allCases.filter(\.isSent)

    @Test func everySentKindHasATitleAndBodyInEveryLanguageAndTheTitleIsTheBells() {
        for kind in Self.sent {
            let notification = PushNotification(kind: kind, ids: [:], notificationId: "n")
            for language in Language.allCases {
                let title = PushTexts.title(notification, language)
                let body = PushTexts.body(notification, language)
                #expect(!title.isEmpty && !body.isEmpty, "\(kind) \(language)")
                #expect(title == BellTexts.title(event: kind.word, category: kind.category.rawValue, language), "\(kind) \(language)")
                #expect(body.utf8.count <= 120, "\(kind) \(language) is not short")
            }
        }
    }

    @Test func aShopsNewsSpeaksAboutTheShopNotAboutThePerson() {
        for news in Self.sent where news.audience == .shop {
            guard let own = NotificationKind(word: news.word, audience: .person) else { continue }
            for language in Language.allCases {
                let shop = PushNotification(kind: news, ids: ["sellerId": "s"], notificationId: "n")
                let person = PushNotification(kind: own, ids: [:], notificationId: "n")
                #expect(PushTexts.title(shop, language) != PushTexts.title(person, language), "\(news) \(language)")
                #expect(PushTexts.body(shop, language) != PushTexts.body(person, language), "\(news) \(language)")
            }
        }
        let message = PushNotification(kind: .shopMessageReceived, ids: [:], notificationId: "n")
        #expect(PushTexts.title(message, .en) == "A buyer wrote to your shop")
    }

    @Test func theLanguagesReallyDiffer() {
        for kind in Self.sent {
            let notification = PushNotification(kind: kind, ids: [:], notificationId: "n")
            let bodies = Set(Language.allCases.map { PushTexts.body(notification, $0) })
            #expect(bodies.count == Language.allCases.count, "\(kind)")
            let titles = Set(Language.allCases.map { PushTexts.title(notification, $0) })
            #expect(titles.count >= Language.allCases.count - 1, "\(kind)")
        }
    }

    @Test func aStoredWordThisReleaseDoesNotKnowFallsBackOnTheCategorysTitle() {
        for category in NotificationCategory.allCases {
            for language in Language.allCases {
                #expect(BellTexts.title(event: "something_new", category: category.rawValue, language) == PreferenceTexts.title(category, language))
            }
        }
        #expect(BellTexts.title(event: "offer_accepted", category: "messages", .nl) == "Bod geaccepteerd", "a retired kind keeps its words")
    }
}
