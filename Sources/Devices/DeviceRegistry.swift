import Foundation
import InboxDomain
import PostgresClient

/// The push registrations (the `devices` table), for the API and for the push fan-out, which
/// deletes a registration APNs or FCM has declared dead without going through HTTP.
///
/// Validation of what a client sends is the caller's; the registry guarantees the table's rules:
/// one registration per push token, and a person reaches only their own registrations by id. Calls
/// block the calling thread on a pooled connection (run them where blocking is allowed).
public struct DeviceRegistry: Sendable {
    public let client: PostgresClient

    public init(client: PostgresClient) {
        self.client = client
    }

    /// What `register` did.
    public enum Registration: Sendable, Hashable {
        /// The token was new here, or was somebody else's: a new registration (a previous owner's
        /// id for it stops working).
        case created(Device)
        /// The person had the token already: its registration now says `details`.
        case updated(Device)

        public var device: Device {
            switch self {
            case .created(let device), .updated(let device): device
            }
        }
    }

    /// Registers `pushToken` for `person`: an upsert keyed by the token. `details.platform` is
    /// required for a token new to the person.
    public func register(person: String, pushToken: String, details: Device.Details) throws -> Registration {
        // Two registrations of one new token at once: the second to insert hits the unique token
        // and, tried again, finds the first's row.
        var attempt = 1
        while true {
            do {
                return try client.transactionBlocking { connection in
                    let owner = try connection.query("SELECT id, person_id FROM devices WHERE push_token = $1 FOR UPDATE", pushToken).first
                    if let owner, try owner.decode(String.self, "person_id") == person {
                        let id = try owner.decode(UUID.self, "id")
                        guard let updated = try Self.change(id: id, of: person, to: details, on: connection) else {
                            throw PostgresError(.unexpectedNull, "The device \(id) went away while it was locked.")
                        }
                        return .updated(updated)
                    }
                    if owner != nil { try connection.query("DELETE FROM devices WHERE push_token = $1", pushToken) }
                    let inserted = try connection.query(
                        """
                        INSERT INTO devices (person_id, platform, push_token, app_id, app_version, name, locale, apns_environment)
                        VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *
                        """, person, details.platform, pushToken, details.appId, details.appVersion, details.name, details.locale,
                        details.apnsEnvironment)
                    return .created(try Device(row: inserted[0]))
                }
            } catch let error as PostgresError where error.isUniqueViolation && attempt < 3 {
                attempt += 1
            }
        }
    }

    /// The person's registrations, oldest first, `limit` of them after skipping `offset`.
    public func devices(of person: String, limit: Int, offset: Int = 0) throws -> [Device] {
        try client.queryBlocking(
            "SELECT * FROM devices WHERE person_id = $1 ORDER BY created_at, id LIMIT $2 OFFSET $3",
            binds: [PostgresBind(person), PostgresBind(Int64(limit)), PostgresBind(Int64(offset))], retryIfFoundDead: true
        ) { try Device(row: $0) }
    }

    /// The person's registration `id`; nil when there is none, or it is somebody else's.
    public func device(_ id: UUID, of person: String) throws -> Device? {
        try client.queryBlocking(
            "SELECT * FROM devices WHERE id = $1 AND person_id = $2", binds: [PostgresBind(id), PostgresBind(person)], retryIfFoundDead: true
        ) {
            try Device(row: $0)
        }.first
    }

    /// Sets the given details (absent ones keep their value) of the person's registration `id`;
    /// nil when there is none, or it is somebody else's. The token never changes: a new token is a
    /// new registration.
    public func change(_ id: UUID, of person: String, to details: Device.Details) throws -> Device? {
        try client.withConnectionBlocking { connection in try Self.change(id: id, of: person, to: details, on: connection) }
    }

    /// Deletes the person's registration `id`; whether there was one (somebody else's is left alone).
    @discardableResult
    public func delete(_ id: UUID, of person: String) throws -> Bool {
        try client.withConnectionBlocking { connection in
            try connection.query("DELETE FROM devices WHERE id = $1 AND person_id = $2", id, person).affectedRows ?? 0
        } > 0
    }

    /// Deletes the registration of `pushToken`, whoever's it is: what the push fan-out does when
    /// APNs or FCM says the token is dead. Whether there was one.
    @discardableResult
    public func delete(pushToken: String) throws -> Bool {
        try client.withConnectionBlocking { connection in
            try connection.query("DELETE FROM devices WHERE push_token = $1", pushToken).affectedRows ?? 0
        } > 0
    }

    // MARK: For the push fan-out, in its transactions

    /// A registration as a push needs it, typed.
    public struct PushRegistration: Sendable, Hashable {
        public var id: UUID
        public var personId: String
        public var platform: DevicePlatform
        public var token: String
        public var appId: String?
        public var locale: String?
        /// The APNs host the token is known to belong to; nil: not known yet.
        public var apnsEnvironment: APNsEnvironment?
        public var createdAt: Date

