import Foundation
import HTTPServer
import InboxDomain

/// The OpenAPI 3.1 document of the routes, made from the routes table itself (so it cannot list a
/// route that is not served, nor miss one), each with what its `RouteDescription` says it reads
/// and answers, and the JSON:API error document. Served at `/openapi.json`.
public enum OpenAPI {
    public static func document(routes: [Route]) -> JSONValue {
        var paths: [String: [String: JSONValue]] = [:]
        for route in routes {
            let described = route.description
            var responses: [String: JSONValue] = [:]
            switch described.errors {
            case .jsonAPI:
                responses["default"] = .object([
                    "description": .string("A JSON:API error document: {errors: [{status, code, title, detail, source}]}."),
                    "content": .object([JSONAPI.mediaType: .object(["schema": Schema.errors])]),
                ])
            case .json(let schema):
                responses["default"] = .object([
                    "description": .string("An OAuth 2.0 error (RFC 6749 §5.2): {error, error_description}."),
                    "content": .object(["application/json": .object(["schema": schema])]),
                ])
            }
            for (status, response) in described.responses {
                switch response {
                case .noContent: responses[String(status)] = .object(["description": .string("No content.")])
                case .bytes(let mediaTypes):
                    let binary: JSONValue = .object(["type": .string("string"), "format": .string("binary")])
                    responses[String(status)] = .object([
                        "description": .string("The file's bytes, of the type it was stored with."),
                        "content": .object(Dictionary(uniqueKeysWithValues: mediaTypes.map { ($0, JSONValue.object(["schema": binary])) })),
                    ])
                case .redirect(let description):
                    responses[String(status)] = .object([
                        "description": .string(description),
                        "headers": .object(["Location": .object(["required": .bool(true), "schema": .object(["type": .string("string")])])]),
                    ])
                case .document(let schema):
                    responses[String(status)] = .object([
                        "description": .string("A JSON:API document."), "content": .object([JSONAPI.mediaType: .object(["schema": schema])]),
                    ])
                case .other(let mediaType, let schema):
                    // A refusal of another type (a link's HTML page) may also be the server's own
                    // JSON:API error, for what it refuses before the route runs (a NUL in the query).
                    var content: [String: JSONValue] = [mediaType: .object(["schema": schema])]
                    if status >= 400 { content[JSONAPI.mediaType] = .object(["schema": Schema.errors]) }
                    responses[String(status)] = .object(["description": .string(mediaType), "content": .object(content)])
                }
            }
            var operation: [String: JSONValue] = [
                "summary": .string(described.summary), "operationId": .string(operationId(route)), "responses": .object(responses),
            ]
            let example = OpenAPIExamples.request("\(route.method.rawValue) \(route.pattern)")
            if let body = described.body {
                var content: [String: JSONValue] = [JSONAPI.mediaType: .object(["schema": example.map { body.adding("examples", .array([$0])) } ?? body])]
                if let multipart = described.multipartBody { content["multipart/form-data"] = .object(["schema": multipart]) }
                operation["requestBody"] = .object(["required": .bool(true), "content": .object(content)])
            } else if let form = described.formBody {
                operation["requestBody"] = .object([
                    "required": .bool(true),
                    "content": .object(["application/x-www-form-urlencoded": .object(["schema": example.map { form.adding("examples", .array([$0])) } ?? form])]),
                ])
            }
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
            for query in described.query {
                parameters.append(.object([
                    "name": .string(query.name), "in": .string("query"), "required": .bool(false), "description": .string(query.description),
                    "schema": query.schema,
                ]))
            }
            for header in described.headers + (route.isAppAPI ? [QueryParameter.appIdentity] : []) {
                parameters.append(.object([
                    "name": .string(header.name), "in": .string("header"), "required": .bool(false), "description": .string(header.description),
                    "schema": header.schema,
                ]))
            }
            if !parameters.isEmpty { operation["parameters"] = .array(parameters) }
            paths[route.pattern, default: [:]][route.method.rawValue.lowercased()] = .object(operation)
        }
        // Each resource schema with a title becomes a component of its name, which client
        // generators make a model of, and the operations refer to it.
        var schemas = Schema.components
        let described = hoist(.object(paths.mapValues { .object($0) }), into: &schemas)
        return .object([
            "openapi": .string("3.1.0"),
            "info": .object([
                "title": .string("Wristler inbox tier"), "version": .string("1"),
                "description": .string("The bell, devices, notification preferences, saved searches, conversations and file uploads of the Wristler app (JSON:API 1.0)."),
            ]),
            "paths": described,
            "components": .object([
                "securitySchemes": .object([
                    "accessToken": .object(["type": .string("http"), "scheme": .string("bearer"), "bearerFormat": .string("JWT (ES256)")]),
                    "serviceCredential": .object([
                        "type": .string("http"), "scheme": .string("bearer"),
                        "description": .string("A service credential of INBOX_SERVICE_CREDENTIALS (name=secret): Authorization: Bearer <secret>."),
                    ]),
                ]),
                "schemas": .object(schemas),
            ]),
        ])
    }

    /// `value` with every object schema that has a `title` moved into `components` under it and
    /// referred to; two different schemas of one title are a mistake of the routes' descriptions.
    static func hoist(_ value: JSONValue, into components: inout [String: JSONValue]) -> JSONValue {
        switch value {
        case .object(var members):
            for (name, member) in members { members[name] = hoist(member, into: &components) }
            if case .string(let title)? = members["title"], members["type"] == .string("object") {
                assert(components[title] == nil || components[title] == .object(members), "two schemas are titled \(title)")
                components[title] = .object(members)
                return .object(["$ref": .string("#/components/schemas/" + title)])
            }
            return .object(members)
        case .array(let items):
            return .array(items.map { hoist($0, into: &components) })
        default:
            return value
        }
    }

    /// `get_v1_me_devices_id`: unique per method and path.
    static func operationId(_ route: Route) -> String {
        let words = route.pattern.split(whereSeparator: { !($0.isLetter || $0.isNumber) })
        return ([route.method.rawValue.lowercased()] + words.map(String.init)).joined(separator: "_")
    }

    /// `GET /openapi.json`: the document of `routes` and of itself, made once.
    public static func route(describing routes: [Route]) -> Route {
        let itself = RouteDescription("This document.", responses: [200: .other(mediaType: "application/json", schema: Schema.anyObject)])
        let placeholder = Route(.get, "/openapi.json", describedAs: itself) { _ in HTTPResponse(status: 204) }
        let body = JSONAPI.encode(document(routes: routes + [placeholder]))
        return Route(.get, "/openapi.json", waits: false, describedAs: itself) { _ in
            HTTPResponse(status: 200, contentType: "application/json", body: body)
        }
    }
}
