import InboxDomain

/// The words of pushes, in each language: a title and a short body per event, for the person's
/// own notifications and, in words of their own, for a shop's news. The app routes on `data`, never
/// on these.
///
/// - A title is the bell's title for the same event (`BellTexts.title`), so a push and the entry it
///   left in the bell say the same thing; a shop's news has no bell entry and titles of its own.
/// - A body is short and friendly and holds no personal data: the push carries only ids, so the
///   words cannot name a watch, a price or a person.
/// - An event this release has no words for gets the category's title (as the bell does) and a
///   body that only invites to look.
public enum PushTexts {
    /// The events the planner sends about the person themselves.
    public static let personEvents: [String] = [
        "message_received", "offer_made", "order_paid", "order_shipped", "order_delivered", "order_cancelled", "order_refunded",
        "price_dropped", "watch_sold", "saved_search_matched", "new_sign_in", "password_changed", "second_factor_enabled",
        "second_factor_disabled", "email_changed",
    ]

    /// The events of a shop's news (category `shop`).
    public static let shopEvents: [String] = ["message_received", "offer_made", "order_paid", "shop_unanswered"]

    /// A title and body in every language, indexed by `Language.index`.
    struct Words: Sendable {
        var titles: [String]
        var bodies: [String]
    }

    /// The title of `notification` in `language`.
    public static func title(_ notification: PushNotification, _ language: Language) -> String {
        words(notification).titles[language.index]
    }

    /// The body of `notification` in `language`.
    public static func body(_ notification: PushNotification, _ language: Language) -> String {
        words(notification).bodies[language.index]
    }

    static func words(_ notification: PushNotification) -> Words {
        if notification.isShopNews {
            return shopWords[notification.event] ?? fallbackWords[notification.category]!
        }
        return personWords[notification.event] ?? fallbackWords[notification.category]!
    }

    /// Bodies in the order of `Language.allCases`: en, nl, de, fr.
    private static let personBodies: [String: [String]] = [
        "message_received": [
            "You have a new message. Tap to read it.", "Je hebt een nieuw bericht. Tik om het te lezen.",
            "Du hast eine neue Nachricht. Tippe, um sie zu lesen.", "Vous avez un nouveau message. Touchez pour le lire.",
        ],
        "offer_made": [
            "You received an offer. Tap to see it.", "Je hebt een aanbod ontvangen. Tik om het te bekijken.",
            "Du hast ein Angebot erhalten. Tippe, um es anzusehen.", "Vous avez reçu une offre. Touchez pour la voir.",
        ],
        "order_paid": [
            "Your payment was received. Tap to see your order.", "Je betaling is ontvangen. Tik om je bestelling te bekijken.",
            "Deine Zahlung ist eingegangen. Tippe, um deine Bestellung anzusehen.", "Votre paiement a été reçu. Touchez pour voir votre commande.",
        ],
        "order_shipped": [
            "Tap to follow your order.", "Tik om je bestelling te volgen.", "Tippe, um deine Bestellung zu verfolgen.",
            "Touchez pour suivre votre commande.",
        ],
        "order_delivered": [
            "Enjoy your watch! Tap to see your order.", "Veel plezier met je horloge! Tik om je bestelling te bekijken.",
            "Viel Freude mit deiner Uhr! Tippe, um deine Bestellung anzusehen.", "Profitez bien de votre montre ! Touchez pour voir votre commande.",
        ],
        "order_cancelled": [
            "Your order was cancelled. Tap for the details.", "Je bestelling is geannuleerd. Tik voor de details.",
            "Deine Bestellung wurde storniert. Tippe für die Details.", "Votre commande a été annulée. Touchez pour les détails.",
        ],
        "order_refunded": [
            "Your money is on its way back. Tap for the details.", "Je geld is onderweg terug. Tik voor de details.",
            "Dein Geld ist auf dem Weg zurück zu dir. Tippe für die Details.", "Votre remboursement est en cours. Touchez pour les détails.",
        ],
        "price_dropped": [
            "A watch you saved is now cheaper. Tap to see it.", "Een horloge dat je hebt bewaard is nu goedkoper. Tik om het te bekijken.",
            "Eine Uhr, die du dir gemerkt hast, ist jetzt günstiger. Tippe, um sie anzusehen.",
            "Une montre que vous avez enregistrée est moins chère. Touchez pour la voir.",
        ],
        "watch_sold": [
            "A watch you saved has found a new owner.", "Een horloge dat je hebt bewaard heeft een nieuwe eigenaar gevonden.",
            "Eine Uhr, die du dir gemerkt hast, hat einen neuen Besitzer gefunden.",
            "Une montre que vous avez enregistrée a trouvé un nouveau propriétaire.",
        ],
        "saved_search_matched": [
            "New watches match your saved search. Tap to see them.", "Er zijn nieuwe horloges voor je bewaarde zoekopdracht. Tik om ze te bekijken.",
            "Neue Uhren passen zu deiner gespeicherten Suche. Tippe, um sie anzusehen.",
            "De nouvelles montres correspondent à votre recherche enregistrée. Touchez pour les voir.",
        ],
        "new_sign_in": [
            "Someone signed in to your account. If this wasn't you, change your password.",
            "Er is aangemeld op je account. Was jij dit niet? Wijzig dan je wachtwoord.",
            "Jemand hat sich bei deinem Konto angemeldet. Warst du das nicht, ändere dein Passwort.",
            "Une connexion à votre compte a eu lieu. Si ce n'était pas vous, changez votre mot de passe.",
        ],
        "password_changed": [
            "If you didn't change it, contact us right away.", "Heb jij dit niet gedaan? Neem dan meteen contact met ons op.",
            "Warst du das nicht, melde dich sofort bei uns.", "Si ce n'était pas vous, contactez-nous immédiatement.",
        ],
        "second_factor_enabled": [
            "Your account is now better protected.", "Je account is nu beter beveiligd.", "Dein Konto ist jetzt besser geschützt.",
            "Votre compte est désormais mieux protégé.",
        ],
        "second_factor_disabled": [
            "If you didn't turn it off, contact us right away.", "Heb jij dit niet uitgezet? Neem dan meteen contact met ons op.",
            "Warst du das nicht, melde dich sofort bei uns.", "Si ce n'était pas vous, contactez-nous immédiatement.",
        ],
        "email_changed": [
            "If you didn't change it, contact us right away.", "Heb jij dit niet gedaan? Neem dan meteen contact met ons op.",
            "Warst du das nicht, melde dich sofort bei uns.", "Si ce n'était pas vous, contactez-nous immédiatement.",
        ],
    ]

