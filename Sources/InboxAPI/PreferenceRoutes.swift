import EventLog
import Foundation
import HTTPServer
import InboxDomain
import PostgresClient
import Projections

/// `GET` and `PATCH /v1/me/notification-preferences`: every category's push and email switch
/// (locks applied), and labels in the language of `Accept-Language`. Each change is an event.
public enum PreferenceRoutes {
    static let path = "/v1/me/notification-preferences"
    static let type = "notification-preferences"

    public static func routes(client: PostgresClient, inline: InlineProjections = InlineProjections()) -> [Route] {
        [
            Route(
                .get, path, access: .signedIn(scope: .accountRead),
                describedAs: RouteDescription("Every category's push and email switch, with labels in the reader's language.").returning(Self.preferences)
            ) { context in
                let person = context.person
                let stored = try Self.stored(person: person, client: client)
                return Self.response(person: person, stored: stored, context: context)
            },
            Route(
                .patch, path, access: .signedIn(scope: .accountWrite),
                describedAs: RouteDescription(
                    "Switches channels on or off; a locked channel cannot be turned off (422).", body: Self.changeSchema).returning(Self.preferences)
            ) { context in
                let data = try context.resourceDocument()
                try Documents.requireType(data, type, id: nil)
                let attributes = try Attributes(data, allowed: ["categories"])
                guard case .object(let categories)? = attributes.values["categories"] else {
                    throw APIError(
                        status: 422, code: .missingField, detail: "Send attributes.categories.{category}.{push,email}.",
                        source: Attributes.pointer("categories"))
                }
                var changes: [NotificationPreferenceChanged] = []
                let person = context.person
                for name in categories.keys.sorted() {
                    let pointer = "/data/attributes/categories/\(name)"
                    guard let category = NotificationCategory(rawValue: name) else {
                        throw APIError(
                            status: 422, code: .unknownField, detail: "\(APIError.echoed(name)) is not a notification category.",
                            source: .member(name, of: "/data/attributes/categories"))
                    }
                    guard case .object(let channels)? = categories[name] else {
                        throw APIError(status: 422, code: .invalidField, detail: "\(name) must be an object of push and email.", source: .pointer(pointer))
                    }
                    for channelName in channels.keys.sorted() {
                        let channelPointer = "\(pointer)/\(channelName)"
                        guard let channel = NotificationChannel(rawValue: channelName) else {
                            throw APIError(
                                status: 422, code: .unknownField, detail: "\(APIError.echoed(channelName)) is not a channel: push or email.",
                                source: .member(channelName, of: pointer))
                        }
                        guard case .bool(let enabled)? = channels[channelName] else {
                            throw APIError(status: 422, code: .invalidField, detail: "\(name).\(channelName) must be true or false.", source: .pointer(channelPointer))
                        }
                        if PreferenceRules.isManagedPerSearch(category) {
                            throw APIError(
                                status: 422, code: .managedPerSearch,
                                detail: "Saved searches are set per search (interval and push at /v1/me/saved-searches).", source: .pointer(channelPointer))
                        }
                        if PreferenceRules.isLocked(category, channel) && !enabled {
                            throw APIError(
                                status: 422, code: .locked,
                                detail: PreferenceTexts.lockedNote(category, Language.negotiate(context.request.header("Accept-Language"))),
                                source: .pointer(channelPointer))
                        }
                        if PreferenceRules.isLocked(category, channel) { continue }  // on, and staying on
                        changes.append(NotificationPreferenceChanged(personId: person, category: category, channel: channel, enabled: enabled))
                    }
                }
                let metadata = context.eventMetadata
                let appended = changes
                var stored = try client.withConnectionBlocking { connection in
                    if !appended.isEmpty { try inline.append(try appended.map { try NewEvent($0, metadata: metadata) }, on: connection) }
                    return try Self.stored(person: person, on: connection)
                }
                // What this request set is what it answers, also when the projection takes it a moment later.
                for change in changes { stored[Key(category: change.category, channel: change.channel)] = change.enabled }
                return Self.response(person: person, stored: stored, context: context)
            },
        ]
    }

