import Foundation
import InboxDomain

/// What a route reads and answers, as the OpenAPI document says it: a summary, the query
/// parameters its handler reads, the JSON:API document its body must be, and its success answers.
/// Every `Route` has one (its initializer requires it), so a route cannot be served undescribed;
/// errors are the JSON:API error document on every operation.
public struct RouteDescription: Sendable {
    public var summary: String
    public var query: [QueryParameter]
    /// Headers the handler reads besides the app's and the token's (`Idempotency-Key`).
    public var headers: [QueryParameter]
    /// The JSON Schema of the request body (`application/vnd.api+json`); nil: the route reads none.
    public var body: JSONValue?
    /// The JSON Schema of a `multipart/form-data` body the route takes besides (a file upload).
    public var multipartBody: JSONValue?
    /// The JSON Schema of an `application/x-www-form-urlencoded` body (OAuth's endpoints), read
    /// instead of a JSON:API document.
    public var formBody: JSONValue?
    /// Success answers by status.
    public var responses: [Int: SuccessResponse]
    /// What its refusals are: JSON:API error documents, or OAuth's `{error, error_description}`.
    public var errors: ErrorShape

    public init(
        _ summary: String, query: [QueryParameter] = [], headers: [QueryParameter] = [], body: JSONValue? = nil, multipartBody: JSONValue? = nil,
        formBody: JSONValue? = nil, responses: [Int: SuccessResponse] = [200: .document(Schema.document)], errors: ErrorShape = .jsonAPI
    ) {
        self.summary = summary
        self.query = query
        self.headers = headers
        self.body = body
        self.multipartBody = multipartBody
        self.formBody = formBody
        self.responses = responses
        self.errors = errors
    }

    /// This description with the document of each JSON:API success answer given as `schema`
    /// (`Schema.single`, `Schema.list`), instead of any document.
    public func returning(_ schema: JSONValue) -> RouteDescription {
        var described = self
        for (status, response) in responses {
            if case .document = response { described.responses[status] = .document(schema) }
        }
        return described
    }

    /// A route answering `204 No Content`.
    public static func noContent(_ summary: String, query: [QueryParameter] = [], body: JSONValue? = nil) -> RouteDescription {
        RouteDescription(summary, query: query, body: body, responses: [204: .noContent])
    }
}

/// What a route's refusals are.
public enum ErrorShape: Sendable {
    /// A JSON:API error document (`Schema.errors`).
    case jsonAPI
    /// An `application/json` object of this schema (OAuth's RFC 6749 §5.2 shape).
    case json(JSONValue)
}

/// A success answer: nothing (204, or a 200 without a body), a redirect (`Location`), a JSON:API
/// document of a schema, or another media type.
public enum SuccessResponse: Sendable {
    case noContent
    /// A `303 See Other` (or another 3xx) to its `Location`, without a body.
    case redirect(String)
    case document(JSONValue)
    case other(mediaType: String, schema: JSONValue)
    /// Stored bytes of one of these media types (ranges such as `image/*`).
    case bytes(mediaTypes: [String])
}

/// A query parameter (`page[limit]`) or a header a handler reads, with the schema its validation enforces.
public struct QueryParameter: Sendable {
    public var name: String
    public var schema: JSONValue
    public var description: String

    public init(_ name: String, _ schema: JSONValue, _ description: String) {
        self.name = name
        self.schema = schema
        self.description = description
    }

    /// `page[limit]` and `page[cursor]` of a cursor list (`RequestContext.pageLimit`, `pageCursor`).
    public static let cursorPage: [QueryParameter] = [
        QueryParameter("page[limit]", Schema.integer(1...50), "Entries per page, 25 when absent."),
        QueryParameter("page[cursor]", Schema.string(maximumLength: 1024), "The cursor of links.next; one this server did not hand out is 400 invalid_cursor."),
    ]
    /// `X-Wristler-App` (`AppIdentity`), which the app sends on every request: on the `/v1` routes
    /// and the token endpoint.
    public static let appIdentity = QueryParameter(
        AppIdentity.headerName, .object(["type": .string("string"), "pattern": .string("^((ios|android)/[0-9]{1,6}(\\.[0-9]{1,6}){0,3})?$")]),
        "ios/<version> or android/<version> (empty: none); an app below the minimum gets 426 app_update_required.")
    /// `page[number]` and `page[size]` of a numbered list (`RequestContext.numberedPage`).
    public static let numberedPage: [QueryParameter] = [
        QueryParameter("page[number]", Schema.integer(1...1_000_000), "The page, from 1."),
        QueryParameter("page[size]", Schema.integer(1...50), "Entries per page, 25 when absent."),
    ]
}

