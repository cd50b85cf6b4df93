import Encodings
import EventLog
import Foundation
import HTTPServer
import InboxDomain
import PostgresClient

/// One line per request for the log.
public struct RequestLogLine: Sendable {
    public var method: String
    /// The route's pattern (`/v1/me/devices/{id}`), or the path when no route matched.
    public var route: String
    public var status: Int
    public var duration: Duration
    public var requestId: String
    /// The W3C trace id of the request's `traceparent`, when it had a valid one.
    public var traceId: String? = nil
    /// The cause of a failure that is not a refusal of the request (a 500, a 503): the error's
    /// description (or an `APIError`'s `cause`), which the response never shows.
    public var error: String?
}

/// The API in front of the routes: every request gets a request id (kept from `X-Request-Id`
/// when it is a sensible one, echoed back), is routed (404, 405 with `Allow`), has its app
/// identified (400 for a malformed `X-Wristler-App`) and gated by version (426), has its media
/// types checked as JSON:API says (415, 406), and is logged in one line.
public final class APIServer: Sendable {
    public let router: Router
    private let gate: AppVersionGate?
    private let verifier: TokenVerifier?
    private let services: ServiceCredentials
    private let metrics: RequestMetrics?
    private let rateLimiter: RateLimiter?
    private let log: @Sendable (RequestLogLine) -> Void

    /// Without a `verifier`, routes that need a person's token answer 401; without `services`,
    /// routes for other tiers do.
    public init(
        routes: [Route], gate: AppVersionGate?, verifier: TokenVerifier? = nil, services: ServiceCredentials = ServiceCredentials(),
        metrics: RequestMetrics? = nil, rateLimiter: RateLimiter? = nil, log: @escaping @Sendable (RequestLogLine) -> Void = { _ in }
    ) {
        self.rateLimiter = rateLimiter
        router = Router(routes: routes)
        self.gate = gate
        self.verifier = verifier
        self.services = services
        self.metrics = metrics
        self.log = log
    }

    /// Answers what can be answered at once (errors, routes that never wait, a route's answer from
    /// memory) on the calling thread, and hands back the rest as work to run where it may block.
    public func reply(_ request: HTTPRequest) -> HTTPReply {
        let started = ContinuousClock.now
        let requestId = Self.requestId(from: request.header("X-Request-Id"))
        let traceId = Self.traceId(from: request.header("traceparent"))
        var route: Route?
        do {
            // HEAD is GET without the body (libmicrohttpd leaves the body out).
            let method = request.method == .head ? .get : request.method
            switch router.match(method: method, path: request.path) {
            case .notFound:
                throw APIError(status: 404, code: .notFound, detail: "There is no \(request.path).")
            case .methodNotAllowed(let allowed):
                let allow = allowed.map(\.rawValue).joined(separator: ", ")
                throw APIError(
                    status: 405, code: .methodNotAllowed, detail: "\(request.path) answers \(allow).", headers: [("Allow", allow)])
            case .found(let found, let parameters):
                route = found
                try Self.refuseNUL(in: request, parameters: parameters)
                var identity = AppIdentity.integration
                if found.isAppAPI {
                    identity = try AppIdentity.parse(request.header(AppIdentity.headerName))
                    try gate?.check(identity)
                    try Self.negotiate(request, media: found.media)
                }
                // JSON:API's query parameters, on the routes that answer JSON:API documents.
                let reserved = found.media == .storedBytes || !(found.isAppAPI || found.pattern.hasPrefix("/internal/"))
                    ? nil : try QueryParameters(request)
                let token = try authorize(request, for: found.access)
                let service = found.access == .service ? try services.authenticate(request.header("Authorization")) : nil
                let context = RequestContext(
                    request: request, parameters: parameters, identity: identity, token: token, service: service, requestId: requestId,
                    traceId: traceId)
                let sparse = { @Sendable (response: HTTPResponse) in reserved?.apply(to: response) ?? response }
                if let fromMemory = try found.fromMemory?(context) {
                    return .now(finish(sparse(fromMemory), request: request, route: found, requestId: requestId, traceId: traceId, started: started))
                }
                guard found.waits else {
                    return .now(finish(sparse(try found.handler(context)), request: request, route: found, requestId: requestId, traceId: traceId, started: started))
                }
                return .later { [self] in
                    do {
                        return finish(sparse(try found.handler(context)), request: request, route: found, requestId: requestId, traceId: traceId, started: started)
                    } catch {
                        return finish(Self.response(for: error), request: request, route: found, requestId: requestId, traceId: traceId, started: started, error: error)
                    }
                }
            }
        } catch {
            return .now(finish(Self.response(for: error), request: request, route: route, requestId: requestId, traceId: traceId, started: started, error: error))
        }
    }

