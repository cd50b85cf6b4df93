import Foundation
import HTTPServer

/// What a route's handler gets: the request, the path's parameters, who is calling, their token
/// (for routes that need one) and the request's id.
public struct RequestContext: Sendable {
    public var request: HTTPRequest
    public var parameters: [String: String]
    public var identity: AppIdentity
    public var token: AccessToken?
    /// The calling tier's name, for `.service` routes.
    public var service: String?
    public var requestId: String
    /// The W3C trace id of the request's `traceparent`, when it had a valid one.
    public var traceId: String? = nil

    /// What ties the events this request appends to it: its trace id when the caller traces
    /// (W3C Trace Context), else its request id.
    public var correlationId: String { traceId ?? requestId }
}

/// Who may call a route.
public enum Access: Sendable, Hashable {
    /// Anybody: operations routes.
    case open
    /// A signed-in person's token (a guest's is 403 `sign_in_required`) with `scope`, when one
    /// is named (without it, 403 `missing_scope`).
    case signedIn(scope: Scope?)
    /// Another tier, with a service credential from configuration (never a person's token).
    case service
}

/// What a route reads and answers besides JSON:API documents.
public enum RouteMedia: Sendable, Hashable {
    /// JSON:API only: a body must be `application/vnd.api+json`, and the client must accept it.
    case jsonAPI
    /// A body that is a JSON:API document or `multipart/form-data` (with its `boundary`): a file upload.
    case jsonAPIOrMultipart
    /// Answers with stored bytes of their own type (a file): `Accept` is not negotiated; errors
    /// are still JSON:API documents.
    case storedBytes
}

/// One route: a method, a path pattern (`/v1/me/devices/{id}`), who may call it, and its handler.
/// The routes list is the one table of every route's scope.
///
/// A handler that `waits` (on the database) runs on one of the HTTP server's blocking threads;
/// one that does not runs on the thread that read the request. `fromMemory`, when a route has it,
/// is asked first, on that thread, and answers when it can without waiting (the bell cache).
public struct Route: Sendable {
    public let method: HTTPMethod
    public let pattern: String
    public let access: Access
    public let waits: Bool
    /// The media types of its body and answers, when not JSON:API alone.
    public let media: RouteMedia
    /// What the OpenAPI document says of the route: its query, body and answers.
    public let description: RouteDescription
    public let fromMemory: (@Sendable (RequestContext) throws -> HTTPResponse?)?
    public let handler: @Sendable (RequestContext) throws -> HTTPResponse
    /// The pattern's segments, split once: a literal, or `{name}` taking any non-empty segment.
    let segments: [Segment]

    enum Segment: Sendable {
        case literal(Substring)
        case parameter(String)
    }

    public init(
        _ method: HTTPMethod, _ pattern: String, access: Access = .open, waits: Bool = true, media: RouteMedia = .jsonAPI,
        describedAs description: RouteDescription,
        fromMemory: (@Sendable (RequestContext) throws -> HTTPResponse?)? = nil,
        handler: @escaping @Sendable (RequestContext) throws -> HTTPResponse
    ) {
        self.method = method
        self.pattern = pattern
        self.access = access
        self.waits = waits
        self.media = media
        self.description = description
        self.fromMemory = fromMemory
        self.handler = handler
        segments = pattern.split(separator: "/", omittingEmptySubsequences: false).map { segment in
            segment.hasPrefix("{") && segment.hasSuffix("}") ? .parameter(String(segment.dropFirst().dropLast())) : .literal(segment)
        }
    }

    /// Whether the route is part of the app's API (`/v1/...`): those are gated by app version.
    public var isAppAPI: Bool { pattern.hasPrefix("/v1/") }
}

/// Finds the route of a request: 404 for a path no route has, 405 (with `Allow`) for a path that
/// exists under other methods.
public struct Router: Sendable {
    public enum Match {
        case found(Route, parameters: [String: String])
        case methodNotAllowed(allowed: [HTTPMethod])
        case notFound
    }

    public let routes: [Route]

    public init(routes: [Route]) {
        self.routes = routes
    }

    /// A path that a pattern of literals matches is that pattern's alone: `/v1/me/notifications/read`
    /// answers only what its own routes do (405 with their methods, never a PATCH of the
    /// notification `read`), as the OpenAPI document lists it. Among the patterns matching a path,
    /// those with the fewest parameters win.
    public func match(method: HTTPMethod, path: String) -> Match {
        let requested = path.split(separator: "/", omittingEmptySubsequences: false)
        var allowed: [HTTPMethod] = []
        var found: (route: Route, parameters: [String: String])?
        var fewest = Int.max
        for route in routes {
            guard let parameters = Self.parameters(of: route.segments, in: requested), parameters.count <= fewest else { continue }
            if parameters.count < fewest {
                fewest = parameters.count
                allowed = []
                found = nil
            }
            if route.method == method && found == nil {
                // Nothing has fewer parameters than none: the first such route is the answer, and
                // the rest of the table need not be read (most requests, /healthz and the bell).
                if parameters.isEmpty { return .found(route, parameters: parameters) }
                found = (route, parameters)
            }
            allowed.append(route.method)
        }
        if let found { return .found(found.route, parameters: found.parameters) }
        if allowed.isEmpty { return .notFound }
        // HEAD is answered wherever GET is; OPTIONS is not served.
        return .methodNotAllowed(allowed: Array(Set(allowed)).sorted())
    }

    private static func parameters(of pattern: [Route.Segment], in path: [Substring]) -> [String: String]? {
        guard pattern.count == path.count else { return nil }
        var parameters: [String: String] = [:]
        for (expected, actual) in zip(pattern, path) {
            switch expected {
            case .parameter(let name):
                guard !actual.isEmpty else { return nil }
                parameters[name] = String(actual)
            case .literal(let literal):
                guard literal == actual else { return nil }
            }
        }
        return parameters
    }
}