extension JSONValue {
    /// This object schema with one more keyword (`default`, `examples`).
    func adding(_ keyword: String, _ value: JSONValue) -> JSONValue {
        guard case .object(var members) = self else { return self }
        members[keyword] = value
        return .object(members)
    }
}

/// JSON Schema (2020-12, as OpenAPI 3.1 has it) of what the routes read and write.
public enum Schema {
    public static func string(maximumLength: Int = 200, pattern: String? = nil) -> JSONValue {
        var schema: [String: JSONValue] = ["type": .string("string"), "minLength": .integer(1), "maxLength": .integer(Int64(maximumLength))]
        if let pattern { schema["pattern"] = .string(pattern) }
        return .object(schema)
    }

    /// One of `choices` (`Attributes.choice`).
    public static func choice(_ choices: [String]) -> JSONValue {
        .object(["type": .string("string"), "enum": .array(choices.map(JSONValue.string))])
    }

    public static let boolean: JSONValue = .object(["type": .string("boolean")])
    /// A boolean that may only be `value`.
    public static func constant(_ value: Bool) -> JSONValue { .object(["type": .string("boolean"), "const": .bool(value)]) }
    public static let anyObject: JSONValue = .object(["type": .string("object")])

    public static func integer(_ range: ClosedRange<Int>) -> JSONValue {
        .object(["type": .string("integer"), "minimum": .integer(Int64(range.lowerBound)), "maximum": .integer(Int64(range.upperBound))])
    }

    public static func object(_ properties: [String: JSONValue], required: [String] = [], closed: Bool = true) -> JSONValue {
        var schema: [String: JSONValue] = ["type": .string("object"), "properties": .object(properties)]
        if !required.isEmpty { schema["required"] = .array(required.sorted().map(JSONValue.string)) }
        if closed { schema["additionalProperties"] = .bool(false) }
        return .object(schema)
    }

    /// `{"data": {"type": type, "id"?: ..., "attributes": {...}}}`, the body of a create or change.
    /// `attributes` is closed (an unknown attribute is 422 unknown_field); `required` names the
    /// attributes that must be there.
    /// The document and `data` hold only the members the route reads: another member is not
    /// read, yet refused when it holds U+0000 (as every body is, `RequestContext.jsonBody`).
    /// An attribute that is not required and not a boolean may be null, which the handlers read
    /// as absent (`Attributes.string`, `choice`; a saved search's query); a boolean may not
    /// (`Attributes.bool`). `rules` adds keywords to the attributes' schema (`not`: a combination
    /// the handler refuses).
    public static func resourceDocument(
        type: String, attributes: [String: JSONValue], required: [String] = [], id: Bool = false, rules: [String: JSONValue] = [:]
    ) -> JSONValue {
        var properties = attributes
        // A boolean may not be null (`Attributes.bool`), with a default or without; one of a single
        // value (`const`) may, as absent (`ConversationRoutes.only`).
        for (name, schema) in attributes where !required.contains(name) && (schema["type"] != .string("boolean") || schema["const"] != nil) {
            properties[name] = .object(["anyOf": .array([schema, .object(["type": .string("null")])])])
        }
        guard case .object(var attributesSchema) = object(properties, required: required) else { preconditionFailure("an object schema") }
        attributesSchema.merge(rules) { _, rule in rule }
        var data: [String: JSONValue] = ["type": .object(["type": .string("string"), "const": .string(type)]), "attributes": .object(attributesSchema)]
        if id { data["id"] = .object(["type": .string("string"), "pattern": .string("^[^\\u0000]*$"), "description": .string("The id in the URL (another is 409 id_mismatch).")]) }
        return object(["data": object(data, required: required.isEmpty ? ["type"] : ["attributes", "type"])], required: ["data"])
    }

