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

    struct Fields {
        var platform: String?
        var appId: String?
        var appVersion: String?
        var name: String?
        var locale: String?
        var apnsEnvironment: String?
    }

    public static func routes(client: PostgresClient) -> [Route] {
        [
            Route(.post, "/v1/me/devices", access: .signedIn(scope: scope)) { context in
                let data = try context.resourceDocument()
                try Documents.requireType(data, "devices", id: nil)
                let attributes = try Attributes(data, allowed: Self.attributes)
                let token = try attributes.string("pushToken", required: true, maximumLength: 4096, valid: { !$0.contains(where: \.isWhitespace) }, hint: "without spaces")!
                var fields = try Self.fields(attributes)
                guard fields.platform != nil else {
                    throw APIError(status: 422, code: .missingField, detail: "The platform field is required.", source: Attributes.pointer("platform"))
                }
                try Self.check(&fields)
                let person = context.person
                let stored = fields
                // Two registrations of one new token at once: the second finds the first's row.
                let (row, created) = try Self.retryingUniqueViolations {
                    try client.transactionBlocking { connection -> (Device, Bool) in
                        let owner = try connection.query("SELECT id, person_id FROM devices WHERE push_token = $1 FOR UPDATE", token).first
                        if let owner, try owner.decode(String.self, "person_id") == person {
                            let id = try owner.decode(UUID.self, "id")
                            return (try Self.update(id: id, person: person, with: stored, on: connection)!, false)
                        }
                        if owner != nil { try connection.query("DELETE FROM devices WHERE push_token = $1", token) }
                        let inserted = try connection.query(
                            """
                            INSERT INTO devices (person_id, platform, push_token, app_id, app_version, name, locale, apns_environment)
                            VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *
                            """, person, stored.platform, token, stored.appId, stored.appVersion, stored.name, stored.locale, stored.apnsEnvironment)
                        return (try Device(row: inserted[0]), true)
                    }
                }
                return Documents.response(status: created ? 201 : 200, ["data": row.resource])
            },
            Route(.get, "/v1/me/devices", access: .signedIn(scope: scope)) { context in
                let (number, size) = try context.numberedPage()
                let person = context.person
                let rows = try client.queryBlocking(
                    "SELECT * FROM devices WHERE person_id = $1 ORDER BY created_at, id LIMIT $2 OFFSET $3",
                    binds: [PostgresBind(person), PostgresBind(Int64(size + 1)), PostgresBind(Int64((number - 1) * size))]
                ) { try Device(row: $0) }
                var links: [String: JSONValue] = [
                    "self": Documents.link("/v1/me/devices", [("page[number]", String(number)), ("page[size]", String(size))])
                ]
                if rows.count > size {
                    links["next"] = Documents.link("/v1/me/devices", [("page[number]", String(number + 1)), ("page[size]", String(size))])
                }
                return Documents.response(["data": .array(rows.prefix(size).map(\.resource)), "links": .object(links)])
            },
            Route(.get, "/v1/me/devices/{id}", access: .signedIn(scope: scope)) { context in
                let id = try Self.id(context)
                let person = context.person
                guard let device = try Self.find(id: id, person: person, client: client) else { throw Self.notFound() }
                return Documents.response(["data": device.resource])
            },
            Route(.patch, "/v1/me/devices/{id}", access: .signedIn(scope: scope)) { context in
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
                let person = context.person
                let current = try Self.find(id: id, person: person, client: client)
                guard let current else { throw Self.notFound() }
                if fields.platform == nil { fields.platform = current.platform }
                try Self.check(&fields)
                let changes = fields
                let updated = try client.withConnectionBlocking { connection in try Self.update(id: id, person: person, with: changes, on: connection) }
                guard let updated else { throw Self.notFound() }
                return Documents.response(["data": updated.resource])
            },
            Route(.delete, "/v1/me/devices/{id}", access: .signedIn(scope: scope)) { context in
                let id = try Self.id(context)
                let person = context.person
                let deleted = try client.withConnectionBlocking { connection in
                    try connection.query("DELETE FROM devices WHERE id = $1 AND person_id = $2", id, person).affectedRows ?? 0
                }
                guard deleted > 0 else { throw Self.notFound() }
                return Documents.noContent
            },
        ]
    }

    static func retryingUniqueViolations<T>(_ body: () throws -> T) throws -> T {
        var attempt = 1
        while true {
            do {
                return try body()
            } catch let error as PostgresError where error.isUniqueViolation && attempt < 3 {
                attempt += 1
            }
        }
    }

    static func fields(_ attributes: Attributes) throws(APIError) -> Fields {
        Fields(
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
    static func check(_ fields: inout Fields) throws(APIError) {
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

    static func find(id: UUID, person: String, client: PostgresClient) throws -> Device? {
        try client.queryBlocking("SELECT * FROM devices WHERE id = $1 AND person_id = $2", binds: [PostgresBind(id), PostgresBind(person)]) {
            try Device(row: $0)
        }.first
    }

    /// Sets the given fields (absent ones keep their value) of the person's device.
    static func update(id: UUID, person: String, with fields: Fields, on connection: PostgresConnection) throws -> Device? {
        try connection.query(
            """
            UPDATE devices SET platform = coalesce($3, platform), app_id = coalesce($4, app_id), app_version = coalesce($5, app_version),
                name = coalesce($6, name), locale = coalesce($7, locale), apns_environment = coalesce($8, apns_environment),
                updated_at = clock_timestamp()
            WHERE id = $1 AND person_id = $2 RETURNING *
            """, id, person, fields.platform, fields.appId, fields.appVersion, fields.name, fields.locale, fields.apnsEnvironment
        ).first.map(Device.init(row:))
    }
}

/// A registration as the API shows it: everything but the push token.
struct Device: Sendable {
    var id: UUID
    var platform: String
    var appId: String?
    var appVersion: String?
    var name: String?
    var locale: String?
    var apnsEnvironment: String?
    var createdAt: Date
    var updatedAt: Date

    init(row: PostgresRow) throws {
        id = try row.decode(UUID.self, "id")
        platform = try row.decode(String.self, "platform")
        appId = try row.decode(String?.self, "app_id")
        appVersion = try row.decode(String?.self, "app_version")
        name = try row.decode(String?.self, "name")
        locale = try row.decode(String?.self, "locale")
        apnsEnvironment = try row.decode(String?.self, "apns_environment")
        createdAt = try row.decode(Date.self, "created_at")
        updatedAt = try row.decode(Date.self, "updated_at")
    }

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
