import EventLog
import Foundation
import HTTPServer
import InboxDomain
import PlantedSlowdown
import PostgresClient
import Projections

/// The bell (devices-and-push page): list in cursor pages, mark one or all read, clear one or all.
/// Every change is an event in the log, projected inline so the next read shows it. With a `cache`,
/// pages are answered from memory while they are current (see `BellCache`).
public enum BellRoutes {
    public static func routes(client: PostgresClient, inline: InlineProjections = InlineProjections(), cache: BellCache? = nil) -> [Route] {
        [
            Route(
                .get, "/v1/me/notifications", access: .signedIn(scope: .accountRead),
                describedAs: RouteDescription(
                    "The bell: notifications about the person, newest first, in cursor pages; meta.unread.",
                    query: QueryParameter.cursorPage + [QueryParameter("filter[unread]", Schema.choice(["true", "false"]), "Only unread (true) or read (false) entries.")]).returning(Self.page),
                fromMemory: { context in
                    Planted.spend(.bellPage)
                    guard let cache else { return nil }
                    let list = try ListRequest(context)
                    return cache.page(list.key).map { Self.listResponse($0, language: list.language) }
                }
            ) { context in
                let list = try ListRequest(context)
                let ticket = cache?.ticket()
                let (page, unreadCount) = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in
                    try BellReader.pageAndUnreadCount(person: list.key.person, unread: list.unread, after: list.cursor, limit: list.limit, on: connection)
                }
                let filter = list.unread.map { String($0) }
                let limit = String(list.limit)
                var links: [(String, JSONValue)] = [
                    ("self", Documents.link("/v1/me/notifications", [("filter[unread]", filter), ("page[limit]", limit), ("page[cursor]", list.key.cursor)]))
                ]
                if let next = page.next {
                    links.append(("next", Documents.link("/v1/me/notifications", [("filter[unread]", filter), ("page[limit]", limit), ("page[cursor]", next.token)])))
                }
                let body = Self.listDocument(page.rows, unread: unreadCount, links: links, language: list.language)
                cache?.keep(body, for: list.key, ticket: ticket)
                return Self.listResponse(body, language: list.language)
            },
            Route(
                .patch, "/v1/me/notifications/{id}", access: .signedIn(scope: .accountWrite),
                describedAs: RouteDescription(
                    "Marks one notification read (attributes.read: true).",
                    body: Schema.resourceDocument(type: "notifications", attributes: ["read": Schema.constant(true)], required: ["read"], id: true)).returning(Schema.single(Self.entry))
            ) { context in
                let id = context.parameters["id"] ?? ""
                let data = try context.resourceDocument()
                try Documents.requireType(data, "notifications", id: id)
                guard case .object(let attributes)? = data["attributes"], let read = attributes["read"] else {
                    throw APIError(status: 422, code: .missingField, detail: "Send attributes.read: true.", source: .pointer("/data/attributes/read"))
                }
                guard read == .bool(true) else {
                    throw APIError(
                        status: 422, code: .invalidField, detail: "A notification can only be marked read (read: true).",
                        source: .pointer("/data/attributes/read"))
                }
                let person = context.person
                let metadata = context.eventMetadata
                defer { cache?.changed(people: [person]) }
                let entry = try client.withConnectionBlocking { connection -> BellEntry? in
                    guard try BellReader.entry(id: id, person: person, on: connection) != nil else { return nil }
                    try inline.append([try NewEvent(NotificationRead(personId: person, notificationId: id), metadata: metadata)], on: connection)
                    return try BellReader.entry(id: id, person: person, on: connection)
                }
                guard let entry else { throw notFound(id) }
                return Documents.response(["data": resource(entry, language: Language.negotiate(context.request.header("Accept-Language")))])
            },
            Route(.post, "/v1/me/notifications/read", access: .signedIn(scope: .accountWrite), describedAs: .noContent("Marks every notification read.")) { context in
                defer { cache?.changed(people: [context.person]) }
                try context.appendInline([AllNotificationsRead(personId: context.person)], client: client, inline: inline)
                return Documents.noContent
            },
            Route(.delete, "/v1/me/notifications/{id}", access: .signedIn(scope: .accountWrite), describedAs: .noContent("Clears one notification.")) { context in
                let id = context.parameters["id"] ?? ""
                let person = context.person
                let metadata = context.eventMetadata
                defer { cache?.changed(people: [person]) }
                let found = try client.withConnectionBlocking { connection -> Bool in
                    guard try BellReader.entry(id: id, person: person, on: connection) != nil else { return false }
                    try inline.append([try NewEvent(NotificationDeleted(personId: person, notificationId: id), metadata: metadata)], on: connection)
                    return true
                }
                guard found else { throw notFound(id) }
                return Documents.noContent
            },
            Route(.delete, "/v1/me/notifications", access: .signedIn(scope: .accountWrite), describedAs: .noContent("Clears the bell.")) { context in
                defer { cache?.changed(people: [context.person]) }
                try context.appendInline([AllNotificationsDeleted(personId: context.person)], client: client, inline: inline)
                return Documents.noContent
            },
        ]
    }

    /// The list document, written directly: a page is the API's busiest answer, and each entry's
    /// `ids` goes out as the JSON the table holds, without being decoded and encoded again.
    /// What a list request asks for, read from its query and headers (400 naming a bad parameter).
    struct ListRequest {
        var limit: Int
        var cursor: KeysetCursor?
        var unread: Bool?
        var language: Language
        /// Everything the page depends on: whose, which part, in which language.
        var key: BellCache.Key

        init(_ context: RequestContext) throws(APIError) {
            limit = try context.pageLimit()
            cursor = try context.pageCursor()
            unread = try context.booleanQuery("filter[unread]")
            language = Language.negotiate(context.request.header("Accept-Language"))
            key = BellCache.Key(person: context.person, unread: unread, cursor: cursor?.token, limit: limit, language: language.rawValue)
        }
    }

    static func listResponse(_ body: [UInt8], language: Language) -> HTTPResponse {
        HTTPResponse(status: 200, headers: [("Content-Type", JSONAPI.mediaType), ("Content-Language", language.rawValue)], body: body)
    }

    static func listDocument(_ entries: [BellEntry], unread: Int, links: [(String, JSONValue)], language: Language) -> [UInt8] {
        var text = JSONText(capacity: 512 + entries.count * 320)
        text.raw(#"{"data":["#)
        for (index, entry) in entries.enumerated() {
            if index > 0 { text.raw(UInt8(ascii: ",")) }
            text.raw(#"{"attributes":{"category":"#)
            text.string(entry.category)
            text.raw(#","createdAt":"#)
            text.string(Documents.timestampText(entry.createdAt))
            text.raw(#","event":"#)
            text.string(entry.event)
            text.raw(#","ids":"#)
            text.raw(entry.idsJSON)
            text.raw(entry.isRead ? #","read":true,"readAt":"# : #","read":false,"readAt":null"#)
            if let readAt = entry.readAt { text.string(Documents.timestampText(readAt)) }
            text.raw(#","title":"#)
            text.string(BellTexts.title(event: entry.event, category: entry.category, language))
            text.raw(#"},"id":"#)
            text.string(entry.id)
            text.raw(#","type":"notifications"}"#)
        }
        text.raw(#"],"jsonapi":{"version":"1.0"},"links":{"#)
        for (index, (name, value)) in links.enumerated() {
            if index > 0 { text.raw(UInt8(ascii: ",")) }
            text.string(name)
            text.raw(UInt8(ascii: ":"))
            if case .string(let link) = value { text.string(link) } else { text.raw("null") }
        }
        text.raw(#"},"meta":{"unread":"#)
        text.raw(String(unread))
        text.raw("}}")
        return text.bytes
    }

    static func resource(_ entry: BellEntry, language: Language) -> JSONValue {
        .object([
            "type": .string("notifications"), "id": .string(entry.id),
            "attributes": .object([
                "category": .string(entry.category), "event": .string(entry.event),
                "ids": .object(entry.ids.mapValues { .string($0) }), "read": .bool(entry.isRead),
                "readAt": entry.readAt.map(Documents.timestamp) ?? .null, "createdAt": Documents.timestamp(entry.createdAt),
                "title": .string(BellTexts.title(event: entry.event, category: entry.category, language)),
            ]),
        ])
    }

    /// Somebody else's notification, or none: 404 either way (ids cannot be probed).
    static func notFound(_ id: String) -> APIError {
        APIError(status: 404, code: .notFound, detail: "You have no notification \(id).")
    }
}

extension BellRoutes {
    /// A bell entry as the API writes it (`listDocument`, `resource`).
    static let entry = Schema.resource(
        "Notification", type: "notifications",
        attributes: [
            "category": Schema.text, "event": Schema.text, "ids": .object(["type": .string("object"), "additionalProperties": Schema.text]),
            "read": Schema.boolean, "readAt": Schema.nullable(Schema.timestamp), "createdAt": Schema.timestamp, "title": Schema.text,
        ])
    static let page = Schema.list(entry, meta: Schema.record(["unread": Schema.wholeNumber]))
}
