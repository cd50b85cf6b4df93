import Encodings
import EventLog
import Foundation
import HTTPServer
import InboxDomain
import JSONParsing
import PostgresClient
import Projections

extension RequestContext {
    /// The body as a JSON:API document: a JSON object with a `data` object. Malformed JSON is a
    /// 400 pointing at the body; a document without `data` a 400 pointing at `/data`.
    public func resourceDocument() throws(APIError) -> [String: JSONValue] {
        guard !request.body.isEmpty else {
            throw APIError(status: 400, code: .missingBody, detail: "This request needs a JSON:API document with data.", source: .pointer(""))
        }
        guard case .object(let document) = try jsonBody() else {
            throw APIError(status: 400, code: .invalidDocument, detail: "The body must be a JSON object.", source: .pointer(""))
        }
        guard case .object(let data)? = document["data"] else {
            throw APIError(status: 400, code: .invalidDocument, detail: "The document needs a data object.", source: .pointer("/data"))
        }
        return data
    }

    /// The body as JSON: malformed JSON is a 400 pointing at the body, and a string holding U+0000
    /// (which PostgreSQL cannot store, wherever the value goes) a 422 pointing at it. Every route
    /// reads its body here, so no such string reaches a handler.
    public func jsonBody() throws(APIError) -> JSONValue {
        let value: JSONValue
        do {
            value = try JSONValue(parsing: request.body)
        } catch {
            throw APIError(status: 400, code: .malformedJSON, detail: "The body is not valid JSON.", source: .pointer(""))
        }
        if let path = value.pathToNUL {
            // The name that holds it is not repeated: the pointer stops at its object.
            let pointer = APIError.pointer(then: path)
            throw APIError(
                status: 422, code: .invalidField, detail: "\(pointer.isEmpty ? "The document" : pointer) holds the character U+0000, which cannot be stored.",
                source: .pointer(pointer))
        }
        return value
    }

    /// The value of query parameter `name` (the last one when repeated).
    public func query(_ name: String) -> String? {
        request.query.last { $0.name == name }.map { $0.value ?? "" }
    }

    /// `page[limit]`: 25 by default, 1 to 50.
    public func pageLimit() throws(APIError) -> Int {
        guard let text = query("page[limit]") else { return 25 }
        guard let limit = Int(text), (1...50).contains(limit) else {
            throw APIError(
                status: 400, code: .invalidParameter, detail: "page[limit] must be a whole number from 1 to 50.",
                source: .parameter("page[limit]"))
        }
        return limit
    }

    /// `page[cursor]`, as handed out in `links.next`; a garbled one is a 400 naming it.
    public func pageCursor() throws(APIError) -> KeysetCursor? {
        guard let text = query("page[cursor]") else { return nil }
        do {
            return try KeysetCursor(token: text)
        } catch {
            throw APIError(
                status: 400, code: .invalidCursor, detail: "page[cursor] is not a cursor this server handed out; start from the first page.",
                source: .parameter("page[cursor]"))
        }
    }

    /// A `true`/`false` query parameter, nil when absent.
    public func booleanQuery(_ name: String) throws(APIError) -> Bool? {
        guard let text = query(name) else { return nil }
        switch text {
        case "true": return true
        case "false": return false
        default:
            throw APIError(status: 400, code: .invalidParameter, detail: "\(name) must be true or false.", source: .parameter(name))
        }
    }

    /// The person the token is for (routes with `.signedIn` access always have one).
    public var person: String { token?.subject ?? "" }

    /// Appends events of this request and projects them inline (read-your-writes).
    @discardableResult
    func appendInline(
        _ events: [any CatalogueEvent], client: PostgresClient, inline: InlineProjections
    ) throws -> [AppendedEvent] {
        let metadata = eventMetadata
        let new = try events.map { try NewEvent(catalogueEvent: $0, metadata: metadata) }
        return try client.withConnectionBlocking { connection in try inline.append(new, on: connection) }
    }

