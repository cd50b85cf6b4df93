import InboxDomain

/// JSON Schema of what the routes answer: JSON:API documents whose resources say their type, each
/// attribute and its type, so a client generator makes a model per resource and a fuzzer's
/// response check fails on a member the document does not list (`make fuzz`), and
/// `scripts/check-answers.py` holds every answer of the tests to it.
extension Schema {
    /// A string, of any length (what the server writes; what it reads has bounds of its own).
    public static let text: JSONValue = .object(["type": .string("string")])
    /// A date and time in RFC 3339, as `Documents.timestampText` writes it.
    public static let timestamp: JSONValue = .object(["type": .string("string"), "format": .string("date-time")])
    /// A whole number.
    public static let wholeNumber: JSONValue = .object(["type": .string("integer")])
    /// A link: a path of this server with its query, or an absolute URL.
    public static let link: JSONValue = .object(["type": .string("string")])

    /// `schema` or null.
    public static func nullable(_ schema: JSONValue) -> JSONValue {
        .object(["anyOf": .array([schema, .object(["type": .string("null")])])])
    }

    /// An array of `items`.
    public static func array(_ items: JSONValue) -> JSONValue {
        .object(["type": .string("array"), "items": items])
    }

    /// A closed object whose members are all there but those in `optional`.
    public static func record(_ properties: [String: JSONValue], optional: Set<String> = []) -> JSONValue {
        object(properties, required: properties.keys.filter { !optional.contains($0) })
    }

    /// A relationship (JSON:API "Relationships"): its resource linkage (`type`, `id`) when
    /// `linkage` names the related type, and its `related` link when `related` is true.
    public static func relationship(linkage: String?, nullable: Bool = false, related: Bool) -> JSONValue {
        var properties: [String: JSONValue] = [:]
        var required: [String] = []
        if let linkage {
            let identifier = record(["type": .object(["type": .string("string"), "const": .string(linkage)]), "id": text])
            properties["data"] = nullable ? Self.nullable(identifier) : identifier
            required.append("data")
        }
        if related {
            properties["links"] = record(["related": link])
            required.append("links")
        }
        return object(properties, required: required)
    }

    /// A resource object of `type` (JSON:API "Resource Objects"), named `title` among the
    /// document's components: its attributes all there but those in `optional`, and no others.
    public static func resource(
        _ title: String, type: String, attributes: [String: JSONValue], optional: Set<String> = [], relationships: [String: JSONValue] = [:],
        meta: JSONValue? = nil, links: Bool = false
    ) -> JSONValue {
        var properties: [String: JSONValue] = ["type": .object(["type": .string("string"), "const": .string(type)]), "id": text, "attributes": record(attributes, optional: optional)]
        var required = ["type", "id", "attributes"]
        if !relationships.isEmpty {
            properties["relationships"] = record(relationships)
            required.append("relationships")
        }
        if let meta { properties["meta"] = meta }
        if links { properties["links"] = record(["self": link]) }
        guard case .object(var schema) = object(properties, required: required) else { preconditionFailure("an object schema") }
        schema["title"] = .string(title)
        return .object(schema)
    }

    /// The `jsonapi` member every document carries.
    static let version: JSONValue = record(["version": text])

    /// A document whose `data` is one resource of `resource`, with `included` resources and `meta` when given.
    public static func single(_ resource: JSONValue, included: JSONValue? = nil, meta: JSONValue? = nil) -> JSONValue {
        var properties: [String: JSONValue] = ["data": resource, "jsonapi": version]
        if let included { properties["included"] = array(included) }
        if let meta { properties["meta"] = meta }
        return record(properties, optional: ["included", "jsonapi"])
    }

    /// A document whose `data` is a page of `resource`, with its `links` (`self`, and `next` of a
    /// cursor page or `first`, `prev`, `next`, `last` of a numbered one) and `meta` when given.
    /// A list that is never paged has no `links`.
    public static func list(_ resource: JSONValue, meta: JSONValue? = nil, links: Bool = true) -> JSONValue {
        var properties: [String: JSONValue] = ["data": array(resource), "jsonapi": version]
        if links {
            properties["links"] = .object([
                "type": .string("object"), "required": .array([.string("self")]), "additionalProperties": nullable(link),
            ])
        }
        if let meta { properties["meta"] = meta }
        return record(properties, optional: ["jsonapi"])
    }
}
