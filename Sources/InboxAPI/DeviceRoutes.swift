import Devices
import Foundation
import HTTPServer
import InboxDomain
import PostgresClient

/// Push registrations (devices-and-push page). Scope `account:write`, reading too. A device
/// belongs to whoever is signed in on it; `pushToken` is write-only and never returned.
///
/// - `POST` is an upsert keyed by the push token: the same person's token updates its row (200),
///   a new token makes a row (201), and a token registered by somebody else moves to this person as
///   a new registration (201; the previous owner's id stops working).
/// - `PATCH` changes anything but the token (a body with `pushToken` is 422: a new token is a new
///   registration). `GET`, `PATCH` and `DELETE` of somebody else's device answer 404.
public enum DeviceRoutes {
    static let scope = Scope.accountWrite
    static let attributes: Set<String> = ["platform", "pushToken", "appId", "appVersion", "name", "locale", "apnsEnvironment"]

    /// The attributes as `fields` validates them (`Attributes.string`, `choice`).
    static func schemas(pushToken: Bool) -> [String: JSONValue] {
        var schemas: [String: JSONValue] = [
            "platform": Schema.choice(["ios", "android"]),
            "appId": Schema.string(maximumLength: 200, pattern: "^[A-Za-z0-9._-]+$"),
            "appVersion": Schema.string(maximumLength: 30, pattern: "^[0-9]{1,6}(\\.[0-9]{1,6}){0,3}$"),
            "name": Schema.string(maximumLength: 100, pattern: "^[^\\u0000-\\u001F\\u007F-\\u009F]+$"),
            "locale": Schema.string(maximumLength: 35, pattern: "^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*$"),
            "apnsEnvironment": Schema.choice(["development", "production"]),
        ]
        if pushToken { schemas["pushToken"] = Schema.string(maximumLength: 4096, pattern: "^[^\\s\\u0000-\\u001F\\u007F-\\u009F]+$") }
        return schemas
    }

    /// What `check` refuses: an Android registration with an apnsEnvironment.
    static let rules: [String: JSONValue] = [
        "not": .object([
            "required": .array([.string("platform"), .string("apnsEnvironment")]),
            "properties": .object(["platform": .object(["type": .string("string"), "const": .string("android")]), "apnsEnvironment": .object(["type": .string("string")])]),
        ])
    ]

    public static func routes(client: PostgresClient) -> [Route] {
        let registry = DeviceRegistry(client: client)
        return [
            Route(
                .post, "/v1/me/devices", access: .signedIn(scope: scope),
                describedAs: RouteDescription(
                    "Registers a push token: 200 for the same token, 201 for a new one or one taken over.",
                    body: Schema.resourceDocument(
                        type: "devices", attributes: Self.schemas(pushToken: true), required: ["platform", "pushToken"], rules: Self.rules),
                    responses: [200: .document(Schema.document), 201: .document(Schema.document)]).returning(Schema.single(Self.device))
            ) { context in
                let data = try context.resourceDocument()
                try Documents.requireType(data, "devices", id: nil)
                let attributes = try Attributes(data, allowed: Self.attributes)
                let token = try attributes.string("pushToken", required: true, maximumLength: 4096, valid: { !$0.contains(where: \.isWhitespace) }, hint: "without spaces")!
                var fields = try Self.fields(attributes)
                guard fields.platform != nil else {
                    throw APIError(status: 422, code: .missingField, detail: "The platform field is required.", source: Attributes.pointer("platform"))
                }
                try Self.check(&fields)
                let registration = try registry.register(person: context.person, pushToken: token, details: fields)
                guard case .created = registration else { return Documents.response(status: 200, ["data": registration.device.resource]) }
                return Documents.response(status: 201, ["data": registration.device.resource])
                    .locating("/v1/me/devices/" + registration.device.id.uuidString.lowercased())
            },
            Route(
                .get, "/v1/me/devices", access: .signedIn(scope: scope),
                describedAs: RouteDescription("The person's push registrations, in numbered pages; pushToken is never returned.", query: QueryParameter.numberedPage).returning(Schema.list(Self.device))
            ) { context in
                let (number, size) = try context.numberedPage()
                let rows = try registry.devices(of: context.person, limit: size + 1, offset: (number - 1) * size)
                var links: [String: JSONValue] = [
                    "self": Documents.link("/v1/me/devices", [("page[number]", String(number)), ("page[size]", String(size))])
                ]
                if rows.count > size {
                    links["next"] = Documents.link("/v1/me/devices", [("page[number]", String(number + 1)), ("page[size]", String(size))])
                }
                return Documents.response(["data": .array(rows.prefix(size).map(\.resource)), "links": .object(links)])
            },
            Route(.get, "/v1/me/devices/{id}", access: .signedIn(scope: scope), describedAs: RouteDescription("One registration.").returning(Schema.single(Self.device))) { context in
                let id = try Self.id(context)
                guard let device = try registry.device(id, of: context.person) else { throw Self.notFound() }
                return Documents.response(["data": device.resource])
            },
            Route(
                .patch, "/v1/me/devices/{id}", access: .signedIn(scope: scope),
                describedAs: RouteDescription(
                    "Changes a registration (not its pushToken: 422).",
                    body: Schema.resourceDocument(type: "devices", attributes: Self.schemas(pushToken: false), id: true, rules: Self.rules)).returning(Schema.single(Self.device))
            ) { context in
                let id = try Self.id(context)
                let data = try context.resourceDocument()
                try Documents.requireType(data, "devices", id: context.parameters["id"])
                let attributes = try Attributes(data, allowed: Self.attributes)
                if attributes.has("pushToken") {
                    throw APIError(
                        status: 422, code: .readOnlyField,
                        detail: "pushToken cannot be changed: a new token is a new registration (POST /v1/me/devices).",
                        source: Attributes.pointer("pushToken"))
                }
                var fields = try Self.fields(attributes)
                guard let current = try registry.device(id, of: context.person) else { throw Self.notFound() }
                if fields.platform == nil { fields.platform = current.platform }
                try Self.check(&fields)
                guard let updated = try registry.change(id, of: context.person, to: fields) else { throw Self.notFound() }
                return Documents.response(["data": updated.resource])
            },
            Route(.delete, "/v1/me/devices/{id}", access: .signedIn(scope: scope), describedAs: .noContent("Deletes a registration.")) { context in
                let id = try Self.id(context)
                guard try registry.delete(id, of: context.person) else { throw Self.notFound() }
                return Documents.noContent
            },
        ]
    }

