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

        /// The pointer to the member `name` (as the client sent it) of the object at `parent`: its
        /// name escaped as RFC 6901 says (`~0`, `~1`); a name that holds a control character or is
        /// over `APIError.echoedNameLength` characters is not echoed, and the pointer stops at
        /// the parent.
        public static func member(_ name: String, of parent: String) -> Source {
            .pointer(APIError.pointer(parent, then: [name]))
        }
    }

    /// `parent` followed by the member names (or indices) of `path` the client sent, escaped as RFC
    /// 6901 says; at the first name that is not echoed (`echoed(_:)`) the pointer stops.
    public static func pointer(_ parent: String = "", then path: [String]) -> String {
        var pointer = parent
        for name in path {
            guard echoes(name) else { break }
            pointer += "/" + name.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
        }
        return pointer
    }

    /// The longest member name a client sent that an error repeats.
    public static let echoedNameLength = 100

    /// Whether a name a client sent is repeated in an error (a detail, a pointer) as it is.
    static func echoes(_ name: String) -> Bool {
        name.count <= echoedNameLength && !name.unicodeScalars.contains { $0.properties.generalCategory == .control || $0.properties.generalCategory == .format }
    }

    /// A name the client sent, as a detail says it: quoted; one that holds a control character or
    /// is too long is described, not repeated.
    public static func echoed(_ name: String) -> String {
        echoes(name) ? "\"\(name)\"" : "A name with a control character or over \(echoedNameLength) characters"
    }

    /// What went wrong, for machines: the `code` of the error document. Extensible: a new refusal
    /// adds a name here, so every code the API can answer is in this one list and none is misspelt
    /// at a call site. The raw value is what clients see and never changes.
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ rawValue: String) { self.rawValue = rawValue }

        public var description: String { rawValue }

        /// 426: the app's version is below the minimum for its platform.
        public static let appUpdateRequired = Code("app_update_required")
        /// 413: written by HTTPServer itself, before any route, which cannot see this type.
        public static let bodyTooLarge = Code("body_too_large")
        /// 400: written by HTTPServer itself, for Content-Length headers that disagree.
        public static let conflictingContentLength = Code("conflicting_content_length")
        /// 422: the conversation was closed by a block, or its buyer's account was blocked: it can
        /// be read, not written to (`meta.reason`: `block`, `buyer_blocked`).
        public static let conversationClosed = Code("conversation_closed")
        public static let databaseUnavailable = Code("database_unavailable")
        /// Two writes met in the database (a deadlock or a serialization failure): PostgreSQL
        /// undid one; it can be sent again as it was.
        public static let writeConflict = Code("write_conflict")
        /// 422: a sourceUrl's file is over the upload limit (declared or sent).
        public static let fileTooLarge = Code("file_too_large")
        /// 409: an idempotency key already used for another event (docs/api.md); 422 for an
        /// `Idempotency-Key` already used for another message (docs/messaging.md).
        public static let idempotencyKeyReused = Code("idempotency_key_reused")
        public static let idMismatch = Code("id_mismatch")
        public static let internalError = Code("internal_error")
        public static let invalidAppHeader = Code("invalid_app_header")
        public static let invalidBatch = Code("invalid_batch")
        public static let invalidCursor = Code("invalid_cursor")
        public static let invalidDocument = Code("invalid_document")
        public static let invalidEvent = Code("invalid_event")
        public static let invalidField = Code("invalid_field")
        /// 400: a header other than the app's and the token's that the route reads is malformed
        /// (`Idempotency-Key`); `source.header` names it.
        public static let invalidHeader = Code("invalid_header")
        /// 400: a multipart/form-data body without a usable boundary, or not framed by it.
        public static let invalidMultipart = Code("invalid_multipart")
        public static let invalidParameter = Code("invalid_parameter")
        /// 400: a query parameter JSON:API defines that this API does not support (`include`, `sort`).
        public static let unsupportedParameter = Code("unsupported_parameter")
        public static let invalidToken = Code("invalid_token")
        public static let locked = Code("locked")
        public static let malformedJSON = Code("malformed_json")
        public static let managedPerSearch = Code("managed_per_search")
        public static let methodNotAllowed = Code("method_not_allowed")
        public static let migrationsPending = Code("migrations_pending")
        public static let missingBody = Code("missing_body")
        public static let missingField = Code("missing_field")
        public static let missingScope = Code("missing_scope")
        public static let missingToken = Code("missing_token")
        public static let notAcceptable = Code("not_acceptable")
        public static let notFound = Code("not_found")
        /// 503: a conversation started moments ago that its read model has not reached yet (an inline
        /// apply deferred to the async projector); `Retry-After: 1`.
        public static let notYetProjected = Code("not_yet_projected")
        /// 422: a person cannot start a conversation with a shop they work at.
        public static let ownShop = Code("own_shop")
        public static let readOnlyField = Code("read_only_field")
        public static let signInRequired = Code("sign_in_required")
        /// 422: a sourceUrl that leads (directly, through DNS or a redirect) to an address that is
        /// not public.
        public static let sourceNotAllowed = Code("source_not_allowed")
        /// 422: a sourceUrl that could not be fetched (unreachable, too slow, an error status, too
        /// many redirects).
        public static let sourceUnavailable = Code("source_unavailable")
        /// 503: the request's statement ran past the API's statement timeout.
        public static let timeout = Code("timeout")
        public static let tokenExpired = Code("token_expired")
        public static let tooManyRequests = Code("too_many_requests")
        public static let typeMismatch = Code("type_mismatch")
        /// 422: an attachment handle the caller did not upload, or that expired (`meta.handles`).
        public static let unknownAttachment = Code("unknown_attachment")
        public static let unknownField = Code("unknown_field")
        public static let unsupportedFileType = Code("unsupported_file_type")
        /// 503: every slot for fetching a sourceUrl is taken; retry.
        public static let uploadsBusy = Code("uploads_busy")
        /// 503: the object store the files are kept in cannot be reached or refused; retry.
        public static let storageUnavailable = Code("storage_unavailable")
        public static let unsupportedMediaType = Code("unsupported_media_type")
        /// 422: the watch of a new conversation is unknown, sold, offline or deleted (`meta.status`).
        public static let watchUnavailable = Code("watch_unavailable")
        public static let wrongExpectedVersion = Code("wrong_expected_version")
    }

    public var status: Int
    public var code: Code
    public var title: String
    public var detail: String?
    public var source: Source?
    public var meta: [String: JSONValue]
    /// Headers the response carries besides the document (`Allow`, `Retry-After`).
    public var headers: [(name: String, value: String)]
    /// What caused it, for the request's log line only: the response never carries it (a client
    /// has no business knowing the database's host, port or user).
    public var cause: String?

    public init(
        status: Int, code: Code, title: String? = nil, detail: String? = nil, source: Source? = nil, meta: [String: JSONValue] = [:],
        headers: [(name: String, value: String)] = [], cause: String? = nil
    ) {
        self.cause = cause
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
        var object: [String: JSONValue] = ["status": .string(String(status)), "code": .string(code.rawValue), "title": .string(title)]
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

extension HTTPResponse {
    /// The response with `Location: path`: where a `201`'s new resource is (JSON:API, "Creating
    /// Resources").
    public func locating(_ path: String) -> HTTPResponse {
        var located = self
        located.headers.append(("Location", path))
        return located
    }
}

extension JSONAPI {
    /// An id as one segment of a path (`/` and what a path may not hold percent-escaped).
    public static func pathSegment(_ id: String) -> String { Documents.pathSegment(id) }
}
