import HTTPServer
import InboxAPI
import Testing

/// The router's precedence: literals over parameters, the fewest parameters first, 405 with the
/// methods of the routes that win, 404 for a path no pattern has.
@Suite struct RouterTests {
    static let table: [Route] = [
        (HTTPMethod.get, "/v1/me/notifications/{id}"),
        (.patch, "/v1/me/notifications/{id}"),
        (.post, "/v1/me/notifications/read"),
        (.get, "/v1/conversations/{id}/messages"),
        (.post, "/v1/conversations/{id}/messages"),
        (.get, "/healthz"),
        (.get, "/v1/me/{kind}/{id}"),
        (.delete, "/v1/me/{kind}/{id}"),
        (.get, "/v1/me/notifications/{other}"),
    ].map { method, pattern in
        Route(method, pattern, describedAs: RouteDescription("\(method) \(pattern)")) { _ in HTTPResponse(status: 204) }
    }

    enum Answer: Equatable {
        case found(HTTPMethod, String, [String: String])
        case notAllowed([HTTPMethod])
        case notFound
    }

    static func answer(_ method: HTTPMethod, _ path: String) -> Answer {
        switch Router(routes: table).match(method: method, path: path) {
        case .found(let route, let parameters): .found(route.method, route.pattern, parameters)
        case .methodNotAllowed(let allowed): .notAllowed(allowed)
        case .notFound: .notFound
        }
    }

    @Test func literalsWinThenTheFewestParametersThenTheTablesOrder() {
        #expect(Self.answer(.get, "/healthz") == .found(.get, "/healthz", [:]))
        #expect(Self.answer(.post, "/v1/me/notifications/read") == .found(.post, "/v1/me/notifications/read", [:]))
        // The literal pattern is the path's alone: not the notification `read`.
        #expect(Self.answer(.get, "/v1/me/notifications/read") == .notAllowed([.post]))
        #expect(Self.answer(.patch, "/v1/me/notifications/n1") == .found(.patch, "/v1/me/notifications/{id}", ["id": "n1"]))
        // The first of two equal patterns in the table answers.
        #expect(Self.answer(.get, "/v1/me/notifications/n1") == .found(.get, "/v1/me/notifications/{id}", ["id": "n1"]))
        // One parameter wins over two: DELETE of the two-parameter pattern is not offered here.
        #expect(Self.answer(.delete, "/v1/me/notifications/n1") == .notAllowed([.get, .patch]))
        #expect(Self.answer(.delete, "/v1/me/things/x1") == .found(.delete, "/v1/me/{kind}/{id}", ["kind": "things", "id": "x1"]))
        #expect(Self.answer(.get, "/v1/conversations/c-1/messages") == .found(.get, "/v1/conversations/{id}/messages", ["id": "c-1"]))
    }

    @Test func aPathIsSplitOnItsSlashesWhateverFollowsThem() {
        #expect(Self.answer(.get, "/v1/me/notifications/é-1") == .found(.get, "/v1/me/notifications/{id}", ["id": "é-1"]))
        // A combining mark after a slash makes one Character with it; the slash still splits.
        #expect(Self.answer(.get, "/v1/me/notifications/\u{301}x") == .found(.get, "/v1/me/notifications/{id}", ["id": "\u{301}x"]))
        #expect(Self.answer(.get, "/v1/conversations/\u{301}/messages") == .found(.get, "/v1/conversations/{id}/messages", ["id": "\u{301}"]))
        #expect(Self.answer(.get, "/healthz\u{301}") == .notFound)
    }

    @Test func aPathNoPatternHasIsNotFound() {
        // A parameter takes a non-empty segment only.
        #expect(Self.answer(.get, "/v1/me/notifications/") == .notFound)
        #expect(Self.answer(.get, "/v1/conversations//messages") == .notFound)
        #expect(Self.answer(.get, "/") == .notFound)
        #expect(Self.answer(.get, "") == .notFound)
        #expect(Self.answer(.get, "/healthz/") == .notFound)
        #expect(Self.answer(.get, "/a/b/c/d/e/f/g/h/i/j/k") == .notFound, "longer than every pattern")
        guard case .notFound = Router(routes: []).match(method: .get, path: "/healthz") else {
            Issue.record("an empty table found something")
            return
        }
    }
}