    /// `categories.{category}.{push,email}`: booleans of the categories that have switches
    /// (not saved searches, set per search); a locked channel only true.
    static var changeSchema: JSONValue {
        func channels(_ category: NotificationCategory) -> JSONValue {
            Schema.object(
                Dictionary(
                    uniqueKeysWithValues: NotificationChannel.allCases.map {
                        ($0.rawValue, PreferenceRules.isLocked(category, $0) ? Schema.constant(true) : Schema.boolean)
                    }))
        }
        let categories = NotificationCategory.allCases.filter { !PreferenceRules.isManagedPerSearch($0) }.map { ($0.rawValue, channels($0)) }
        return Schema.resourceDocument(
            type: type, attributes: ["categories": Schema.object(Dictionary(uniqueKeysWithValues: categories))], required: ["categories"])
    }

    struct Key: Hashable {
        let category: NotificationCategory
        let channel: NotificationChannel
    }

    static func stored(person: String, client: PostgresClient) throws -> [Key: Bool] {
        try client.withConnectionBlocking(retryIfFoundDead: true) { connection in try stored(person: person, on: connection) }
    }

    static func stored(person: String, on connection: PostgresConnection) throws -> [Key: Bool] {
        var result: [Key: Bool] = [:]
        for row in try connection.query("SELECT category, channel, enabled FROM notification_preferences WHERE person_id = $1", person) {
            guard let category = NotificationCategory(rawValue: try row.decode(String.self, "category")),
                let channel = NotificationChannel(rawValue: try row.decode(String.self, "channel"))
            else { continue }
            result[Key(category: category, channel: channel)] = try row.decode(Bool.self, "enabled")
        }
        return result
    }

    static func response(person: String, stored: [Key: Bool], context: RequestContext) -> HTTPResponse {
        let language = Language.negotiate(context.request.header("Accept-Language"))
        var categories: [String: JSONValue] = [:]
        var labels: [String: JSONValue] = [:]
        for category in NotificationCategory.allCases {
            var label: [String: JSONValue] = ["title": .string(PreferenceTexts.title(category, language))]
            if PreferenceRules.isManagedPerSearch(category) {
                categories[category.rawValue] = .object(["push": .null, "email": .null])
                label["managedPerSearch"] = .bool(true)
            } else {
                var channels: [String: JSONValue] = [:]
                for channel in NotificationChannel.allCases {
                    channels[channel.rawValue] = .bool(
                        PreferenceRules.isEnabled(category, channel, stored: stored[Key(category: category, channel: channel)]))
                }
                categories[category.rawValue] = .object(channels)
            }
            if let note = PreferenceTexts.lockedNote(category, language) {
                label["lockedNote"] = .string(note)
                label["locked"] = .array(NotificationChannel.allCases.filter { PreferenceRules.isLocked(category, $0) }.map { .string($0.rawValue) })
            }
            labels[category.rawValue] = .object(label)
        }
        var response = Documents.response([
            "data": .object([
                "type": .string(type), "id": .string(person),
                "attributes": .object(["categories": .object(categories), "labels": .object(labels)]),
            ])
        ])
        response.headers.append(("Content-Language", language.rawValue))
        return response
    }
}

extension PreferenceRoutes {
    /// Every category's channels (null where each saved search decides) and its labels.
    static let preferences = Schema.single(
        Schema.resource(
            "NotificationPreferences", type: type,
            attributes: [
                "categories": .object([
                    "type": .string("object"),
                    "additionalProperties": Schema.record(["push": Schema.nullable(Schema.boolean), "email": Schema.nullable(Schema.boolean)]),
                ]),
                "labels": .object([
                    "type": .string("object"),
                    "additionalProperties": Schema.record(
                        ["title": Schema.text, "locked": Schema.array(Schema.text), "lockedNote": Schema.text, "managedPerSearch": Schema.boolean],
                        optional: ["locked", "lockedNote", "managedPerSearch"]),
                ]),
            ]))
}