    /// Any JSON without U+0000 (PostgreSQL cannot store it; a body holding it is 422), in a name
    /// or a string: what a free-form member (a saved search's query, an event's payload) may be,
    /// nested at most `freeFormNesting` objects and arrays deep, the member itself included
    /// (deeper is 422, `JSONValue.nesting`). Written out level by level rather than as a schema
    /// that refers to itself, which client generators cannot read (openapi-python-client drops
    /// the operations using it); the deepest level holds no more objects or arrays.
    public static let jsonWithoutNUL: JSONValue = nested(0)
    /// An object of `jsonWithoutNUL` members: a free-form member.
    public static let objectWithoutNUL: JSONValue = objectWithoutNUL(members: jsonWithoutNUL)
    /// How deep a free-form member's objects and arrays may nest, itself included.
    public static let freeFormNesting = 6

    static func objectWithoutNUL(members: JSONValue) -> JSONValue {
        .object(["type": .string("object"), "propertyNames": .object(["pattern": .string("^[^\\u0000]*$")]), "additionalProperties": members])
    }

    /// The reference to the free-form JSON `level` arrays or objects deep.
    static func nested(_ level: Int) -> JSONValue {
        .object(["$ref": .string("#/components/schemas/JSONWithoutNUL" + (level == 0 ? "" : String(level)))])
    }
    /// A string without U+0000.
    public static let stringWithoutNUL: JSONValue = .object(["type": .string("string"), "pattern": .string("^[^\\u0000]*$")])

    /// Any JSON:API document this server answers with.
    public static let document: JSONValue = .object(["$ref": .string("#/components/schemas/Document")])
    /// The JSON:API error document.
    public static let errors: JSONValue = .object(["$ref": .string("#/components/schemas/Errors")])

    /// The components the references above name.
    static let components: [String: JSONValue] = freeForm.merging(fixed) { $1 }

    /// `JSONWithoutNUL`, `JSONWithoutNUL1`, ...: each level's members are the next level's, and
    /// the last (inside `freeFormNesting` - 1 containers and the member's own object) holds scalars only.
    static let freeForm: [String: JSONValue] = Dictionary(
        uniqueKeysWithValues: (0..<freeFormNesting).map { level in
            var choices: [JSONValue] = [.object(["type": .array([.string("null"), .string("boolean"), .string("number")])]), stringWithoutNUL]
            if level + 1 < freeFormNesting {
                let inner = nested(level + 1)
                choices += [.object(["type": .string("array"), "items": inner]), objectWithoutNUL(members: inner)]
            }
            return ("JSONWithoutNUL" + (level == 0 ? "" : String(level)), .object(["anyOf": .array(choices)]))
        })

    static let fixed: [String: JSONValue] = [
        "Document": .object([
            "type": .string("object"),
            "properties": .object([
                "data": .object([:]), "meta": .object(["type": .string("object")]), "links": .object(["type": .string("object")]),
                "jsonapi": .object(["type": .string("object")]),
            ]),
        ]),
        "Errors": .object([
            "type": .string("object"), "required": .array([.string("errors")]),
            "properties": .object([
                "errors": .object([
                    "type": .string("array"), "minItems": .integer(1),
                    "items": object(
                        [
                            "status": .object(["type": .string("string")]), "code": .object(["type": .string("string")]),
                            "title": .object(["type": .string("string")]), "detail": .object(["type": .string("string")]),
                            "source": .object([
                                "type": .string("object"),
                                "properties": .object([
                                    "pointer": .object(["type": .string("string")]), "parameter": .object(["type": .string("string")]),
                                    "header": .object(["type": .string("string")]),
                                ]),
                            ]),
                            "meta": .object(["type": .string("object")]),
                        ], required: ["status", "code", "title"], closed: false),
                ]),
                "meta": .object(["type": .string("object")]), "jsonapi": .object(["type": .string("object")]),
            ]),
        ]),
    ]
}