    static func fields(_ attributes: Attributes) throws(APIError) -> Device.Details {
        Device.Details(
            platform: try attributes.choice("platform", ["ios", "android"]),
            appId: try attributes.string(
                "appId", maximumLength: 200,
                valid: { $0.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "_" || $0 == "-") } },
                hint: "a bundle id or package name such as eu.wristler.app"),
            appVersion: try attributes.string("appVersion", maximumLength: 30, valid: { AppVersion($0) != nil }, hint: "dotted digits such as 2.4.0"),
            name: try attributes.string("name", maximumLength: 100),
            locale: try attributes.string(
                "locale", maximumLength: 35,
                valid: { $0.range(of: "^[A-Za-z]{2,3}([-_][A-Za-z0-9]{2,8})*$", options: .regularExpression) != nil },
                hint: "a language tag such as nl or en-GB"),
            apnsEnvironment: try attributes.choice("apnsEnvironment", ["development", "production"]))
    }

    /// `apnsEnvironment` is Apple's: an Android registration cannot have one.
    static func check(_ fields: inout Device.Details) throws(APIError) {
        if fields.platform == "android" && fields.apnsEnvironment != nil {
            throw APIError(
                status: 422, code: .invalidField, detail: "apnsEnvironment is for iOS registrations only.", source: Attributes.pointer("apnsEnvironment"))
        }
    }

    static func id(_ context: RequestContext) throws(APIError) -> UUID {
        // An id that is not one of ours is simply not found.
        guard let id = UUID(uuidString: context.parameters["id"] ?? "") else { throw notFound() }
        return id
    }

    static func notFound() -> APIError { APIError(status: 404, code: .notFound, detail: "You have no such device.") }
}

/// A registration as the API shows it: everything but the push token.
extension Device {
    var resource: JSONValue {
        func optional(_ value: String?) -> JSONValue { value.map(JSONValue.string) ?? .null }
        return .object([
            "type": .string("devices"), "id": .string(id.uuidString.lowercased()),
            "attributes": .object([
                "platform": .string(platform), "appId": optional(appId), "appVersion": optional(appVersion), "name": optional(name),
                "locale": optional(locale), "apnsEnvironment": optional(apnsEnvironment), "createdAt": Documents.timestamp(createdAt),
                "updatedAt": Documents.timestamp(updatedAt),
            ]),
        ])
    }
}

extension DeviceRoutes {
    /// A registration as `Device.resource` writes it (never its push token).
    static let device = Schema.resource(
        "Device", type: "devices",
        attributes: [
            "platform": Schema.text, "appId": Schema.nullable(Schema.text), "appVersion": Schema.nullable(Schema.text),
            "name": Schema.nullable(Schema.text), "locale": Schema.nullable(Schema.text), "apnsEnvironment": Schema.nullable(Schema.text),
            "createdAt": Schema.timestamp, "updatedAt": Schema.timestamp,
        ])
}
