import Foundation
import InboxDomain
import Mail

/// The gathered mail of one person: a subject, and the same list as text and as HTML, in the
/// contact's language, each notification with the bell's words (`BellTexts.title`) and when it
/// happened (UTC), followed by an unsubscribe link per category when links can be made.
///
/// Everything that comes from data is HTML-escaped in the HTML part. With links, the mail's
/// `List-Unsubscribe` (RFC 8058 one click) turns off every category the mail holds: its token's
/// category field is the categories joined with dots (`messages.security`), which
/// `/mail/unsubscribe` reads as a list.
public enum MailRenderer {
    /// How unsubscribe links are made: the signing keys and the route's public address
    /// (`<INBOX_PUBLIC_URL>/mail/unsubscribe`).
    public struct Links: Sendable {
        public var signer: UnsubscribeLink
        public var base: String

        public init(signer: UnsubscribeLink, publicURL: String) {
            self.signer = signer
            self.base = (publicURL.hasSuffix("/") ? String(publicURL.dropLast()) : publicURL) + "/mail/unsubscribe"
        }
    }

    public static func render(
        _ items: [MailOutboxStore.Item], to contact: Contact, from: MailAddress, links: Links?, messageID: String?, date: Date
    ) throws -> MailMessage {
        let language = contact.language
        let categories = Array(Set(items.compactMap { NotificationCategory(rawValue: $0.category) })).sorted { $0.rawValue < $1.rawValue }
        let titles = items.map { BellTexts.title(event: $0.event, category: $0.category, language) }
        let subject =
            items.count == 1 ? "Wristler: \(titles[0])" : words(Texts.subjectMany, language).replacingOccurrences(of: "%d", with: "\(items.count)")

        var text = words(Texts.intro, language) + "\n\n"
        var html = "<!doctype html>\n<html lang=\"\(language.rawValue)\"><head><meta charset=\"utf-8\"><title>\(escape(subject))</title></head><body>\n"
        html += "<p>\(escape(words(Texts.intro, language)))</p>\n<ul>\n"
        // A mail lists at most `listed` notifications (a flood of them stays a mail one can read)
        // and counts the rest; the app has them all.
        for (item, title) in zip(items, titles).prefix(listed) {
            let when = timestamp(item.happenedAt)
            text += "- \(title) (\(when))\n"
            html += "<li><strong>\(escape(title))</strong> <small>(\(escape(when)))</small></li>\n"
        }
        html += "</ul>\n"
        if items.count > listed {
            let more = words(Texts.more, language).replacingOccurrences(of: "%d", with: "\(items.count - listed)")
            text += "\(more)\n"
            html += "<p>\(escape(more))</p>\n"
        }
        html += "<p>\(escape(words(Texts.open, language)))</p>\n"
        text += "\n" + words(Texts.open, language) + "\n"

        var oneClick: String?
        if let links {
            text += "\n-- \n"
            html += "<hr>\n"
            for category in categories {
                let url = try links.signer.url(base: links.base, personId: contact.personId, category: category.rawValue, issuedAt: date)
                let line = words(Texts.footer, language).replacingOccurrences(of: "%@", with: PreferenceTexts.title(category, language))
                text += "\(line)\n\(words(Texts.unsubscribe, language)): \(url)\n"
                html += "<p><small>\(escape(line)) <a href=\"\(escape(url))\">\(escape(words(Texts.unsubscribe, language)))</a></small></p>\n"
            }
            // RFC 8058 wants https; a development URL (http://localhost) keeps the footer's links only.
            if links.base.lowercased().hasPrefix("https://"), !categories.isEmpty {
                oneClick = try links.signer.url(
                    base: links.base, personId: contact.personId, category: categories.map(\.rawValue).joined(separator: "."), issuedAt: date)
            }
        }
        html += "</body></html>\n"
        return try MailMessage(
            from: from, to: contact.address, subject: subject, textBody: text, htmlBody: html, unsubscribeURL: oneClick,
            headers: [MailHeader("Content-Language", language.rawValue), MailHeader("Auto-Submitted", "auto-generated")],
            messageID: messageID, date: date)
    }

    /// The most notifications a mail lists one by one.
    public static let listed = 50

    /// `2026-12-01 14:05 UTC`: the same in every language, and never ambiguous.
    static func timestamp(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute], from: date)
        return String(format: "%04d-%02d-%02d %02d:%02d UTC", parts.year!, parts.month!, parts.day!, parts.hour!, parts.minute!)
    }

    static func escape(_ text: String) -> String { HTML.escape(text) }

    static func words(_ texts: [String], _ language: Language) -> String { texts[Language.allCases.firstIndex(of: language) ?? 0] }

    /// The mail's words, in the order of `Language.allCases`: en, nl, de, fr.
    enum Texts {
        static let subjectMany = [
            "Wristler: %d new notifications", "Wristler: %d nieuwe meldingen", "Wristler: %d neue Mitteilungen", "Wristler : %d nouvelles notifications",
        ]
        static let intro = [
            "This is what happened on Wristler:", "Dit is er gebeurd op Wristler:", "Das ist auf Wristler passiert:",
            "Voici ce qui s'est passé sur Wristler :",
        ]
        static let open = [
            "Open the Wristler app to see more.", "Open de Wristler-app voor meer.", "Öffne die Wristler-App, um mehr zu sehen.",
            "Ouvrez l'app Wristler pour en savoir plus.",
        ]
        static let footer = [
            "You receive this because e-mails about “%@” are on.", "Je ontvangt dit omdat e-mails over “%@” aan staan.",
            "Du erhältst dies, weil E-Mails zu „%@“ eingeschaltet sind.", "Vous recevez ceci car les e-mails sur « %@ » sont activés.",
        ]
        static let unsubscribe = ["Unsubscribe", "Afmelden", "Abmelden", "Se désabonner"]
        static let more = ["… and %d more.", "… en nog %d.", "… und %d weitere.", "… et %d de plus."]
    }
}
