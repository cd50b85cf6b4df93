/// The words of bell entries (and, later, of pushes), in each language. The app routes on `type`,
/// `event` and the ids, never on these.
public enum BellTexts {
    /// What happened, in a few words, by the entry's `event`.
    static let titles: [String: [Language: String]] = [
        "message_received": [.en: "New message", .nl: "Nieuw bericht", .de: "Neue Nachricht", .fr: "Nouveau message"],
        "offer_made": [.en: "New offer", .nl: "Nieuw bod", .de: "Neues Angebot", .fr: "Nouvelle offre"],
        "order_paid": [.en: "Payment received", .nl: "Betaling ontvangen", .de: "Zahlung eingegangen", .fr: "Paiement reçu"],
        "order_shipped": [.en: "Your watch is on its way", .nl: "Je horloge is onderweg", .de: "Deine Uhr ist unterwegs", .fr: "Votre montre est en route"],
        "order_delivered": [.en: "Your watch has arrived", .nl: "Je horloge is bezorgd", .de: "Deine Uhr ist angekommen", .fr: "Votre montre est arrivée"],
        "order_cancelled": [.en: "Order cancelled", .nl: "Bestelling geannuleerd", .de: "Bestellung storniert", .fr: "Commande annulée"],
        "order_refunded": [.en: "Order refunded", .nl: "Bestelling terugbetaald", .de: "Bestellung erstattet", .fr: "Commande remboursée"],
        "price_dropped": [.en: "A saved watch dropped in price", .nl: "Een bewaard horloge is in prijs verlaagd", .de: "Eine gemerkte Uhr ist günstiger", .fr: "Une montre enregistrée a baissé de prix"],
        "watch_sold": [.en: "A saved watch was sold", .nl: "Een bewaard horloge is verkocht", .de: "Eine gemerkte Uhr wurde verkauft", .fr: "Une montre enregistrée a été vendue"],
        "saved_search_matched": [.en: "New watches for your search", .nl: "Nieuwe horloges voor je zoekopdracht", .de: "Neue Uhren für deine Suche", .fr: "Nouvelles montres pour votre recherche"],
        "new_sign_in": [.en: "New sign-in to your account", .nl: "Nieuwe aanmelding op je account", .de: "Neue Anmeldung bei deinem Konto", .fr: "Nouvelle connexion à votre compte"],
        "password_changed": [.en: "Your password was changed", .nl: "Je wachtwoord is gewijzigd", .de: "Dein Passwort wurde geändert", .fr: "Votre mot de passe a été modifié"],
        "second_factor_enabled": [.en: "Two-step verification is on", .nl: "Tweestapsverificatie staat aan", .de: "Zwei-Faktor-Anmeldung ist aktiviert", .fr: "La validation en deux étapes est activée"],
        "second_factor_disabled": [.en: "Two-step verification is off", .nl: "Tweestapsverificatie staat uit", .de: "Zwei-Faktor-Anmeldung ist deaktiviert", .fr: "La validation en deux étapes est désactivée"],
        "email_changed": [.en: "Your e-mail address was changed", .nl: "Je e-mailadres is gewijzigd", .de: "Deine E-Mail-Adresse wurde geändert", .fr: "Votre adresse e-mail a été modifiée"],
        "offer_accepted": [.en: "Offer accepted", .nl: "Bod geaccepteerd", .de: "Angebot angenommen", .fr: "Offre acceptée"],
        "offer_received": [.en: "Offer received", .nl: "Bod ontvangen", .de: "Angebot erhalten", .fr: "Offre reçue"],
        "offer_refused": [.en: "Offer declined", .nl: "Bod afgewezen", .de: "Angebot abgelehnt", .fr: "Offre refusée"],
    ]

    /// The entry's title in `language`; for an event this release has no words for, the category's
    /// title (the app falls back on `type` the same way).
    public static func title(event: String, category: String, _ language: Language) -> String {
        if let title = titles[event]?[language] { return title }
        if let category = NotificationCategory(rawValue: category) { return PreferenceTexts.title(category, language) }
        return titles["message_received"]![language]!
    }

    /// The events with words of their own.
    public static var events: Set<String> { Set(titles.keys) }
}
