import EventLog
import Foundation
import HTTPServer
import InboxDomain

/// A JSON:API error: what every refusal of the API is, rendered as an error document.
///
/// `code` is for machines and never changes; `title` and `detail` are for people. `source` says
/// where the fault is: a JSON pointer into the body, a query parameter, or a header.
public struct APIError: Error, Sendable {
    public enum Source: Sendable, Hashable {
        case pointer(String)
        case parameter(String)
        case header(String)
    }

    public var status: Int
    public var code: String
    public var title: String
    public var detail: String?
    public var source: Source?
    public var meta: [String: JSONValue]
    /// Headers the response carries besides the document (`Allow`, `Retry-After`).
    public var headers: [(name: String, value: String)]

    public init(
        status: Int, code: String, title: String? = nil, detail: String? = nil, source: Source? = nil, meta: [String: JSONValue] = [:],
        headers: [(name: String, value: String)] = []
    ) {
        self.status = status
        self.code = code
        self.title = title ?? Self.reason(status)
        self.detail = detail
        self.source = source
        self.meta = meta
        self.headers = headers
    }

    /// The standard reason phrase of a status, the title of errors that do not name their own.
    public static func reason(_ status: Int) -> String {
        switch status {
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 406: "Not Acceptable"
        case 409: "Conflict"
        case 413: "Content Too Large"
        case 415: "Unsupported Media Type"
        case 422: "Unprocessable Entity"
        case 426: "Upgrade Required"
        case 429: "Too Many Requests"
        case 500: "Internal Server Error"
        case 503: "Service Unavailable"
        default: "Error"
        }
    }

    /// The error document `{"jsonapi": {"version": "1.0"}, "errors": [...]}` as a response.
    public var response: HTTPResponse {
        var object: [String: JSONValue] = ["status": .string(String(status)), "code": .string(code), "title": .string(title)]
        if let detail { object["detail"] = .string(detail) }
        switch source {
        case .pointer(let pointer): object["source"] = .object(["pointer": .string(pointer)])
        case .parameter(let parameter): object["source"] = .object(["parameter": .string(parameter)])
        case .header(let header): object["source"] = .object(["header": .string(header)])
        case nil: break
        }
        if !meta.isEmpty { object["meta"] = .object(meta) }
        let document: JSONValue = .object(["jsonapi": .object(["version": .string("1.0")]), "errors": .array([.object(object)])])
        return JSONAPI.response(status: status, document, headers: headers)
    }
}

/// JSON:API's media type and the encoding of documents.
public enum JSONAPI {
    public static let mediaType = "application/vnd.api+json"

    /// Compact JSON with sorted keys (the same document is always the same bytes).
    public static func bytes(_ value: JSONValue) -> [UInt8] {
        var text = JSONText(capacity: 1024)
        text.value(value)
        return text.bytes
    }

    /// `bytes` as text.
    public static func encode(_ value: JSONValue) -> String { String(decoding: bytes(value), as: UTF8.self) }

    /// A response carrying `document` as JSON:API, written straight into the body.
    public static func response(status: Int = 200, _ document: JSONValue, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", mediaType)] + headers, body: bytes(document))
    }
}
