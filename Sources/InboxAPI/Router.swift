import Foundation
import HTTPServer

/// What a route's handler gets: the request, the path's parameters, who is calling and the
/// request's id.
public struct RequestContext: Sendable {
    public var request: HTTPRequest
    public var parameters: [String: String]
    public var identity: AppIdentity
    public var requestId: String
}

/// One route: a method, a path pattern (`/v1/me/devices/{id}`), the scope a token needs for it
/// (nil for routes outside `/v1`, which take no person's token), and its handler.
public struct Route: Sendable {
    public let method: String
    public let pattern: String
    public let scope: String?
    public let handler: @Sendable (RequestContext) throws -> HTTPResponse

    public init(_ method: String, _ pattern: String, scope: String? = nil, handler: @escaping @Sendable (RequestContext) throws -> HTTPResponse) {
        self.method = method
        self.pattern = pattern
        self.scope = scope
        self.handler = handler
    }

    var segments: [Substring] { pattern.split(separator: "/", omittingEmptySubsequences: false) }

    /// Whether the route is part of the app's API (`/v1/...`): those are gated by app version.
    public var isAppAPI: Bool { pattern.hasPrefix("/v1/") }
}

/// Finds the route of a request: 404 for a path no route has, 405 (with `Allow`) for a path that
/// exists under other methods.
public struct Router: Sendable {
    public enum Match {
        case found(Route, parameters: [String: String])
        case methodNotAllowed(allowed: [String])
        case notFound
    }

    public let routes: [Route]

    public init(routes: [Route]) {
        self.routes = routes
    }

    public func match(method: String, path: String) -> Match {
        let requested = path.split(separator: "/", omittingEmptySubsequences: false)
        var allowed: [String] = []
        for route in routes {
            guard let parameters = Self.parameters(of: route.segments, in: requested) else { continue }
            if route.method == method { return .found(route, parameters: parameters) }
            allowed.append(route.method)
        }
        if allowed.isEmpty { return .notFound }
        // HEAD is answered wherever GET is; OPTIONS is not served.
        return .methodNotAllowed(allowed: Array(Set(allowed)).sorted())
    }

    private static func parameters(of pattern: [Substring], in path: [Substring]) -> [String: String]? {
        guard pattern.count == path.count else { return nil }
        var parameters: [String: String] = [:]
        for (expected, actual) in zip(pattern, path) {
            if expected.hasPrefix("{") && expected.hasSuffix("}") {
                guard !actual.isEmpty else { return nil }
                parameters[String(expected.dropFirst().dropLast())] = String(actual)
            } else if expected != actual {
                return nil
            }
        }
        return parameters
    }
}
