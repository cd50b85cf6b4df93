import InboxDomain

/// The words of pushes, in each language: a title and a short body per kind, switched over
/// exhaustively, so a kind without words does not compile. The app routes on `data`, never on these.
public enum PushTexts {
    /// The title of `notification` in `language`: the bell's for the same kind (`BellTexts`), so a
    /// push and the entry it left in the bell say the same thing; a shop's news has words of its own.
    public static func title(_ notification: PushNotification, _ language: Language) -> String {
        BellTexts.title(notification.kind, language)
    }

    /// The body of `notification` in `language`.
    public static func body(_ notification: PushNotification, _ language: Language) -> String {
        table[notification.kind]![language.index]
    }

    /// `bodies` of every kind, made once: a push looks its body up per device.
    private static let table: [NotificationKind: [String]] = Dictionary(uniqueKeysWithValues: NotificationKind.allCases.map { ($0, bodies($0)) })

    /// Bodies in the order of `Language.allCases`: en, nl, de, fr. Short and friendly, and with no
    /// personal data: the push carries only ids, so the words cannot name a watch, a price or a person.
    static func bodies(_ kind: NotificationKind) -> [String] {
        switch kind {
        case .messageReceived:
            [
                "You have a new message. Tap to read it.", "Je hebt een nieuw bericht. Tik om het te lezen.",
                "Du hast eine neue Nachricht. Tippe, um sie zu lesen.", "Vous avez un nouveau message. Touchez pour le lire.",
            ]
        case .offerMade:
            [
                "You received an offer. Tap to see it.", "Je hebt een aanbod ontvangen. Tik om het te bekijken.",
                "Du hast ein Angebot erhalten. Tippe, um es anzusehen.", "Vous avez reçu une offre. Touchez pour la voir.",
            ]
        case .orderPaid:
            [
                "Your payment was received. Tap to see your order.", "Je betaling is ontvangen. Tik om je bestelling te bekijken.",
                "Deine Zahlung ist eingegangen. Tippe, um deine Bestellung anzusehen.", "Votre paiement a été reçu. Touchez pour voir votre commande.",
            ]
        case .orderShipped:
            [
                "Tap to follow your order.", "Tik om je bestelling te volgen.", "Tippe, um deine Bestellung zu verfolgen.",
                "Touchez pour suivre votre commande.",
            ]
        case .orderDelivered:
            [
                "Enjoy your watch! Tap to see your order.", "Veel plezier met je horloge! Tik om je bestelling te bekijken.",
                "Viel Freude mit deiner Uhr! Tippe, um deine Bestellung anzusehen.", "Profitez bien de votre montre ! Touchez pour voir votre commande.",
            ]
        case .orderCancelled:
            [
                "Your order was cancelled. Tap for the details.", "Je bestelling is geannuleerd. Tik voor de details.",
                "Deine Bestellung wurde storniert. Tippe für die Details.", "Votre commande a été annulée. Touchez pour les détails.",
            ]
        case .orderRefunded:
            [
                "Your money is on its way back. Tap for the details.", "Je geld is onderweg terug. Tik voor de details.",
                "Dein Geld ist auf dem Weg zurück zu dir. Tippe für die Details.", "Votre remboursement est en cours. Touchez pour les détails.",
            ]
        case .priceDropped:
            [
                "A watch you saved is now cheaper. Tap to see it.", "Een horloge dat je hebt bewaard is nu goedkoper. Tik om het te bekijken.",
                "Eine Uhr, die du dir gemerkt hast, ist jetzt günstiger. Tippe, um sie anzusehen.",
                "Une montre que vous avez enregistrée est moins chère. Touchez pour la voir.",
            ]
        case .watchSold:
            [
                "A watch you saved has found a new owner.", "Een horloge dat je hebt bewaard heeft een nieuwe eigenaar gevonden.",
                "Eine Uhr, die du dir gemerkt hast, hat einen neuen Besitzer gefunden.",
                "Une montre que vous avez enregistrée a trouvé un nouveau propriétaire.",
            ]
        case .savedSearchMatched:
            [
                "New watches match your saved search. Tap to see them.", "Er zijn nieuwe horloges voor je bewaarde zoekopdracht. Tik om ze te bekijken.",
                "Neue Uhren passen zu deiner gespeicherten Suche. Tippe, um sie anzusehen.",
                "De nouvelles montres correspondent à votre recherche enregistrée. Touchez pour les voir.",
            ]
        case .newSignIn:
            [
                "Someone signed in to your account. If this wasn't you, change your password.",
                "Er is aangemeld op je account. Was jij dit niet? Wijzig dan je wachtwoord.",
                "Jemand hat sich bei deinem Konto angemeldet. Warst du das nicht, ändere dein Passwort.",
                "Une connexion à votre compte a eu lieu. Si ce n'était pas vous, changez votre mot de passe.",
            ]
        case .passwordChanged:
            [
                "If you didn't change it, contact us right away.", "Heb jij dit niet gedaan? Neem dan meteen contact met ons op.",
                "Warst du das nicht, melde dich sofort bei uns.", "Si ce n'était pas vous, contactez-nous immédiatement.",
            ]
        case .secondFactorEnabled:
            [
                "Your account is now better protected.", "Je account is nu beter beveiligd.", "Dein Konto ist jetzt besser geschützt.",
                "Votre compte est désormais mieux protégé.",
            ]
        case .secondFactorDisabled:
            [
                "If you didn't turn it off, contact us right away.", "Heb jij dit niet uitgezet? Neem dan meteen contact met ons op.",
                "Warst du das nicht, melde dich sofort bei uns.", "Si ce n'était pas vous, contactez-nous immédiatement.",
            ]
        case .signInLinked, .signInUnlinked, .recoveryCodesRenewed:
            [
                "If it wasn't you, contact us right away.", "Was jij dit niet? Neem dan meteen contact met ons op.",
                "Warst du das nicht, melde dich sofort bei uns.", "Si ce n'était pas vous, contactez-nous immédiatement.",
            ]
        case .signInAttemptsFailed:
            [
                "If it wasn't you, change your password and turn on two-step verification.",
                "Was jij dit niet? Wijzig dan je wachtwoord en zet verificatie in twee stappen aan.",
                "Warst du das nicht, ändere dein Passwort und aktiviere die Bestätigung in zwei Schritten.",
                "Si ce n'était pas vous, changez votre mot de passe et activez la validation en deux étapes.",
            ]
        case .refreshTokenReused:
            [
                "Someone may have a copy of it: sign in again, and change your password if you're unsure.",
                "Iemand heeft er mogelijk een kopie van: log opnieuw in, en wijzig je wachtwoord als je twijfelt.",
                "Jemand könnte eine Kopie davon haben: melde dich neu an und ändere im Zweifel dein Passwort.",
                "Quelqu'un en a peut-être une copie : reconnectez-vous, et changez votre mot de passe en cas de doute.",
            ]
        case .signedOut:
            [
                "If it wasn't you, change your password right away.", "Was jij dit niet? Wijzig dan meteen je wachtwoord.",
                "Warst du das nicht, ändere sofort dein Passwort.", "Si ce n'était pas vous, changez immédiatement votre mot de passe.",
            ]
        case .emailChanged:
            [
                "If you didn't change it, contact us right away.", "Heb jij dit niet gedaan? Neem dan meteen contact met ons op.",
                "Warst du das nicht, melde dich sofort bei uns.", "Si ce n'était pas vous, contactez-nous immédiatement.",
            ]
        case .shopMessageReceived:
            [
                "Tap to read it and reply.", "Tik om het te lezen en te antwoorden.", "Tippe, um zu lesen und zu antworten.",
                "Touchez pour lire et répondre.",
            ]
        case .shopOfferMade:
            [
                "Tap to see it and answer.", "Tik om het te bekijken en te antwoorden.", "Tippe, um es anzusehen und zu antworten.",
                "Touchez pour la voir et répondre.",
            ]
        case .shopOrderPaid:
            [
                "Tap to see the order and get it ready to ship.", "Tik om de bestelling te bekijken en klaar te maken voor verzending.",
                "Tippe, um die Bestellung anzusehen und den Versand vorzubereiten.",
                "Touchez pour voir la commande et préparer l'envoi.",
            ]
        case .shopUnanswered:
            [
                "Tap to see the messages waiting in your shop.", "Tik om de berichten te zien die in je winkel wachten.",
                "Tippe, um die wartenden Nachrichten deines Shops zu sehen.", "Touchez pour voir les messages en attente dans votre boutique.",
            ]
        case .offerAccepted, .offerReceived, .offerRefused:
            // Never sent; an invitation to look, should one ever be.
            [
                "Tap to see what's new.", "Tik om te zien wat er nieuw is.", "Tippe, um zu sehen, was es Neues gibt.",
                "Touchez pour voir les nouveautés.",
            ]
        }
    }
}