        public init(
            id: UUID, personId: String, platform: DevicePlatform, token: String, appId: String? = nil, locale: String? = nil,
            apnsEnvironment: APNsEnvironment? = nil, createdAt: Date
        ) {
            self.id = id
            self.personId = personId
            self.platform = platform
            self.token = token
            self.appId = appId
            self.locale = locale
            self.apnsEnvironment = apnsEnvironment
            self.createdAt = createdAt
        }

        /// A row of `pushColumns`, read by position: the fan-out reads one per push.
        init?(row: PostgresRow) throws {
            guard let platform = DevicePlatform(rawValue: try row.decode(String.self, at: 2)) else { return nil }
            self.init(
                id: try row.decode(UUID.self, at: 0), personId: try row.decode(String.self, at: 1), platform: platform,
                token: try row.decode(String.self, at: 3), appId: try row.decode(String?.self, at: 4), locale: try row.decode(String?.self, at: 5),
                apnsEnvironment: try row.decode(String?.self, at: 6).flatMap(APNsEnvironment.init(rawValue:)), createdAt: try row.decode(Date.self, at: 7))
        }
    }

    /// The columns `PushRegistration(row:)` reads, in its order.
    static let pushColumns = "id, person_id, platform, push_token, app_id, locale, apns_environment, created_at"

    /// Every registration of `people`, per person, oldest first.
    ///
    /// The people are matched through `ARRAY(SELECT unnest(...))`, which the planner sees as one
    /// unknown array: given the array itself it estimates each of a fan-out batch's ~1,000 people
    /// against the column's most common values, 3.3 ms of planning for a 2 ms query.
    public static func pushRegistrations(of people: some Collection<String>, on connection: PostgresConnection) throws -> [String: [PushRegistration]] {
        if people.isEmpty { return [:] }
        var registrations: [String: [PushRegistration]] = [:]
        for row in try connection.query(
            "SELECT \(pushColumns) FROM devices WHERE person_id = ANY(ARRAY(SELECT unnest($1::text[]))) ORDER BY created_at, id",
            Array(Set(people)))
        {
            guard let registration = try PushRegistration(row: row) else { continue }
            registrations[registration.personId, default: []].append(registration)
        }
        return registrations
    }

    /// The registrations `ids` that are still their person's, by id (one deleted, or taken over by
    /// somebody else since, is absent).
    public static func pushRegistrations(
        _ ids: [(id: UUID, personId: String)], on connection: PostgresConnection
    ) throws -> [UUID: PushRegistration] {
        if ids.isEmpty { return [:] }
        var registrations: [UUID: PushRegistration] = [:]
        for row in try connection.query(
            """
            SELECT \(pushColumns) FROM devices d WHERE d.id = ANY($1::uuid[])
                AND (d.id, d.person_id) IN (SELECT * FROM unnest($1::uuid[], $2::text[]))
            """, ids.map(\.id), ids.map(\.personId))
        {
            guard let registration = try PushRegistration(row: row) else { continue }
            registrations[registration.id] = registration
        }
        return registrations
    }

    /// The registrations `ids` that still exist, by id, whoever's they are now.
    public static func pushRegistrations(ids: [UUID], on connection: PostgresConnection) throws -> [UUID: PushRegistration] {
        if ids.isEmpty { return [:] }
        var registrations: [UUID: PushRegistration] = [:]
        for row in try connection.query("SELECT \(pushColumns) FROM devices WHERE id = ANY($1::uuid[])", ids) {
            guard let registration = try PushRegistration(row: row) else { continue }
            registrations[registration.id] = registration
        }
        return registrations
    }

    /// Deletes the registrations `ids`: those APNs or FCM declared dead.
    public static func delete(_ ids: [UUID], on connection: PostgresConnection) throws {
        if ids.isEmpty { return }
        try connection.query("DELETE FROM devices WHERE id = ANY($1::uuid[])", ids)
    }

    /// Stores the APNs host each registration's token was found to belong to.
    public static func learned(_ environments: [UUID: APNsEnvironment], on connection: PostgresConnection) throws {
        if environments.isEmpty { return }
        let ids = Array(environments.keys)
        try connection.query(
            """
            UPDATE devices v SET apns_environment = u.environment, updated_at = clock_timestamp()
            FROM unnest($1::uuid[], $2::text[]) AS u(id, environment)
            WHERE v.id = u.id AND v.id = ANY($1::uuid[]) AND v.apns_environment IS DISTINCT FROM u.environment
            """, ids, ids.map { environments[$0]!.rawValue })
    }

    static func change(id: UUID, of person: String, to details: Device.Details, on connection: PostgresConnection) throws -> Device? {
        try connection.query(
            """
            UPDATE devices SET platform = coalesce($3, platform), app_id = coalesce($4, app_id), app_version = coalesce($5, app_version),
                name = coalesce($6, name), locale = coalesce($7, locale), apns_environment = coalesce($8, apns_environment),
                updated_at = clock_timestamp()
            WHERE id = $1 AND person_id = $2 RETURNING *
            """, id, person, details.platform, details.appId, details.appVersion, details.name, details.locale, details.apnsEnvironment
        ).first.map(Device.init(row:))
    }
}
