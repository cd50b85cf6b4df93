import EventLog
import Foundation
import HTTPServer
import InboxDomain
import PostgresClient

/// `POST /internal/v1/events`: other tiers append batches of events of the catalogue
/// (docs/events.md). A batch is all or nothing; an invalid event makes the whole batch a 422
/// pointing at it (`/data/3/attributes/payload/offer/amount`); idempotency keys make retries safe.
///
/// ```
/// {"data": [{"type": "events", "attributes": {"stream": "order-o1", "eventType": "order_paid",
///   "payload": {...}, "idempotencyKey": "orders:o1:paid", "schemaVersion": 1,
///   "metadata": {"origin": "app:ios", "appVersion": "2.4.0", "actor": "...", "correlationId": "..."}}}]}
/// ```
///
/// The event's type is `eventType`: JSON:API forbids an attribute named `type`. The name it had
/// before, `type`, is still read from requests (one of the two, not both), for tiers written
/// against it; answers say `eventType`.
public enum InternalEventRoutes {
    static let maximumBatch = 1000

    public static func routes(store: EventStore) -> [Route] {
        [
            Route(
                .post, "/internal/v1/events", access: .service,
                describedAs: RouteDescription(
                    "Other tiers append a batch of catalogue events, all or nothing (service credential).", body: Self.batchSchema,
                    responses: [200: .document(Schema.document), 201: .document(Schema.document)]).returning(Self.appended)
            ) { context in
                guard !context.request.body.isEmpty else {
                    throw APIError(status: 400, code: .malformedJSON, detail: "The body is not valid JSON.", source: .pointer(""))
                }
                let document = try context.jsonBody()
                guard case .array(let items)? = document["data"] else {
                    throw APIError(status: 400, code: .invalidDocument, detail: "data must be an array of events.", source: .pointer("/data"))
                }
                guard (1...maximumBatch).contains(items.count) else {
                    throw APIError(
                        status: 422, code: .invalidBatch, detail: "A batch holds 1 to \(maximumBatch) events.", source: .pointer("/data"))
                }
                let service = context.service ?? "unknown"
                var events: [NewEvent] = []
                for (index, item) in items.enumerated() {
                    events.append(try Self.event(item, index: index, service: service, requestId: context.correlationId))
                }
                let batch = events
                let appended: [AppendedEvent]
                do {
                    appended = try store.client.withConnectionBlocking { connection in
                        try EventStore.append(batch, validator: store.validator, on: connection)
                    }
                } catch let error as EventLogError {
                    switch error {
                    case .invalidEvent(let index, let field, let reason):
                        throw APIError(
                            status: 422, code: .invalidEvent, detail: "Event \(index): \(field) \(reason).",
                            source: .pointer("/data/\(index)/attributes/" + field.replacingOccurrences(of: ".", with: "/")))
                    case .wrongExpectedVersion(let stream, let expected, let actual):
                        throw APIError(
                            status: 409, code: .wrongExpectedVersion,
                            detail: "Stream \(stream) is at version \(actual), not \(expected); nothing was appended.")
                    case .idempotencyKeyReused(let index, let key):
                        throw APIError(
                            status: 409, code: .idempotencyKeyReused,
                            detail: "Event \(index): idempotency key \(key) was already used for another event (stream, type or payload differ); nothing was appended.",
                            source: .pointer("/data/\(index)/attributes/idempotencyKey"))
                    }
                }
                let data: [JSONValue] = appended.map { item in
                    .object([
                        "type": .string("events"), "id": .string(String(item.event.position)),
                        "attributes": .object([
                            "stream": .string(item.event.streamId), "eventType": .string(item.event.type),
                            "version": .integer(item.event.streamVersion), "appended": .bool(item.wasAppended),
                            "recordedAt": Documents.timestamp(item.event.recordedAt),
                        ]),
                    ])
                }
                return Documents.response(status: appended.contains(where: \.wasAppended) ? 201 : 200, ["data": .array(data)])
            }
        ]
    }

