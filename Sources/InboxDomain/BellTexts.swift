/// The titles of notifications, in each language: a bell entry's, its push's and its line in a
/// mail. The app routes on `type`, `event` and the ids, never on these.
public enum BellTexts {
    /// The title of a notification of `kind` in `language`.
    public static func title(_ kind: NotificationKind, _ language: Language) -> String {
        table[kind]![language.index]
    }

    /// `titles` of every kind, made once: a push looks its title up per device.
    private static let table: [NotificationKind: [String]] = Dictionary(uniqueKeysWithValues: NotificationKind.allCases.map { ($0, titles($0)) })

    /// The title of a stored entry (its `event` and `category` as the bell keeps them); for a word
    /// this release does not know (a legacy entry's own), the category's title, as the app falls
    /// back on `type`.
    public static func title(event: String, category: String, _ language: Language) -> String {
        let audience: NotificationKind.Audience = category == NotificationCategory.shop.rawValue ? .shop : .person
        if let kind = NotificationKind(word: event, audience: audience) { return title(kind, language) }
        if let category = NotificationCategory(rawValue: category) { return PreferenceTexts.title(category, language) }
        return title(.messageReceived, language)
    }

    /// In the order of `Language.allCases`: en, nl, de, fr. A shop's news speaks of the shop, not of
    /// the person.
    static func titles(_ kind: NotificationKind) -> [String] {
        switch kind {
        case .messageReceived: ["New message", "Nieuw bericht", "Neue Nachricht", "Nouveau message"]
        case .offerMade: ["New offer", "Nieuw bod", "Neues Angebot", "Nouvelle offre"]
        case .orderPaid: ["Payment received", "Betaling ontvangen", "Zahlung eingegangen", "Paiement reçu"]
        case .orderShipped: ["Your watch is on its way", "Je horloge is onderweg", "Deine Uhr ist unterwegs", "Votre montre est en route"]
        case .orderDelivered: ["Your watch has arrived", "Je horloge is bezorgd", "Deine Uhr ist angekommen", "Votre montre est arrivée"]
        case .orderCancelled: ["Order cancelled", "Bestelling geannuleerd", "Bestellung storniert", "Commande annulée"]
        case .orderRefunded: ["Order refunded", "Bestelling terugbetaald", "Bestellung erstattet", "Commande remboursée"]
        case .priceDropped:
            [
                "A saved watch dropped in price", "Een bewaard horloge is in prijs verlaagd", "Eine gemerkte Uhr ist günstiger",
                "Une montre enregistrée a baissé de prix",
            ]
        case .watchSold:
            ["A saved watch was sold", "Een bewaard horloge is verkocht", "Eine gemerkte Uhr wurde verkauft", "Une montre enregistrée a été vendue"]
        case .savedSearchMatched:
            [
                "New watches for your search", "Nieuwe horloges voor je zoekopdracht", "Neue Uhren für deine Suche",
                "Nouvelles montres pour votre recherche",
            ]
        case .newSignIn:
            [
                "New sign-in to your account", "Nieuwe aanmelding op je account", "Neue Anmeldung bei deinem Konto",
                "Nouvelle connexion à votre compte",
            ]
        case .passwordChanged:
            ["Your password was changed", "Je wachtwoord is gewijzigd", "Dein Passwort wurde geändert", "Votre mot de passe a été modifié"]
        case .secondFactorEnabled:
            [
                "Two-step verification is on", "Tweestapsverificatie staat aan", "Zwei-Faktor-Anmeldung ist aktiviert",
                "La validation en deux étapes est activée",
            ]
        case .secondFactorDisabled:
            [
                "Two-step verification is off", "Tweestapsverificatie staat uit", "Zwei-Faktor-Anmeldung ist deaktiviert",
                "La validation en deux étapes est désactivée",
            ]
        case .signInLinked:
            [
                "A sign-in with Apple or Google was linked to your account", "Er is een aanmelding met Apple of Google aan je account gekoppeld",
                "Eine Anmeldung mit Apple oder Google wurde mit deinem Konto verknüpft",
                "Une connexion avec Apple ou Google a été associée à votre compte",
            ]
        case .signInUnlinked:
            [
                "A sign-in with Apple or Google was removed from your account", "Een aanmelding met Apple of Google is van je account losgekoppeld",
                "Eine Anmeldung mit Apple oder Google wurde von deinem Konto entfernt",
                "Une connexion avec Apple ou Google a été retirée de votre compte",
            ]
        case .recoveryCodesRenewed:
            [
                "New recovery codes were made for your account", "Er zijn nieuwe herstelcodes voor je account gemaakt",
                "Für dein Konto wurden neue Wiederherstellungscodes erstellt", "De nouveaux codes de récupération ont été créés pour votre compte",
            ]
        case .signInAttemptsFailed:
            [
                "Someone tried several times to sign in to your account", "Iemand heeft meerdere keren geprobeerd op je account in te loggen",
                "Jemand hat mehrmals versucht, sich bei deinem Konto anzumelden",
                "Quelqu'un a tenté plusieurs fois de se connecter à votre compte",
            ]
        case .refreshTokenReused:
            [
                "A sign-in of your account was ended for your safety", "Een aanmelding op je account is voor je veiligheid beëindigd",
                "Eine Anmeldung deines Kontos wurde zu deiner Sicherheit beendet",
                "Une connexion à votre compte a été fermée pour votre sécurité",
            ]
        case .signedOut:
            [
                "Other sessions of your account were signed out", "Andere sessies van je account zijn afgemeld",
                "Andere Sitzungen deines Kontos wurden abgemeldet", "D'autres sessions de votre compte ont été déconnectées",
            ]
        case .emailChanged:
            [
                "Your e-mail address was changed", "Je e-mailadres is gewijzigd", "Deine E-Mail-Adresse wurde geändert",
                "Votre adresse e-mail a été modifiée",
            ]
        case .shopMessageReceived:
            [
                "A buyer wrote to your shop", "Een koper heeft je winkel een bericht gestuurd", "Ein Käufer hat deinem Shop geschrieben",
                "Un acheteur a écrit à votre boutique",
            ]
        case .shopOfferMade:
            [
                "A buyer made your shop an offer", "Een koper heeft je winkel een bod gedaan", "Ein Käufer hat deinem Shop ein Angebot gemacht",
                "Un acheteur a fait une offre à votre boutique",
            ]
        case .shopOrderPaid:
            [
                "A buyer paid for one of your watches", "Een koper heeft een horloge van je betaald", "Ein Käufer hat eine deiner Uhren bezahlt",
                "Un acheteur a payé une de vos montres",
            ]
        case .shopUnanswered:
            [
                "Buyers are waiting for your answer", "Kopers wachten op je antwoord", "Käufer warten auf deine Antwort",
                "Des acheteurs attendent votre réponse",
            ]
        case .offerAccepted: ["Offer accepted", "Bod geaccepteerd", "Angebot angenommen", "Offre acceptée"]
        case .offerReceived: ["Offer received", "Bod ontvangen", "Angebot erhalten", "Offre reçue"]
        case .offerRefused: ["Offer declined", "Bod afgewezen", "Angebot abgelehnt", "Offre refusée"]
        }
    }
}
