import Foundation
import PostgresClient

/// A push registration: one handset's push token, and the person signed in on it. A token is in at
/// most one registration, so it reaches one person only.
///
/// `pushToken` is a credential: the push fan-out needs it, the API never shows it.
public struct Device: Sendable, Hashable {
    public var id: UUID
    public var personId: String
    /// `ios` or `android`.
    public var platform: String
    public var pushToken: String
    public var appId: String?
    public var appVersion: String?
    public var name: String?
    public var locale: String?
    /// Which APNs a token of an iOS build belongs to: `development` or `production`.
    public var apnsEnvironment: String?
    public var createdAt: Date
    public var updatedAt: Date

    /// What a registration says besides its token, to set or change; nil leaves a value as it is.
    public struct Details: Sendable, Hashable {
        public var platform: String?
        public var appId: String?
        public var appVersion: String?
        public var name: String?
        public var locale: String?
        public var apnsEnvironment: String?

        public init(
            platform: String? = nil, appId: String? = nil, appVersion: String? = nil, name: String? = nil, locale: String? = nil,
            apnsEnvironment: String? = nil
        ) {
            self.platform = platform
            self.appId = appId
            self.appVersion = appVersion
            self.name = name
            self.locale = locale
            self.apnsEnvironment = apnsEnvironment
        }
    }

    init(row: PostgresRow) throws {
        id = try row.decode(UUID.self, "id")
        personId = try row.decode(String.self, "person_id")
        platform = try row.decode(String.self, "platform")
        pushToken = try row.decode(String.self, "push_token")
        appId = try row.decode(String?.self, "app_id")
        appVersion = try row.decode(String?.self, "app_version")
        name = try row.decode(String?.self, "name")
        locale = try row.decode(String?.self, "locale")
        apnsEnvironment = try row.decode(String?.self, "apns_environment")
        createdAt = try row.decode(Date.self, "created_at")
        updatedAt = try row.decode(Date.self, "updated_at")
    }
}