    /// An error as the response that says it.
    static func response(for error: any Error) -> HTTPResponse {
        switch error {
        case let error as APIError: return error.response
        case let error as PostgresError where error.sqlState == .queryCanceled:
            // The request's statement ran past the API's statement timeout.
            return APIError(
                status: 503, code: .timeout, detail: "The request took too long and was stopped; it can be retried.",
                headers: [("Retry-After", "1")]
            ).response
        case let error as PostgresError where error.sqlState?.class == .transactionRollback && !error.isConnectionError:
            // A deadlock or serialization failure: nothing of the request was kept.
            return APIError(
                status: 503, code: .writeConflict, detail: "The request met another write at the same moment and was undone; it can be retried.",
                headers: [("Retry-After", "1")]
            ).response
        case let error as PostgresError where error.isTransient:
            // The connection lost or refused (a failover, a restart), or the server out of
            // connections or shutting down: the request can be sent again once it is back.
            return APIError(
                status: 503, code: .databaseUnavailable, detail: "The database cannot be reached; the request can be retried.",
                headers: [("Retry-After", "1")]
            ).response
        default:
            return APIError(status: 500, code: .internalError, detail: "The request failed on our side; it can be retried.").response
        }
    }

    /// A path or query parameter holding U+0000, which PostgreSQL's text cannot hold: no resource
    /// has such an id (404), and a query parameter with it is a 400 naming it.
    static func refuseNUL(in request: HTTPRequest, parameters: [String: String]) throws(APIError) {
        if parameters.values.contains(where: \.containsNUL) {
            throw APIError(status: 404, code: .notFound, detail: "There is no such resource: its id holds the character U+0000.")
        }
        if let parameter = request.query.first(where: { $0.name.containsNUL || $0.value?.containsNUL == true }) {
            throw APIError(
                status: 400, code: .invalidParameter, detail: "A query parameter holds the character U+0000.", source: .parameter(parameter.name))
        }
    }

    /// The request id on the response, the request counted in the metrics and logged (with the
    /// cause of an `error` that is not a refusal of the request).
    private func finish(
        _ response: HTTPResponse, request: HTTPRequest, route: Route?, requestId: String, traceId: String?, started: ContinuousClock.Instant,
        error: (any Error)? = nil
    ) -> HTTPResponse {
        var response = response
        response.headers.append(("X-Request-Id", requestId))
        let duration = ContinuousClock.now - started
        // Unknown paths are counted under one label, so a scan of random paths cannot grow the metrics.
        metrics?.record(
            method: request.method, route: route?.pattern ?? "unmatched", status: response.status,
            seconds: duration.inSeconds)
        let cause: String? =
            switch error {
            case nil: nil
            case let refusal as APIError: refusal.cause
            case let error?: String(describing: error)
            }
        log(
            RequestLogLine(
                method: request.method.rawValue, route: route?.pattern ?? request.path, status: response.status, duration: duration,
                requestId: requestId, traceId: traceId, error: cause))
        return response
    }

    /// The token a route needs: 401 without a valid one, 403 `sign_in_required` for a guest's,
    /// 403 `missing_scope` (naming it in `meta.scopes`) without the route's scope.
    func authorize(_ request: HTTPRequest, for access: Access) throws(APIError) -> AccessToken? {
        guard case .signedIn(let scope) = access else { return nil }
        guard let verifier else {
            throw TokenVerifier.unauthorized(.invalidToken, "This server has no keys to verify access tokens with.")
        }
        let token = try verifier.verify(authorization: request.header("Authorization"))
        try rateLimiter?.take(for: token)
        if token.isGuest {
            throw APIError(status: 403, code: .signInRequired, detail: "A guest token cannot do this; sign in first.")
        }
        if let scope, !token.scopes.contains(scope) {
            throw APIError(
                status: 403, code: .missingScope, detail: "The access token lacks the scope \(scope).",
                meta: ["scopes": .array([.string(scope.rawValue)])])
        }
        return token
    }

