import Foundation
import HTTPServer
import InboxDomain

/// The OpenAPI 3.1 document of the routes, made from the routes table itself (so it cannot list a
/// route that is not served, nor miss one), with a summary for each. Served at `/openapi.json`.
public enum OpenAPI {
    /// What each route does, by `METHOD pattern`. `OpenAPITests` checks every route has one.
    public static let summaries: [String: String] = [
        "GET /healthz": "The process is up.",
        "GET /readyz": "The database answers and every migration is applied.",
        "GET /metrics": "Metrics in the Prometheus text format.",
        "GET /openapi.json": "This document.",
        "GET /v1/me/notifications": "The bell: notifications about the person, newest first, in cursor pages; meta.unread.",
        "PATCH /v1/me/notifications/{id}": "Marks one notification read (attributes.read: true).",
        "POST /v1/me/notifications/read": "Marks every notification read.",
        "DELETE /v1/me/notifications/{id}": "Clears one notification.",
        "DELETE /v1/me/notifications": "Clears the bell.",
        "POST /v1/me/devices": "Registers a push token: 200 for the same token, 201 for a new one or one taken over.",
        "GET /v1/me/devices": "The person's push registrations, in numbered pages; pushToken is never returned.",
        "GET /v1/me/devices/{id}": "One registration.",
        "PATCH /v1/me/devices/{id}": "Changes a registration (not its pushToken: 422).",
        "DELETE /v1/me/devices/{id}": "Deletes a registration.",
        "GET /v1/me/notification-preferences": "Every category's push and email switch, with labels in the reader's language.",
        "PATCH /v1/me/notification-preferences": "Switches channels on or off; a locked channel cannot be turned off (422).",
        "GET /v1/me/saved-searches": "The person's saved searches, in numbered pages.",
        "POST /v1/me/saved-searches": "Saves a search (name, query, interval, push).",
        "GET /v1/me/saved-searches/{id}": "One saved search.",
        "PATCH /v1/me/saved-searches/{id}": "Changes a saved search.",
        "DELETE /v1/me/saved-searches/{id}": "Deletes a saved search.",
        "POST /internal/v1/events": "Other tiers append a batch of catalogue events, all or nothing (service credential).",
    ]

    public static func document(routes: [Route]) -> JSONValue {
        var paths: [String: [String: JSONValue]] = [:]
        for route in routes {
            var operation: [String: JSONValue] = [
                "summary": .string(summaries["\(route.method.rawValue) \(route.pattern)"] ?? ""),
                "responses": .object([
                    "default": .object([
                        "description": .string("A JSON:API document; errors as {errors: [{status, code, title, detail, source}]}."),
                        "content": .object([JSONAPI.mediaType: .object(["schema": .object(["$ref": .string("#/components/schemas/Document")])])]),
                    ])
                ]),
            ]
            switch route.access {
            case .open: operation["security"] = .array([])
            case .signedIn(let scope): operation["security"] = .array([.object(["accessToken": .array(scope.map { [.string($0.rawValue)] } ?? [])])])
            case .service: operation["security"] = .array([.object(["serviceCredential": .array([])])])
            }
            var parameters: [JSONValue] = []
            for segment in route.pattern.split(separator: "/") where segment.hasPrefix("{") {
                parameters.append(.object([
                    "name": .string(String(segment.dropFirst().dropLast())), "in": .string("path"), "required": .bool(true),
                    "schema": .object(["type": .string("string")]),
                ]))
            }
            if route.isAppAPI {
                parameters.append(.object([
                    "name": .string(AppIdentity.headerName), "in": .string("header"), "required": .bool(false),
                    "description": .string("ios/<version> or android/<version>; an app below the minimum gets 426 app_update_required."),
                    "schema": .object(["type": .string("string"), "pattern": .string("^(ios|android)/[0-9]+(\\.[0-9]+){0,3}$")]),
                ]))
            }
            if !parameters.isEmpty { operation["parameters"] = .array(parameters) }
            paths[route.pattern, default: [:]][route.method.rawValue.lowercased()] = .object(operation)
        }
        return .object([
            "openapi": .string("3.1.0"),
            "info": .object([
                "title": .string("Wristler inbox tier"), "version": .string("1"),
                "description": .string("The bell, devices, notification preferences and saved searches of the Wristler app (JSON:API 1.0)."),
            ]),
            "paths": .object(paths.mapValues { .object($0) }),
            "components": .object([
                "securitySchemes": .object([
                    "accessToken": .object(["type": .string("http"), "scheme": .string("bearer"), "bearerFormat": .string("JWT (ES256)")]),
                    "serviceCredential": .object(["type": .string("http"), "scheme": .string("bearer")]),
                ]),
                "schemas": .object([
                    "Document": .object([
                        "type": .string("object"),
                        "properties": .object([
                            "data": .object([:]), "errors": .object(["type": .string("array")]), "meta": .object(["type": .string("object")]),
                            "links": .object(["type": .string("object")]), "jsonapi": .object(["type": .string("object")]),
                        ]),
                    ])
                ]),
            ]),
        ])
    }

    /// `GET /openapi.json`: the document of `routes` and of itself, made once.
    public static func route(describing routes: [Route]) -> Route {
        let placeholder = Route(.get, "/openapi.json") { _ in HTTPResponse(status: 204) }
        let body = JSONAPI.encode(document(routes: routes + [placeholder]))
        return Route(.get, "/openapi.json", waits: false) { _ in HTTPResponse(status: 200, contentType: "application/json", body: body) }
    }
}
