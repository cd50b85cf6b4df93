import EventLog
import Foundation
import HTTPServer
import InboxDomain
import PostgresClient
import Projections

/// The bell (devices-and-push page): list in cursor pages, mark one or all read, clear one or all.
/// Every change is an event in the log, projected inline so the next read shows it.
public enum BellRoutes {
    public static func routes(client: PostgresClient, inline: InlineProjections = InlineProjections()) -> [Route] {
        [
            Route("GET", "/v1/me/notifications", access: .signedIn(scope: "account:read")) { context in
                let limit = try context.pageLimit()
                let cursor = try context.pageCursor()
                let unread = try context.booleanQuery("filter[unread]")
                let person = context.person
                let (page, unreadCount) = try Blocking.run {
                    try await client.withConnection { connection in
                        (
                            try BellReader.page(person: person, unread: unread, after: cursor, limit: limit, on: connection),
                            try BellReader.unreadCount(person: person, on: connection)
                        )
                    }
                }
                var links: [String: JSONValue] = [
                    "self": Documents.link(
                        "/v1/me/notifications",
                        [("filter[unread]", unread.map { String($0) }), ("page[limit]", String(limit)), ("page[cursor]", cursor?.token)])
                ]
                if let next = page.next {
                    links["next"] = Documents.link(
                        "/v1/me/notifications", [("filter[unread]", unread.map { String($0) }), ("page[limit]", String(limit)), ("page[cursor]", next.token)])
                }
                return Documents.response([
                    "data": .array(page.rows.map(resource)), "meta": .object(["unread": .integer(Int64(unreadCount))]), "links": .object(links),
                ])
            },
            Route("PATCH", "/v1/me/notifications/{id}", access: .signedIn(scope: "account:write")) { context in
                let id = context.parameters["id"] ?? ""
                let data = try context.resourceDocument()
                try requireType(data, "notifications", id: id)
                guard case .object(let attributes)? = data["attributes"], let read = attributes["read"] else {
                    throw APIError(status: 422, code: "missing_field", detail: "Send attributes.read: true.", source: .pointer("/data/attributes/read"))
                }
                guard read == .bool(true) else {
                    throw APIError(
                        status: 422, code: "invalid_field", detail: "A notification can only be marked read (read: true).",
                        source: .pointer("/data/attributes/read"))
                }
                let person = context.person
                let metadata = context.eventMetadata
                let entry = try Blocking.run {
                    try await client.withConnection { connection -> BellEntry? in
                        guard try BellReader.entry(id: id, person: person, on: connection) != nil else { return nil }
                        try inline.append([try NewEvent(NotificationRead(personId: person, notificationId: id), metadata: metadata)], on: connection)
                        return try BellReader.entry(id: id, person: person, on: connection)
                    }
                }
                guard let entry else { throw notFound(id) }
                return Documents.response(["data": resource(entry)])
            },
            Route("POST", "/v1/me/notifications/read", access: .signedIn(scope: "account:write")) { context in
                let person = context.person
                let metadata = context.eventMetadata
                _ = try Blocking.run {
                    try await client.withConnection { connection in
                        try inline.append([try NewEvent(AllNotificationsRead(personId: person), metadata: metadata)], on: connection)
                    }
                }
                return Documents.noContent
            },
            Route("DELETE", "/v1/me/notifications/{id}", access: .signedIn(scope: "account:write")) { context in
                let id = context.parameters["id"] ?? ""
                let person = context.person
                let metadata = context.eventMetadata
                let found = try Blocking.run {
                    try await client.withConnection { connection -> Bool in
                        guard try BellReader.entry(id: id, person: person, on: connection) != nil else { return false }
                        try inline.append([try NewEvent(NotificationDeleted(personId: person, notificationId: id), metadata: metadata)], on: connection)
                        return true
                    }
                }
                guard found else { throw notFound(id) }
                return Documents.noContent
            },
            Route("DELETE", "/v1/me/notifications", access: .signedIn(scope: "account:write")) { context in
                let person = context.person
                let metadata = context.eventMetadata
                _ = try Blocking.run {
                    try await client.withConnection { connection in
                        try inline.append([try NewEvent(AllNotificationsDeleted(personId: person), metadata: metadata)], on: connection)
                    }
                }
                return Documents.noContent
            },
        ]
    }

    static func resource(_ entry: BellEntry) -> JSONValue {
        .object([
            "type": .string("notifications"), "id": .string(entry.id),
            "attributes": .object([
                "type": .string(entry.category), "event": .string(entry.event),
                "ids": .object(entry.ids.mapValues { .string($0) }), "read": .bool(entry.isRead),
                "readAt": entry.readAt.map(Documents.timestamp) ?? .null, "createdAt": Documents.timestamp(entry.createdAt),
            ]),
        ])
    }

    /// Somebody else's notification, or none: 404 either way (ids cannot be probed).
    static func notFound(_ id: String) -> APIError {
        APIError(status: 404, code: "not_found", detail: "You have no notification \(id).")
    }

    /// JSON:API: a resource of another type, or another id than the URL's, is a 409.
    static func requireType(_ data: [String: JSONValue], _ type: String, id: String?) throws(APIError) {
        guard data["type"] == .string(type) else {
            throw APIError(status: 409, code: "type_mismatch", detail: "data.type must be \(type).", source: .pointer("/data/type"))
        }
        if let id, let given = data["id"], given != .string(id) {
            throw APIError(status: 409, code: "id_mismatch", detail: "data.id must be the id in the URL, \(id).", source: .pointer("/data/id"))
        }
    }
}