    /// The request's id: its `X-Request-Id` when that is 1 to 128 characters of letters, digits,
    /// `.`, `_`, `-` and `:`, otherwise a new one.
    /// The trace id of a W3C Trace Context `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`, neither
    /// id all zeros; a later version may append fields after the flags), nil for anything else.
    public static func traceId(from header: String?) -> String? {
        guard let header else { return nil }
        let parts = header.trimmingCharacters(in: .whitespaces).split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count >= 4, parts[0].count == 2, parts[0] != "ff", parts[0] != "00" || parts.count == 4,
            parts[1].count == 32, parts[2].count == 16, parts[3].count == 2,
            parts.prefix(4).allSatisfy({ $0.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) } }),
            parts[1].contains(where: { $0 != "0" }), parts[2].contains(where: { $0 != "0" })
        else { return nil }
        return String(parts[1])
    }

    static func requestId(from header: String?) -> String {
        if let header, (1...128).contains(header.utf8.count),
            header.utf8.allSatisfy({ byte in
                (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte) || [45, 46, 58, 95].contains(byte)
            })
        {
            return header
        }
        return newRequestId()
    }

    /// A random (version 4) UUID in lower case, from the system's generator (`getrandom`):
    /// Foundation's `UUID()` opens /dev/urandom on every call here.
    static func newRequestId() -> String {
        var generator = SystemRandomNumberGenerator()
        let high = (generator.next() as UInt64) & 0xFFFF_FFFF_FFFF_0FFF | 0x0000_0000_0000_4000
        let low = (generator.next() as UInt64) & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000
        return withUnsafeBytes(of: (high.bigEndian, low.bigEndian)) { Hex.uuidString($0) }
    }

    /// JSON:API 1.0 content negotiation: a body must be `application/vnd.api+json` without
    /// parameters (415), and a client that accepts JSON:API only with parameters, or accepts
    /// nothing this server makes, cannot be answered (406). A route of `.jsonAPIOrMultipart`
    /// also takes `multipart/form-data` (its parameters, the boundary, are the route's to read);
    /// one of `.storedBytes` answers whatever type its file is, so `Accept` is not negotiated.
    static func negotiate(_ request: HTTPRequest, media: RouteMedia = .jsonAPI) throws(APIError) {
        if !request.body.isEmpty || request.header("Content-Type") != nil {
            let type = request.header("Content-Type") ?? ""
            let parts = type.split(separator: ";").map { $0.trimmingSpaces.lowercased() }
            let multipart = media == .jsonAPIOrMultipart && parts.first == "multipart/form-data"
            guard multipart || (parts.first == JSONAPI.mediaType && parts.count == 1) else {
                throw APIError(
                    status: 415, code: .unsupportedMediaType,
                    detail: "Send the body as \(JSONAPI.mediaType), without media type parameters.", source: .header("Content-Type"))
            }
        }
        guard media != .storedBytes, let accept = request.header("Accept"), !accept.trimmingSpaces.isEmpty else { return }
        var acceptable = false
        for range in accept.split(separator: ",") {
            let parts = range.split(separator: ";").map { $0.trimmingSpaces.lowercased() }
            guard let type = parts.first else { continue }
            let parameters = parts.dropFirst().filter { !$0.hasPrefix("q=") }
            if type == JSONAPI.mediaType && parameters.isEmpty { acceptable = true }
            if type == "*/*" || type == "application/*" || type == "application/json" { acceptable = true }
        }
        if !acceptable {
            throw APIError(
                status: 406, code: .notAcceptable, detail: "This API answers \(JSONAPI.mediaType) (without media type parameters).",
                source: .header("Accept"))
        }
    }
}