    /// A batch of 1 to `maximumBatch` events; each payload must be of its type's shape in the
    /// catalogue (docs/events.md), which the event log checks (422 pointing at the field).
    static var batchSchema: JSONValue {
        let metadata = Schema.object([
            "origin": Schema.choice(["app:ios", "app:android", "web", "api"]), "appVersion": Schema.stringWithoutNUL,
            "actor": Schema.stringWithoutNUL, "correlationId": Schema.stringWithoutNUL, "causationId": Schema.stringWithoutNUL,
        ])
        let attributes = Schema.object(
            [
                "stream": Schema.string(maximumLength: 200, pattern: "^[^\\u0000]*$"), "eventType": Schema.string(maximumLength: 200, pattern: "^[^\\u0000]*$"),
                "payload": Schema.objectWithoutNUL,
                "schemaVersion": Schema.integer(1...1000), "idempotencyKey": Schema.stringWithoutNUL, "metadata": metadata,
            ], required: ["stream", "eventType", "payload"])
        let event = Schema.object(["type": .object(["type": .string("string"), "const": .string("events")]), "attributes": attributes], required: ["type", "attributes"])
        return Schema.object(
            ["data": .object(["type": .string("array"), "minItems": .integer(1), "maxItems": .integer(Int64(maximumBatch)), "items": event])],
            required: ["data"])
    }

    static func event(_ item: JSONValue, index: Int, service: String, requestId: String) throws(APIError) -> NewEvent {
        let base = "/data/\(index)"
        func refuse(_ field: String, _ detail: String) -> APIError {
            APIError(status: 422, code: .invalidEvent, detail: "Event \(index): \(detail)", source: .pointer("\(base)/attributes/\(field)"))
        }
        guard case .object(let resource) = item, resource["type"] == .string("events"),
            case .object(let attributes)? = resource["attributes"]
        else {
            throw APIError(status: 422, code: .invalidEvent, detail: "Each item is {type: events, attributes: {...}}.", source: .pointer(base))
        }
        let known: Set<String> = ["stream", "eventType", "type", "payload", "schemaVersion", "idempotencyKey", "metadata"]
        if let unknown = attributes.keys.sorted().first(where: { !known.contains($0) }) {
            throw refuse(unknown, "\(unknown) is not an attribute of an event.")
        }
        guard case .string(let stream)? = attributes["stream"] else { throw refuse("stream", "stream is required (a string).") }
        if attributes["eventType"] != nil && attributes["type"] != nil {
            throw refuse("type", "type is the former name of eventType: send one of them.")
        }
        let typeName = attributes["type"] != nil ? "type" : "eventType"
        guard case .string(let type)? = attributes[typeName] else { throw refuse(typeName, "eventType is required (a string).") }
        guard case .object(let payload)? = attributes["payload"] else { throw refuse("payload", "payload is required (an object).") }
        guard JSONValue.object(payload).nesting <= Schema.freeFormNesting else {
            throw refuse("payload", "payload nests objects and arrays more than \(Schema.freeFormNesting) deep.")
        }
        var schemaVersion = 1
        if let value = attributes["schemaVersion"] {
            guard let number = value.integerValue, (1...1000).contains(number) else { throw refuse("schemaVersion", "schemaVersion is a whole number from 1.") }
            schemaVersion = Int(number)
        }
        var key: String?
        if let value = attributes["idempotencyKey"] {
            guard case .string(let text) = value else { throw refuse("idempotencyKey", "idempotencyKey is a string.") }
            key = text
        }
        var metadata = EventMetadata(origin: .api, correlationId: requestId, service: service)
        if let value = attributes["metadata"] {
            guard case .object(let fields) = value else { throw refuse("metadata", "metadata is an object.") }
            for (name, field) in fields {
                guard case .string(let text) = field else { throw refuse("metadata/\(name)", "metadata.\(name) is a string.") }
                switch name {
                case "origin":
                    guard let origin = Origin(rawValue: text) else { throw refuse("metadata/origin", "origin is app:ios, app:android, web or api.") }
                    metadata.origin = origin
                case "appVersion": metadata.appVersion = text
                case "actor": metadata.actor = text
                case "correlationId": metadata.correlationId = text
                case "causationId": metadata.causationId = text
                default: throw refuse("metadata/\(name)", "\(name) is not a metadata field.")
                }
            }
        }
        return NewEvent(
            streamId: stream, type: type, schemaVersion: schemaVersion, payloadJSON: JSONAPI.encode(.object(payload)), metadata: metadata,
            idempotencyKey: key)
    }
}

extension InternalEventRoutes {
    /// Each event of the batch, appended now or found under its idempotency key.
    static let appended = Schema.list(
        Schema.resource(
            "AppendedEvent", type: "events",
            attributes: [
                "stream": Schema.text, "eventType": Schema.text, "version": Schema.wholeNumber, "appended": Schema.boolean, "recordedAt": Schema.timestamp,
            ]), links: false)
}
