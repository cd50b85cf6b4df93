import Encodings
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

    /// The mail of a claimed stream, in the contact's language: the gathered notifications, a
    /// saved search's matches, a shop's digest, or the sold mail.
    public static func render(
        _ claimed: MailOutboxStore.Claimed, to contact: Contact, from: MailAddress, links: Links?, date: Date
    ) throws -> MailMessage {
        let messageID = claimed.messageID(domain: from.domain)
        switch claimed.stream {
        case .notifications:
            return try render(claimed.items, to: contact, from: from, links: links, messageID: messageID, date: date)
        case .search(let id):
            return try compose(
                searchMail(claimed.items, name: claimed.searchName, searchId: id, contact.language), to: contact, from: from, links: links,
                messageID: messageID, date: date)
        case .shopDigest:
            return try compose(digestMail(claimed.items, contact.language), to: contact, from: from, links: links, messageID: messageID, date: date)
        case .sold:
            return try compose(soldMail(claimed.items, contact.language), to: contact, from: from, links: links, messageID: messageID, date: date)
        }
    }

    /// The gathered notifications of one person: each with the bell's words and when it happened.
    public static func render(
        _ items: [MailOutboxStore.Item], to contact: Contact, from: MailAddress, links: Links?, messageID: String?, date: Date
    ) throws -> MailMessage {
        let language = contact.language
        let categories = Array(Set(items.map(\.kind.category))).sorted { $0.rawValue < $1.rawValue }
        let titles = items.map { lineTitle($0.kind, language) }
        let subject =
            items.count == 1 ? "Wristler: \(titles[0])" : words(Texts.subjectMany, language).filling("%d", with: "\(items.count)")
        let content = Content(
            subject: subject, intro: words(Texts.intro, language),
            lines: zip(items, titles).map { Line(title: $1, detail: nil, when: $0.happenedAt) }, closing: words(Texts.open, language),
            footers: categories.map {
                Footer(
                    token: $0.rawValue,
                    because: words(Texts.footer, language).filling("%@", with: PreferenceTexts.title($0, language)),
                    action: words(Texts.unsubscribe, language))
            },
            oneClick: categories.isEmpty ? nil : categories.map(\.rawValue).joined(separator: "."))
        return try compose(content, to: contact, from: from, links: links, messageID: messageID, date: date)
    }

    /// What a mail says, before it is written as text and HTML.
    struct Content {
        var subject: String
        var intro: String
        var lines: [Line]
        var closing: String
        /// One unsubscribe link each: why the mail came, and what the link stops.
        var footers: [Footer]
        /// The token category of `List-Unsubscribe`, nil for none.
        var oneClick: String?
    }

    struct Line {
        var title: String
        /// A quote under the title (a buyer's message).
        var detail: String?
        var when: Date
    }

    struct Footer {
        /// The unsubscribe token's category field.
        var token: String
        var because: String
        var action: String
    }

    /// A saved search's new matches: how many watches, per match.
    static func searchMail(_ items: [MailOutboxStore.Item], name: String?, searchId: String, _ language: Language) -> Content {
        let counts = items.map { max(1, ItemIds(json: $0.ids).watchIds.count) }
        let total = counts.reduce(0, +)
        let quoted = quote(name ?? "", language)
        // The name is another tier's data: in the subject, without line breaks and at most 100 characters.
        let subject = (total == 1 ? words(Texts.searchOne, language) : words(Texts.searchMany, language).filling("%d", with: "\(total)"))
            .filling("%@", with: quote(Header.fitting(name ?? "", limit: 100), language))
        let token = "search:" + searchId
        return Content(
            subject: subject, intro: words(Texts.searchIntro, language).filling("%@", with: quoted),
            lines: zip(items, counts).map { item, count in
                Line(
                    title: count == 1 ? words(Texts.watchOne, language) : words(Texts.watchMany, language).filling("%d", with: "\(count)"),
                    detail: nil, when: item.happenedAt)
            },
            closing: words(Texts.searchOpen, language),
            footers: UnsubscribeLink.isValidField(token)
                ? [
                    Footer(
                        token: token, because: words(Texts.searchFooter, language).filling("%@", with: quoted),
                        action: words(Texts.searchStop, language))
                ] : [],
            oneClick: UnsubscribeLink.isValidField(token) ? token : nil)
    }

    /// What buyers wrote to a shop and is still waiting: each message's first words and offer.
    static func digestMail(_ items: [MailOutboxStore.Item], _ language: Language) -> Content {
        let subject =
            items.count == 1 ? words(Texts.digestOne, language) : words(Texts.digestMany, language).filling("%d", with: "\(items.count)")
        return Content(
            subject: subject, intro: words(Texts.digestIntro, language),
            lines: items.map { item in
                var title = lineTitle(item.kind, language)
                if let offer = item.offer { title += ": " + money(offer, language) }
                let excerpt = item.excerpt.map { $0.count >= MailOutboxStore.excerptLength ? $0 + "…" : $0 }
                return Line(title: title, detail: excerpt.flatMap { $0.isEmpty ? nil : quote($0, language) }, when: item.happenedAt)
            },
            closing: words(Texts.shopOpen, language), footers: [shopFooter(language)], oneClick: NotificationCategory.shop.rawValue)
    }

    /// The shop's watches that were paid for: each order and its amount.
    static func soldMail(_ items: [MailOutboxStore.Item], _ language: Language) -> Content {
        let subject = items.count == 1 ? words(Texts.soldOne, language) : words(Texts.soldMany, language).filling("%d", with: "\(items.count)")
        return Content(
            subject: subject, intro: words(Texts.soldIntro, language),
            lines: items.map { item in
                let ids = ItemIds(json: item.ids)
                var title = words(Texts.soldLine, language).filling("%@", with: ids.orderId ?? "?")
                if let amount = ids.amount { title += ": " + money(amount, language) }
                return Line(title: title, detail: nil, when: item.happenedAt)
            },
            closing: words(Texts.soldOpen, language), footers: [shopFooter(language)], oneClick: NotificationCategory.shop.rawValue)
    }

    static func shopFooter(_ language: Language) -> Footer {
        Footer(
            token: NotificationCategory.shop.rawValue,
            because: words(Texts.footer, language).filling("%@", with: PreferenceTexts.title(.shop, language)),
            action: words(Texts.unsubscribe, language))
    }

    /// Writes `content` as the text and HTML parts, with the footer's links and the one-click
    /// header when `links` can make them.
    static func compose(
        _ content: Content, to contact: Contact, from: MailAddress, links: Links?, messageID: String?, date: Date
    ) throws -> MailMessage {
        let language = contact.language
        var text = content.intro + "\n\n"
        var html = "<!doctype html>\n<html lang=\"\(language.rawValue)\"><head><meta charset=\"utf-8\"><title>\(escape(content.subject))</title></head><body>\n"
        html += "<p>\(escape(content.intro))</p>\n<ul>\n"
        // A mail lists at most `listed` lines (a flood stays a mail one can read) and counts the
        // rest; the app has them all.
        for line in content.lines.prefix(listed) {
            let when = timestamp(line.when)
            text += "- \(line.title) (\(when))\n"
            html += "<li><strong>\(escape(line.title))</strong> <small>(\(escape(when)))</small>"
            if let detail = line.detail {
                text += "  \(detail)\n"
                html += "<br>\(escape(detail))"
            }
            html += "</li>\n"
        }
        html += "</ul>\n"
        if content.lines.count > listed {
            let more = words(Texts.more, language).filling("%d", with: "\(content.lines.count - listed)")
            text += "\(more)\n"
            html += "<p>\(escape(more))</p>\n"
        }
        html += "<p>\(escape(content.closing))</p>\n"
        text += "\n" + content.closing + "\n"

        var oneClick: String?
        // A person id a token cannot carry (ids are the other tiers') gets a mail without links
        // rather than none: the app's settings still turn it off.
        if let links, UnsubscribeLink.isValidField(contact.personId) {
            text += "\n-- \n"
            html += "<hr>\n"
            for footer in content.footers {
                let url = try links.signer.url(base: links.base, personId: contact.personId, category: footer.token, issuedAt: date)
                text += "\(footer.because)\n\(footer.action): \(url)\n"
                html += "<p><small>\(escape(footer.because)) <a href=\"\(escape(url))\">\(escape(footer.action))</a></small></p>\n"
            }
            // RFC 8058 wants https; a development URL (http://localhost) keeps the footer's links only.
            if links.base.lowercased().hasPrefix("https://"), let token = content.oneClick {
                oneClick = try links.signer.url(base: links.base, personId: contact.personId, category: token, issuedAt: date)
            }
        }
        html += "</body></html>\n"
        return try MailMessage(
            from: from, to: contact.address, subject: content.subject, textBody: text, htmlBody: html, unsubscribeURL: oneClick,
            headers: [MailHeader("Content-Language", language.rawValue), MailHeader("Auto-Submitted", "auto-generated")],
            messageID: messageID, date: date)
    }

    /// The ids of a queued item that its mail shows (the outbox's, with what decide added).
    struct ItemIds: Decodable {
        var orderId: String?
        var watchId: String?
        var watchIds: [String]
        var amount: Money?

        init(json: String) {
            self = (try? JSONDecoder().decode(ItemIds.self, from: Data(json.utf8))) ?? ItemIds(orderId: nil, watchId: nil, watchIds: [], amount: nil)
        }

        init(orderId: String?, watchId: String?, watchIds: [String], amount: Money?) {
            self.orderId = orderId
            self.watchId = watchId
            self.watchIds = watchIds
            self.amount = amount
        }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            orderId = try? container.decodeIfPresent(String.self, forKey: .orderId)
            watchId = try? container.decodeIfPresent(String.self, forKey: .watchId)
            watchIds = (try? container.decodeIfPresent([String].self, forKey: .watchIds)) ?? watchId.map { [$0] } ?? []
            amount = try? container.decodeIfPresent(Money.self, forKey: .amount)
        }

        enum CodingKeys: String, CodingKey { case orderId, watchId, watchIds, amount }
    }

    /// An amount in minor units as the language writes it, with its ISO currency code:
    /// `4,200.00 EUR`, `4.200,00 EUR`, `4 200,00 EUR`; currencies without minor units (JPY,
    /// KRW, ...) without decimals.
    static func money(_ money: Money, _ language: Language) -> String {
        let digits = ["BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "VND", "VUV", "XAF", "XOF", "XPF"]
            .contains(money.currency.uppercased()) ? 0 : 2
        let (group, decimal): (String, String) =
            switch language {
            case .en: (",", ".")
            case .nl, .de: (".", ",")
            case .fr: ("\u{202F}", ",")
            }
        let magnitude = money.amount.magnitude
        let unit: UInt64 = digits == 0 ? 1 : 100
        var whole = String(magnitude / unit)
        var grouped = ""
        while whole.count > 3 {
            grouped = group + whole.suffix(3) + grouped
            whole.removeLast(3)
        }
        grouped = whole + grouped
        let fraction = digits == 0 ? "" : decimal + String(format: "%02d", Int(magnitude % unit))
        return (money.amount < 0 ? "-" : "") + grouped + fraction + " " + money.currency
    }

    /// Quotation marks as the language sets them.
    static func quote(_ text: String, _ language: Language) -> String {
        switch language {
        case .en, .nl: "“\(text)”"
        case .de: "„\(text)“"
        case .fr: "« \(text) »"
        }
    }

    /// The most notifications a mail lists one by one.
    public static let listed = 50

    /// `2026-12-01 14:05 UTC`: the same in every language, and never ambiguous.
    static func timestamp(_ date: Date) -> String { UTCTime.format(date, "%Y-%m-%d %H:%M UTC") }

    static func escape(_ text: String) -> String { HTML.escape(text) }


    /// A notification's line in a mail: the bell's title of its kind; in a shop's digest, the
    /// message's or the offer's own words (the digest's subject already says whose shop).
    static func lineTitle(_ kind: NotificationKind, _ language: Language) -> String {
        switch kind {
        case .shopMessageReceived: BellTexts.title(.messageReceived, language)
        case .shopOfferMade: BellTexts.title(.offerMade, language)
        case .messageReceived, .offerMade, .orderPaid, .orderShipped, .orderDelivered, .orderCancelled, .orderRefunded, .priceDropped, .watchSold,
            .savedSearchMatched, .newSignIn, .passwordChanged, .secondFactorEnabled, .secondFactorDisabled, .emailChanged, .signedOut, .signInLinked, .signInUnlinked, .recoveryCodesRenewed,
            .signInAttemptsFailed, .refreshTokenReused, .shopOrderPaid,
            .shopUnanswered, .offerAccepted, .offerReceived, .offerRefused:
            BellTexts.title(kind, language)
        }
    }

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

        // A saved search's mail; `%@` is the search's name in quotation marks.
        static let searchOne = [
            "Wristler: a new watch for %@", "Wristler: een nieuw horloge voor %@", "Wristler: eine neue Uhr für %@", "Wristler : une nouvelle montre pour %@",
        ]
        static let searchMany = [
            "Wristler: %d new watches for %@", "Wristler: %d nieuwe horloges voor %@", "Wristler: %d neue Uhren für %@",
            "Wristler : %d nouvelles montres pour %@",
        ]
        static let searchIntro = [
            "New watches match your search %@:", "Nieuwe horloges passen bij je zoekopdracht %@:", "Neue Uhren passen zu deiner Suche %@:",
            "De nouvelles montres correspondent à votre recherche %@ :",
        ]
        static let watchOne = ["1 new watch", "1 nieuw horloge", "1 neue Uhr", "1 nouvelle montre"]
        static let watchMany = ["%d new watches", "%d nieuwe horloges", "%d neue Uhren", "%d nouvelles montres"]
        static let searchOpen = [
            "Open your search in the Wristler app to see them.", "Open je zoekopdracht in de Wristler-app om ze te bekijken.",
            "Öffne deine Suche in der Wristler-App, um sie zu sehen.", "Ouvrez votre recherche dans l'app Wristler pour les voir.",
        ]
        static let searchFooter = [
            "You receive this because your search %@ sends you e-mails.", "Je ontvangt dit omdat je zoekopdracht %@ je e-mails stuurt.",
            "Du erhältst dies, weil deine Suche %@ dir E-Mails schickt.", "Vous recevez ceci car votre recherche %@ vous envoie des e-mails.",
        ]
        static let searchStop = [
            "Stop e-mails for this search", "Geen e-mails meer voor deze zoekopdracht", "Keine E-Mails mehr für diese Suche",
            "Ne plus recevoir d'e-mails pour cette recherche",
        ]

        // The shop's digest and sold mail.
        static let digestOne = [
            "Wristler: a buyer wrote to your shop", "Wristler: een koper schreef je winkel", "Wristler: ein Käufer hat deinem Shop geschrieben",
            "Wristler : un acheteur a écrit à votre boutique",
        ]
        static let digestMany = [
            "Wristler: %d messages from buyers to your shop", "Wristler: %d berichten van kopers aan je winkel",
            "Wristler: %d Nachrichten von Käufern an deinen Shop", "Wristler : %d messages d'acheteurs à votre boutique",
        ]
        static let digestIntro = [
            "Buyers wrote to your shop and are waiting for an answer:", "Kopers schreven je winkel en wachten op antwoord:",
            "Käufer haben deinem Shop geschrieben und warten auf eine Antwort:", "Des acheteurs ont écrit à votre boutique et attendent une réponse :",
        ]
        static let soldOne = [
            "Wristler: your watch was sold", "Wristler: je horloge is verkocht", "Wristler: deine Uhr wurde verkauft", "Wristler : votre montre a été vendue",
        ]
        static let soldMany = [
            "Wristler: %d of your watches were sold", "Wristler: %d van je horloges zijn verkocht", "Wristler: %d deiner Uhren wurden verkauft",
            "Wristler : %d de vos montres ont été vendues",
        ]
        static let soldIntro = [
            "A buyer paid for a watch of your shop. Please prepare it for shipping:", "Een koper heeft een horloge van je winkel betaald. Maak het klaar voor verzending:",
            "Ein Käufer hat eine Uhr deines Shops bezahlt. Bitte bereite den Versand vor:",
            "Un acheteur a payé une montre de votre boutique. Merci de préparer l'envoi :",
        ]
        static let soldLine = ["Order %@ paid", "Bestelling %@ betaald", "Bestellung %@ bezahlt", "Commande %@ payée"]
        static let soldOpen = [
            "Open the Wristler app and switch to your shop to see the order.", "Open de Wristler-app en wissel naar je winkel om de bestelling te zien.",
            "Öffne die Wristler-App und wechsle zu deinem Shop, um die Bestellung zu sehen.",
            "Ouvrez l'app Wristler et passez à votre boutique pour voir la commande.",
        ]
        static let shopOpen = [
            "Open the Wristler app and switch to your shop to answer.", "Open de Wristler-app en wissel naar je winkel om te antwoorden.",
            "Öffne die Wristler-App und wechsle zu deinem Shop, um zu antworten.", "Ouvrez l'app Wristler et passez à votre boutique pour répondre.",
        ]
    }
}

extension String {
    /// The text with every `mark` (`%d`, `%@`) replaced by `value`: the texts' placeholders, found
    /// in their bytes by `ByteSearch` (Foundation's `replacingOccurrences` went through `NSString` for
    /// each, the standard library's generic `firstRange(of:)` was 8 % of rendering a mail).
    func filling(_ mark: String, with value: String) -> String {
        let bytes = Array(utf8)
        let needle = Array(mark.utf8)
        func find(from start: Int) -> Int? { bytes.withUnsafeBufferPointer { ByteSearch.find(needle, in: $0, from: start) } }
        var filled: [UInt8] = []
        var start = 0
        while let found = find(from: start) {
            if start == 0 { filled.reserveCapacity(bytes.count + value.utf8.count) }
            filled += bytes[start..<found]
            filled += value.utf8
            start = found + needle.count
        }
        // Not found (an empty mark never is): the text as it was.
        if start == 0 { return self }
        filled += bytes[start...]
        return String(decoding: filled, as: UTF8.self)
    }
}
