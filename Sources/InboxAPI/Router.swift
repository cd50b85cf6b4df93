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
    /// The pattern's segments, split once: a literal (its UTF-8 bytes), or `{name}` taking any
    /// non-empty segment.
    let segments: [Segment]

    enum Segment: Sendable {
        case literal([UInt8])
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
            segment.hasPrefix("{") && segment.hasSuffix("}") ? .parameter(String(segment.dropFirst().dropLast())) : .literal(Array(segment.utf8))
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
    /// For each number of segments a path can have, the routes whose pattern has as many: their
    /// index in `routes`, those with fewer parameters first, in table order among equals. Read
    /// by index, so that a request copies no `Route` it does not answer with (a `Route` holds a
    /// dozen references: copying every route of the table, and splitting the path a Character at
    /// a time, took a third of `APIServer.reply`'s time for a thread's page answered from memory).
    private let candidates: [[Candidate]]

    private struct Candidate: Sendable {
        var index: Int
        var method: HTTPMethod
        var segments: [Route.Segment]
        var parameterCount: Int
    }

    public init(routes: [Route]) {
        self.routes = routes
        var candidates: [[Candidate]] = Array(repeating: [], count: (routes.map(\.segments.count).max() ?? 0) + 1)
        for (index, route) in routes.enumerated() {
            let parameterCount = route.segments.count { if case .parameter = $0 { true } else { false } }
            candidates[route.segments.count].append(
                Candidate(index: index, method: route.method, segments: route.segments, parameterCount: parameterCount))
        }
        // Among routes with as many parameters, the table's order.
        self.candidates = candidates.map { bucket in bucket.sorted { ($0.parameterCount, $0.index) < ($1.parameterCount, $1.index) } }
    }

    /// A path that a pattern of literals matches is that pattern's alone: `/v1/me/notifications/read`
    /// answers only what its own routes do (405 with their methods, never a PATCH of the
    /// notification `read`), as the OpenAPI document lists it. Among the patterns matching a path,
    /// those with the fewest parameters win; among those, the first in the table with the method.
    public func match(method: HTTPMethod, path: String) -> Match {
        // On bytes: splitting the String walks it a Character at a time, nearly half of the match's
        // cost (and a "/" followed by a combining mark would not split there). Split no further
        // than the longest pattern, plus the rest in one piece: a path of a thousand slashes costs
        // no more than one segment too long.
        let longest = candidates.count - 1
        let requested = path.utf8.split(separator: UInt8(ascii: "/"), maxSplits: longest, omittingEmptySubsequences: false)
        guard requested.count <= longest else { return .notFound }
        var allowed: [HTTPMethod] = []
        var found: Candidate?
        var fewest: Int?
        for candidate in candidates[requested.count] {
            // Sorted by parameters: past the fewest that matched, nothing else can win.
            if let fewest, candidate.parameterCount > fewest { break }
            guard Self.matches(candidate.segments, requested) else { continue }
            fewest = candidate.parameterCount
            if candidate.method == method && found == nil {
                // Nothing has fewer parameters than none: the first such route is the answer (most
                // requests, /healthz and the bell).
                if candidate.parameterCount == 0 { return .found(routes[candidate.index], parameters: [:]) }
                found = candidate
            }
            allowed.append(candidate.method)
        }
        if let found { return .found(routes[found.index], parameters: Self.parameters(of: found.segments, in: requested)) }
        if allowed.isEmpty { return .notFound }
        // HEAD is answered wherever GET is; OPTIONS is not served.
        return .methodNotAllowed(allowed: Array(Set(allowed)).sorted())
    }

    /// Whether `path` (as many segments as `pattern`) has `pattern`'s literals, and a non-empty
    /// segment where it has a parameter.
    private static func matches(_ pattern: [Route.Segment], _ path: [Substring.UTF8View]) -> Bool {
        for (expected, actual) in zip(pattern, path) {
            switch expected {
            case .parameter:
                if actual.isEmpty { return false }
            case .literal(let literal):
                if actual.count != literal.count || !actual.elementsEqual(literal) { return false }
            }
        }
        return true
    }

    private static func parameters(of pattern: [Route.Segment], in path: [Substring.UTF8View]) -> [String: String] {
        var parameters: [String: String] = [:]
        for case (.parameter(let name), let actual) in zip(pattern, path) { parameters[name] = String(Substring(actual)) }
        return parameters
    }
}