    /// A shop's news: the seller's side of the same events, about the shop rather than the person.
    private static let shopTable: [String: (titles: [String], bodies: [String])] = [
        "message_received": (
            ["A buyer wrote to your shop", "Een koper heeft je winkel een bericht gestuurd", "Ein Käufer hat deinem Shop geschrieben", "Un acheteur a écrit à votre boutique"],
            [
                "Tap to read it and reply.", "Tik om het te lezen en te antwoorden.", "Tippe, um zu lesen und zu antworten.",
                "Touchez pour lire et répondre.",
            ]
        ),
        "offer_made": (
            [
                "A buyer made your shop an offer", "Een koper heeft je winkel een bod gedaan", "Ein Käufer hat deinem Shop ein Angebot gemacht",
                "Un acheteur a fait une offre à votre boutique",
            ],
            [
                "Tap to see it and answer.", "Tik om het te bekijken en te antwoorden.", "Tippe, um es anzusehen und zu antworten.",
                "Touchez pour la voir et répondre.",
            ]
        ),
        "order_paid": (
            [
                "A buyer paid for one of your watches", "Een koper heeft een horloge van je betaald", "Ein Käufer hat eine deiner Uhren bezahlt",
                "Un acheteur a payé une de vos montres",
            ],
            [
                "Tap to see the order and get it ready to ship.", "Tik om de bestelling te bekijken en klaar te maken voor verzending.",
                "Tippe, um die Bestellung anzusehen und den Versand vorzubereiten.",
                "Touchez pour voir la commande et préparer l'envoi.",
            ]
        ),
        "shop_unanswered": (
            [
                "Buyers are waiting for your answer", "Kopers wachten op je antwoord", "Käufer warten auf deine Antwort",
                "Des acheteurs attendent votre réponse",
            ],
            [
                "Tap to see the messages waiting in your shop.", "Tik om de berichten te zien die in je winkel wachten.",
                "Tippe, um die wartenden Nachrichten deines Shops zu sehen.", "Touchez pour voir les messages en attente dans votre boutique.",
            ]
        ),
    ]

    /// The body of an event with no words of its own: an invitation to look, nothing more.
    private static let fallbackBodies = [
        "Tap to see what's new.", "Tik om te zien wat er nieuw is.", "Tippe, um zu sehen, was es Neues gibt.", "Touchez pour voir les nouveautés.",
    ]

    private static let personWords: [String: Words] = {
        var table: [String: Words] = [:]
        for (event, bodies) in personBodies {
            // The category only matters for an event the bell has no title for, and every one
            // here has one; `.messages` is never read.
            let titles = Language.allCases.map { BellTexts.title(event: event, category: NotificationCategory.messages.rawValue, $0) }
            table[event] = Words(titles: titles, bodies: bodies)
        }
        return table
    }()

    private static let shopWords: [String: Words] = shopTable.mapValues { Words(titles: $0.titles, bodies: $0.bodies) }

    private static let fallbackWords: [NotificationCategory: Words] = {
        var table: [NotificationCategory: Words] = [:]
        for category in NotificationCategory.allCases {
            table[category] = Words(titles: Language.allCases.map { PreferenceTexts.title(category, $0) }, bodies: fallbackBodies)
        }
        return table
    }()
}

extension Language {
    /// The position in `allCases`, the index of the push tables' rows.
    var index: Int {
        switch self {
        case .en: 0
        case .nl: 1
        case .de: 2
        case .fr: 3
        }
    }
}
