import Crypto
import EventLog
import Foundation
import HTTPServer
import InboxDomain
import JSONParsing
import PostgresClient
import Projections

/// `/v1/me/saved-searches`: list (numbered pages), create, get, change, delete. Each search has a
/// name, the search itself (an object the catalogue tier understands, stored as given), how often
/// it mails (`interval`) and whether it pushes (`push`). Every change is an event, projected inline.
public enum SavedSearchRoutes {
    static let path = "/v1/me/saved-searches"
    static let type = "saved-searches"
    static let attributes: Set<String> = ["name", "query", "interval", "push"]
    static let intervals = SavedSearchInterval.allCases.map(\.rawValue)

    /// The attributes as the handlers validate them.
    static let schemas: [String: JSONValue] = [
        "name": Schema.string(maximumLength: 100, pattern: "^[^\\u0000-\\u001F\\u007F-\\u009F]+$"),
        "query": .object([
            "allOf": .array([Schema.objectWithoutNUL]), "description": .string("The search, as the catalogue tier understands it (at most 16 KiB)."),
        ]),
        "interval": Schema.choice(intervals).adding("default", .string("daily")), "push": Schema.boolean.adding("default", .bool(true)),
    ]

    public static func routes(client: PostgresClient, inline: InlineProjections = InlineProjections()) -> [Route] {
        [
            Route(
                .get, path, access: .signedIn(scope: .accountRead),
                describedAs: RouteDescription("The person's saved searches, in numbered pages.", query: QueryParameter.numberedPage).returning(Schema.list(Self.search))
            ) { context in
                let (number, size) = try context.numberedPage()
                let person = context.person
                let rows = try client.queryBlocking(
                    """
                    SELECT * FROM saved_searches WHERE person_id = $1 AND NOT deleted
                    ORDER BY created_at, saved_search_id LIMIT $2 OFFSET $3
                    """, binds: [PostgresBind(person), PostgresBind(Int64(size + 1)), PostgresBind(Int64((number - 1) * size))],
                    retryIfFoundDead: true
                ) { try SavedSearch(row: $0) }
                var links: [String: JSONValue] = ["self": Documents.link(path, [("page[number]", String(number)), ("page[size]", String(size))])]
                if rows.count > size { links["next"] = Documents.link(path, [("page[number]", String(number + 1)), ("page[size]", String(size))]) }
                return Documents.response(["data": .array(rows.prefix(size).map(\.resource)), "links": .object(links)])
            },
            Route(
                .post, path, access: .signedIn(scope: .accountWrite),
                describedAs: RouteDescription(
                    "Saves a search (name, query, interval, push).",
                    body: Schema.resourceDocument(type: type, attributes: Self.schemas, required: ["name", "query"]), responses: [201: .document(Schema.document)]).returning(Schema.single(Self.search))
            ) { context in
                let data = try context.resourceDocument()
                try Documents.requireType(data, type, id: nil)
                let attributes = try Attributes(data, allowed: Self.attributes)
                let name = try attributes.string("name", required: true, maximumLength: 100)!
                let query = try Self.query(attributes, required: true)!
                let interval = SavedSearchInterval(rawValue: try attributes.choice("interval", Self.intervals) ?? "daily")!
                let push = try attributes.bool("push") ?? true
                let event = SavedSearchCreated(
                    savedSearchId: RandomUUID.string(), personId: context.person, name: name, query: query, interval: interval, push: push)
                let recorded = try context.appendInline([event], client: client, inline: inline)[0].event.recordedAt
                let search = SavedSearch(
                    id: event.savedSearchId, name: name, query: query, interval: interval.rawValue, push: push, createdAt: recorded, updatedAt: recorded)
                return Documents.response(status: 201, ["data": search.resource]).locating(path + "/" + Documents.pathSegment(search.id))
            },
            Route(.get, path + "/{id}", access: .signedIn(scope: .accountRead), describedAs: RouteDescription("One saved search.").returning(Schema.single(Self.search))) { context in
                let id = context.parameters["id"] ?? ""
                let person = context.person
                guard let search = try Self.find(id: id, person: person, client: client) else { throw Self.notFound() }
                return Documents.response(["data": search.resource])
            },
            Route(
                .patch, path + "/{id}", access: .signedIn(scope: .accountWrite),
                describedAs: RouteDescription("Changes a saved search.", body: Schema.resourceDocument(type: type, attributes: Self.schemas, id: true)).returning(Schema.single(Self.search))
            ) { context in
                let id = context.parameters["id"] ?? ""
                let data = try context.resourceDocument()
                try Documents.requireType(data, type, id: id)
                let attributes = try Attributes(data, allowed: Self.attributes)
                let change = SavedSearchChanged(
                    savedSearchId: id, personId: context.person, name: try attributes.string("name", maximumLength: 100),
                    query: try Self.query(attributes, required: false),
                    interval: try attributes.choice("interval", Self.intervals).flatMap(SavedSearchInterval.init(rawValue:)),
                    push: try attributes.bool("push"))
                let person = context.person
                let metadata = context.eventMetadata
                let updated = try client.withConnectionBlocking { connection -> SavedSearch? in
                    guard var search = try Self.find(id: id, person: person, on: connection) else { return nil }
                    let recorded = try inline.append([try NewEvent(change, metadata: metadata)], on: connection)[0].event.recordedAt
                    // What this request set, also when the projection takes it a moment later.
                    if let name = change.name { search.name = name.text }
                    if let query = change.query { search.query = query }
                    if let interval = change.interval { search.interval = interval.rawValue }
                    if let push = change.push { search.push = push }
                    search.updatedAt = recorded
                    return search
                }
                guard let updated else { throw Self.notFound() }
                return Documents.response(["data": updated.resource])
            },
            Route(.delete, path + "/{id}", access: .signedIn(scope: .accountWrite), describedAs: .noContent("Deletes a saved search.")) { context in
                let id = context.parameters["id"] ?? ""
                let person = context.person
                let metadata = context.eventMetadata
                let found = try client.withConnectionBlocking { connection -> Bool in
                    guard try Self.find(id: id, person: person, on: connection) != nil else { return false }
                    try inline.append([try NewEvent(SavedSearchDeleted(savedSearchId: id, personId: person), metadata: metadata)], on: connection)
                    return true
                }
                guard found else { throw Self.notFound() }
                return Documents.noContent
            },
        ]
    }