    /// Metadata for events this request appends: its origin, the person, and its correlation id
    /// (the `traceparent`'s trace id, else the request id).
    public var eventMetadata: EventMetadata {
        var metadata = identity.metadata
        metadata.actor = token.map { "person:\($0.subject)" }
        metadata.correlationId = correlationId
        return metadata
    }
}

/// Building JSON:API documents.
enum Documents {
    static func response(status: Int = 200, _ document: [String: JSONValue]) -> HTTPResponse {
        var document = document
        document["jsonapi"] = version
        return JSONAPI.response(status: status, .object(document))
    }

    /// The `jsonapi` member of every document.
    static let version: JSONValue = .object(["version": .string("1.0")])

    static let noContent = HTTPResponse(status: 204)

    /// JSON:API: a resource of another type, or another id than the URL's, is a 409.
    static func requireType(_ data: [String: JSONValue], _ type: String, id: String?) throws(APIError) {
        guard data["type"] == .string(type) else {
            throw APIError(status: 409, code: .typeMismatch, detail: "data.type must be \(type).", source: .pointer("/data/type"))
        }
        if let id, let given = data["id"], given != .string(id) {
            throw APIError(status: 409, code: .idMismatch, detail: "data.id must be the id in the URL, \(id).", source: .pointer("/data/id"))
        }
    }

    static func timestamp(_ date: Date) -> JSONValue { .string(timestampText(date)) }

    /// An id as one segment of a link's path (a `/` in it escaped too).
    static func pathSegment(_ id: String) -> String {
        // Most ids are letters, digits and dashes, which need nothing (and a CharacterSet made per call is slow).
        if id.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7a) || $0 == 0x2d || $0 == 0x5f || $0 == 0x2e || $0 == 0x7e }) {
            return id
        }
        var allowed = CharacterSet.urlPathAllowed
        allowed.remove("/")
        return id.addingPercentEncoding(withAllowedCharacters: allowed) ?? id
    }

    /// ISO 8601 in UTC with microseconds (`2026-11-29T13:03:39.117189Z`), PostgreSQL's precision.
    static func timestampText(_ date: Date) -> String { date.postgresText ?? "" }

    /// `path?query` with the query parameters given (and no others), for `links`.
    static func link(_ path: String, _ parameters: [(String, String?)]) -> JSONValue {
        let query = parameters.compactMap { name, value in
            value.map { "\(escape(name))=\(escape($0))" }
        }.joined(separator: "&")
        return .string(query.isEmpty ? path : path + "?" + query)
    }

    /// Percent-encodes all but RFC 3986's unreserved characters (on every list response, so by
    /// hand: Foundation builds a character set's bitmap on each call).
    static func escape(_ text: String) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count + 8)
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                bytes.append(byte)
            default:
                bytes.append(UInt8(ascii: "%"))
                Hex.append(byte, to: &bytes, uppercase: true)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension RequestContext {
    /// `page[number]` (from 1) and `page[size]` (25 by default, 1 to 50) of a numbered list.
    public func numberedPage() throws(APIError) -> (number: Int, size: Int) {
        var number = 1
        var size = 25
        if let text = query("page[number]") {
            guard let value = Int(text), value >= 1, value <= 1_000_000 else {
                throw APIError(status: 400, code: .invalidParameter, detail: "page[number] must be a whole number from 1.", source: .parameter("page[number]"))
            }
            number = value
        }
        if let text = query("page[size]") {
            guard let value = Int(text), (1...50).contains(value) else {
                throw APIError(status: 400, code: .invalidParameter, detail: "page[size] must be a whole number from 1 to 50.", source: .parameter("page[size]"))
            }
            size = value
        }
        return (number, size)
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs: header values are ASCII around their words,
    /// and this runs on every request (Foundation's `trimmingCharacters(in:)` builds a bitmap).
    var trimmingSpaces: String {
        let bytes = Array(utf8)
        var start = 0
        var end = bytes.count
        while start < end && (bytes[start] == 32 || bytes[start] == 9) { start += 1 }
        while end > start && (bytes[end - 1] == 32 || bytes[end - 1] == 9) { end -= 1 }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }
}
