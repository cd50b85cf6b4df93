/// The languages people read the tier's texts in (bell entries, preference labels, pushes), with
/// English as the fallback.
public enum Language: String, Sendable, Hashable, CaseIterable {
    case en, nl, de, fr

    /// The best of ours for an `Accept-Language` header (`nl-BE, nl;q=0.9, en;q=0.5`): the
    /// highest-weighted range whose primary tag we have, English when none (or no header).
    public static func negotiate(_ header: String?) -> Language {
        guard let header else { return .en }
        var best: (language: Language, weight: Double)?
        for range in header.split(separator: ",") {
            let parts = range.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
            guard let tag = parts.first?.lowercased(), !tag.isEmpty else { continue }
            var weight = 1.0
            for parameter in parts.dropFirst() where parameter.hasPrefix("q=") {
                weight = Double(parameter.dropFirst(2)) ?? 0
            }
            guard weight > 0 else { continue }
            let primary = String(tag.split(separator: "-").first ?? "")
            guard let language = Language(rawValue: primary) else { continue }
            if best == nil || weight > best!.weight { best = (language, weight) }
        }
        return best?.language ?? .en
    }

    /// The position in `allCases`, the index of the word tables' rows.
    public var index: Int {
        switch self {
        case .en: 0
        case .nl: 1
        case .de: 2
        case .fr: 3
        }
    }
}

/// The notification preferences' texts.
public enum PreferenceTexts {
    public static func title(_ category: NotificationCategory, _ language: Language) -> String {
        switch (category, language) {
        case (.messages, .en): "Messages"
        case (.messages, .nl): "Berichten"
        case (.messages, .de): "Nachrichten"
        case (.messages, .fr): "Messages"
        case (.orders, .en): "Orders"
        case (.orders, .nl): "Bestellingen"
        case (.orders, .de): "Bestellungen"
        case (.orders, .fr): "Commandes"
        case (.savedWatches, .en): "Saved watches"
        case (.savedWatches, .nl): "Bewaarde horloges"
        case (.savedWatches, .de): "Gemerkte Uhren"
        case (.savedWatches, .fr): "Montres enregistrées"
        case (.savedSearches, .en): "Saved searches"
        case (.savedSearches, .nl): "Bewaarde zoekopdrachten"
        case (.savedSearches, .de): "Gespeicherte Suchen"
        case (.savedSearches, .fr): "Recherches enregistrées"
        case (.security, .en): "Security"
        case (.security, .nl): "Beveiliging"
        case (.security, .de): "Sicherheit"
        case (.security, .fr): "Sécurité"
        case (.shop, .en): "Your shop"
        case (.shop, .nl): "Je winkel"
        case (.shop, .de): "Dein Shop"
        case (.shop, .fr): "Votre boutique"
        }
    }

    /// Why a locked category's push cannot be turned off; nil for the others.
    public static func lockedNote(_ category: NotificationCategory, _ language: Language) -> String? {
        switch (category, language) {
        case (.security, .en): "Security notifications tell you about sign-ins and changes to your account, so they cannot be turned off."
        case (.security, .nl): "Beveiligingsmeldingen vertellen je over aanmeldingen en wijzigingen aan je account en kunnen daarom niet worden uitgezet."
        case (.security, .de):
            "Sicherheitsbenachrichtigungen informieren dich über Anmeldungen und Änderungen an deinem Konto und können daher nicht ausgeschaltet werden."
        case (.security, .fr):
            "Les notifications de sécurité vous informent des connexions et des modifications de votre compte ; elles ne peuvent donc pas être désactivées."
        case (.orders, .en): "Order notifications tell you about the payment and delivery of your orders, so they cannot be turned off."
        case (.orders, .nl): "Bestelmeldingen vertellen je over de betaling en levering van je bestellingen en kunnen daarom niet worden uitgezet."
        case (.orders, .de):
            "Bestellbenachrichtigungen informieren dich über Zahlung und Lieferung deiner Bestellungen und können daher nicht ausgeschaltet werden."
        case (.orders, .fr):
            "Les notifications de commande vous informent du paiement et de la livraison de vos commandes ; elles ne peuvent donc pas être désactivées."
        default: nil
        }
    }
}