    static func query(_ attributes: Attributes, required: Bool) throws(APIError) -> JSONValue? {
        switch attributes.values["query"] {
        case nil, .null?:
            if required {
                throw APIError(status: 422, code: .missingField, detail: "The query field is required.", source: Attributes.pointer("query"))
            }
            return nil
        case .object(let members)?:
            guard JSONAPI.bytes(.object(members)).count <= 16_384 else {
                throw APIError(status: 422, code: .invalidField, detail: "query is larger than 16 KiB.", source: Attributes.pointer("query"))
            }
            guard JSONValue.object(members).nesting <= Schema.freeFormNesting else {
                throw APIError(
                    status: 422, code: .invalidField, detail: "query nests objects and arrays more than \(Schema.freeFormNesting) deep.",
                    source: Attributes.pointer("query"))
            }
            return .object(members)
        default:
            throw APIError(status: 422, code: .invalidField, detail: "query must be an object.", source: Attributes.pointer("query"))
        }
    }

    static func notFound() -> APIError { APIError(status: 404, code: .notFound, detail: "You have no such saved search.") }

    static func find(id: String, person: String, client: PostgresClient) throws -> SavedSearch? {
        try client.withConnectionBlocking(retryIfFoundDead: true) { connection in try find(id: id, person: person, on: connection) }
    }

    static func find(id: String, person: String, on connection: PostgresConnection) throws -> SavedSearch? {
        try connection.query("SELECT * FROM saved_searches WHERE saved_search_id = $1 AND person_id = $2 AND NOT deleted", id, person)
            .first.map(SavedSearch.init(row:))
    }
}

struct SavedSearch: Sendable {
    var id: String
    /// Nil when erased: its person's data key is gone.
    var name: String?
    var query: JSONValue
    var interval: String
    var push: Bool
    var createdAt: Date
    var updatedAt: Date

    init(id: String, name: String?, query: JSONValue, interval: String, push: Bool, createdAt: Date, updatedAt: Date) {
        self.id = id
        self.name = name
        self.query = query
        self.interval = interval
        self.push = push
        self.createdAt = createdAt
        self.updatedAt = updatedAt
    }

    init(row: PostgresRow) throws {
        id = try row.decode(String.self, "saved_search_id")
        name = try row.decode(String?.self, "name")
        query = (try? JSONValue(parsing: try row.decode(PostgresRawJSON.self, "query").text)) ?? .object([:])
        interval = try row.decode(String.self, "interval")
        push = try row.decode(Bool.self, "push")
        createdAt = try row.decode(Date.self, "created_at")
        updatedAt = try row.decode(Date.self, "updated_at")
    }

    var resource: JSONValue {
        var resource: [String: JSONValue] = [
            "type": .string(SavedSearchRoutes.type), "id": .string(id),
            "attributes": .object([
                "name": name.map(JSONValue.string) ?? .null, "query": query, "interval": .string(interval), "push": .bool(push),
                "createdAt": Documents.timestamp(createdAt), "updatedAt": Documents.timestamp(updatedAt),
            ]),
        ]
        if name == nil { resource["meta"] = .object(["erased": .bool(true)]) }
        return .object(resource)
    }
}

extension SavedSearchRoutes {
    /// A saved search; its name is null once its owner's personal data is erased.
    static let search = Schema.resource(
        "SavedSearch", type: type,
        attributes: [
            "name": Schema.nullable(Schema.text), "query": Schema.objectWithoutNUL, "interval": Schema.choice(intervals),
            "push": Schema.boolean, "createdAt": Schema.timestamp, "updatedAt": Schema.timestamp,
        ])
}
