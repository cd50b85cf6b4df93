import EventLog
import Foundation
import HTTPServer
import InboxDomain
import Mail
import PostgresClient
import Projections

/// `/mail/unsubscribe?token=...`: the link of a mail's `List-Unsubscribe` header (RFC 8058) and
/// of its footer. The signed token (`UnsubscribeLink`) says who and which category; no login.
///
/// - `POST` (what a mail client's one-click button sends, `List-Unsubscribe=One-Click`, and what
///   the page's button sends) turns the token's categories' `email` off (one category, or several
///   joined with dots for a mail that gathers several): a `notification_preference_changed` event
///   per category still on, projected inline, as the preferences route writes it. Again is
///   harmless: a switch already off appends nothing.
/// - `GET` never changes anything (link checkers and previews open links on their own): it shows
///   a page asking to confirm, with a button that posts.
///
/// The answers are small HTML pages in the language of `Accept-Language`; a token that is not
/// ours, altered or unreadable is a `400` page. Tokens do not expire: a mail read months later
/// still unsubscribes (and rotating the keys retires old links, docs/mail.md).
public enum UnsubscribeRoutes {
    static let path = "/mail/unsubscribe"
    /// The pages' media type, for the OpenAPI document.
    static let html = SuccessResponse.other(mediaType: "text/html", schema: .object(["type": .string("string")]))

    public static func routes(client: PostgresClient, links: UnsubscribeLink, inline: InlineProjections = InlineProjections()) -> [Route] {
        let query = [QueryParameter("token", Schema.string(maximumLength: UnsubscribeLink.maximumTokenLength), "The link's signed token.")]
        return [
            Route(
                .get, path, access: .open,
                describedAs: RouteDescription(
                    "A page asking to confirm that a mail's category is no longer mailed (changes nothing: link checkers open links).",
                    query: query, responses: [200: Self.html])
            ) { context in
                let language = Language.negotiate(context.request.header("Accept-Language"))
                guard let (_, categories) = Self.verify(context, links) else { return Self.invalid(language) }
                let title = Self.titles(categories, language)
                let action = Self.escape(Self.path + "?token=" + (context.query("token") ?? ""))
                return Self.page(
                    language, status: 200, heading: Texts.words(Texts.confirm, language).replacingOccurrences(of: "%@", with: title),
                    body: "<form method=\"post\" action=\"\(action)\"><button type=\"submit\">\(Texts.words(Texts.button, language))</button></form>")
            },
            Route(
                .post, path, access: .open,
                describedAs: RouteDescription(
                    "Turns the token's category's e-mail off for its person (RFC 8058 one-click: the body List-Unsubscribe=One-Click is accepted and not required).",
                    query: query, responses: [200: Self.html])
            ) { context in
                let language = Language.negotiate(context.request.header("Accept-Language"))
                guard let (person, categories) = Self.verify(context, links) else { return Self.invalid(language) }
                let metadata = EventMetadata(origin: .web, actor: "person:\(person)", correlationId: context.requestId, service: "inbox")
                try client.withConnectionBlocking { connection in
                    var stored: [String: Bool] = [:]
                    for row in try connection.query(
                        "SELECT category, enabled FROM notification_preferences WHERE person_id = $1 AND category = ANY($2::text[]) AND channel = 'email'",
                        person, categories.map(\.rawValue))
                    {
                        stored[try row.decode(String.self, "category")] = try row.decode(Bool.self, "enabled")
                    }
                    // One event per category still on; a switch already off appends nothing.
                    let changes = try categories.filter { PreferenceRules.isEnabled($0, .email, stored: stored[$0.rawValue]) }.map {
                        try NewEvent(NotificationPreferenceChanged(personId: person, category: $0, channel: .email, enabled: false), metadata: metadata)
                    }
                    if !changes.isEmpty { try inline.append(changes, on: connection) }
                }
                let title = Self.titles(categories, language)
                return Self.page(language, status: 200, heading: Texts.words(Texts.done, language).replacingOccurrences(of: "%@", with: title), body: "")
            },
        ]
    }

    /// The token's person and categories, nil when the token is missing, not ours, or names a
    /// category whose mail has no switch (saved searches are switched per search). The token's
    /// category field is one category or several joined with dots (`messages.security`): a mail
    /// that gathers several categories turns all of them off with its one-click header.
    static func verify(_ context: RequestContext, _ links: UnsubscribeLink) -> (String, [NotificationCategory])? {
        guard let token = context.query("token"), case .success(let link) = links.verify(token) else { return nil }
        var categories: [NotificationCategory] = []
        for name in link.category.split(separator: ".", omittingEmptySubsequences: false) {
            guard let category = NotificationCategory(rawValue: String(name)), !PreferenceRules.isManagedPerSearch(category) else { return nil }
            if !categories.contains(category) { categories.append(category) }
        }
        return categories.isEmpty ? nil : (link.personId, categories)
    }

    /// The categories' titles for a page, escaped, joined with commas.
    static func titles(_ categories: [NotificationCategory], _ language: Language) -> String {
        categories.map { Self.escape(PreferenceTexts.title($0, language)) }.joined(separator: ", ")
    }

    static func invalid(_ language: Language) -> HTTPResponse {
        page(language, status: 400, heading: Texts.words(Texts.invalid, language), body: "")
    }

    static func page(_ language: Language, status: Int, heading: String, body: String) -> HTTPResponse {
        let html = """
            <!doctype html>
            <html lang="\(language.rawValue)"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
            <meta name="robots" content="noindex"><title>Wristler</title></head>
            <body><h1>\(heading)</h1>\(body)</body></html>
            """
        return HTTPResponse(
            status: status, contentType: "text/html; charset=utf-8", body: html,
            headers: [("Cache-Control", "no-store"), ("Content-Language", language.rawValue)])
    }

    static func escape(_ text: String) -> String { HTML.escape(text) }

    /// The pages' words, in the order of `Language.allCases`: en, nl, de, fr. `%@` is the category.
    enum Texts {
        /// Each text in `language`.
        static func words(_ texts: [String], _ language: Language) -> String { texts[Language.allCases.firstIndex(of: language) ?? 0] }

        static let confirm = [
            "Stop e-mails about “%@”?", "Geen e-mails meer over “%@”?", "Keine E-Mails mehr zu „%@“?", "Ne plus recevoir d'e-mails sur « %@ » ?",
        ]
        static let button = ["Unsubscribe", "Afmelden", "Abmelden", "Se désabonner"]
        static let done = [
            "You will no longer receive e-mails about “%@”. You can turn them on again in the app's notification settings.",
            "Je ontvangt geen e-mails meer over “%@”. Je kunt ze weer aanzetten in de meldingsinstellingen van de app.",
            "Du erhältst keine E-Mails mehr zu „%@“. Du kannst sie in den Mitteilungseinstellungen der App wieder einschalten.",
            "Vous ne recevrez plus d'e-mails sur « %@ ». Vous pouvez les réactiver dans les réglages de notifications de l'app.",
        ]
        static let invalid = [
            "This unsubscribe link is not valid. You can change which e-mails you receive in the app's notification settings.",
            "Deze afmeldlink is niet geldig. In de meldingsinstellingen van de app kies je welke e-mails je ontvangt.",
            "Dieser Abmeldelink ist ungültig. In den Mitteilungseinstellungen der App legst du fest, welche E-Mails du erhältst.",
            "Ce lien de désabonnement n'est pas valide. Choisissez les e-mails que vous recevez dans les réglages de notifications de l'app.",
        ]
    }
}
