import EventLog
import Encodings
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
    public static let html = SuccessResponse.other(mediaType: "text/html", schema: .object(["type": .string("string")]))

    public static func routes(client: PostgresClient, links: UnsubscribeLink, inline: InlineProjections = InlineProjections()) -> [Route] {
        let query = [QueryParameter("token", Schema.string(maximumLength: UnsubscribeLink.maximumTokenLength), "The link's signed token.")]
        return [
            Route(
                .get, path, access: .open,
                describedAs: RouteDescription(
                    "A page asking to confirm that a mail's category is no longer mailed (changes nothing: link checkers open links).",
                    query: query, responses: [200: Self.html, 400: Self.html])
            ) { context in
                let language = Language.negotiate(context.request.header("Accept-Language"))
                guard let (person, target) = Self.verify(context, links) else { return Self.invalid(language) }
                let title = try Self.title(target, of: person, language, client: client)
                let action = Self.escape(Self.path + "?token=" + (context.query("token") ?? ""))
                return Self.page(
                    language, status: 200, heading: Texts.words(Texts.confirm, language).replacingOccurrences(of: "%@", with: title),
                    body: "<form method=\"post\" action=\"\(action)\"><button type=\"submit\">\(Texts.words(Texts.button, language))</button></form>")
            },
            Route(
                .post, path, access: .open,
                describedAs: RouteDescription(
                    "Turns the token's category's e-mail off for its person (RFC 8058 one-click: the body List-Unsubscribe=One-Click is accepted and not required).",
                    query: query, responses: [200: Self.html, 400: Self.html])
            ) { context in
                let language = Language.negotiate(context.request.header("Accept-Language"))
                guard let (person, target) = Self.verify(context, links) else { return Self.invalid(language) }
                let metadata = EventMetadata(origin: .web, actor: "person:\(person)", correlationId: context.correlationId, service: "inbox")
                let title = try Self.title(target, of: person, language, client: client)
                try client.withConnectionBlocking { connection in
                    let changes: [NewEvent]
                    switch target {
                    case .categories(let categories):
                        var stored: [String: Bool] = [:]
                        for row in try connection.query(
                            "SELECT category, enabled FROM notification_preferences WHERE person_id = $1 AND category = ANY($2::text[]) AND channel = 'email'",
                            person, categories.map(\.rawValue))
                        {
                            stored[try row.decode(String.self, "category")] = try row.decode(Bool.self, "enabled")
                        }
                        // One event per category still on; a switch already off appends nothing.
                        changes = try categories.filter { PreferenceRules.isEnabled($0, .email, stored: stored[$0.rawValue]) }.map {
                            try NewEvent(NotificationPreferenceChanged(personId: person, category: $0, channel: .email, enabled: false), metadata: metadata)
                        }
                    case .search(let id):
                        // The search's own switch: its interval becomes `never` (its pushes stay as they are).
                        let mails = try connection.query(
                            "SELECT 1 FROM saved_searches WHERE saved_search_id = $1 AND person_id = $2 AND NOT deleted AND interval <> 'never'", id, person)
                        changes = mails.count == 0 ? [] : [
                            try NewEvent(SavedSearchChanged(savedSearchId: id, personId: person, interval: .never), metadata: metadata)
                        ]
                    }
                    if !changes.isEmpty { try inline.append(changes, on: connection) }
                }
                return Self.page(language, status: 200, heading: Texts.words(Texts.done, language).replacingOccurrences(of: "%@", with: title), body: "")
            },
        ]
    }

    /// What a token turns off: categories' `email` switches, or one saved search's mails.
    enum Target: Equatable {
        case categories([NotificationCategory])
        case search(String)
    }

    /// The token's person and what it turns off, nil when the token is missing, not ours, or
    /// names a category whose mail has no switch. The token's category field is one category or
    /// several joined with dots (`messages.security`: a mail that gathers several categories
    /// turns all of them off with its one-click header), or `search:<savedSearchId>` for a saved
    /// search's mail (the rest of the field is the id, dots and all).
    static func verify(_ context: RequestContext, _ links: UnsubscribeLink) -> (String, Target)? {
        guard let token = context.query("token"), case .success(let link) = links.verify(token) else { return nil }
        if link.category.hasPrefix("search:") {
            let id = String(link.category.dropFirst("search:".count))
            return id.isEmpty ? nil : (link.personId, .search(id))
        }
        var categories: [NotificationCategory] = []
        for name in link.category.split(separator: ".", omittingEmptySubsequences: false) {
            guard let category = NotificationCategory(rawValue: String(name)), !PreferenceRules.isManagedPerSearch(category) else { return nil }
            if !categories.contains(category) { categories.append(category) }
        }
        return categories.isEmpty ? nil : (link.personId, .categories(categories))
    }

    /// What a page names, escaped: the categories' titles joined with commas, or the saved
    /// search's name (a search that is gone is named as searches in general).
    static func title(_ target: Target, of person: String, _ language: Language, client: PostgresClient) throws -> String {
        switch target {
        case .categories(let categories):
            return categories.map { Self.escape(PreferenceTexts.title($0, language)) }.joined(separator: ", ")
        case .search(let id):
            let name = try client.withConnectionBlocking { connection in
                try connection.query("SELECT name FROM saved_searches WHERE saved_search_id = $1 AND person_id = $2", id, person).first?
                    .decode(String.self, "name")
            }
            return Self.escape(name ?? PreferenceTexts.title(.savedSearches, language))
        }
    }

    static func invalid(_ language: Language) -> HTTPResponse {
        page(language, status: 400, heading: Texts.words(Texts.invalid, language), body: "")
    }

    /// A small HTML page in `language`, never cached: what the mail's links open.
    public static func page(_ language: Language, status: Int, heading: String, body: String) -> HTTPResponse {
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
