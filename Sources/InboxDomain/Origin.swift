/// Where a fact was made: the app on a platform (with its version), the website, or an integration.
/// Recorded in every event's metadata as `origin` (`app:ios`, `app:android`, `web`, `api`).
public enum Origin: String, Codable, Sendable, Hashable, CaseIterable {
    case appIOS = "app:ios"
    case appAndroid = "app:android"
    case web
    case api
}

/// Facts about an event that are not part of what happened: who and what caused it, and from where.
public struct EventMetadata: Codable, Sendable, Hashable {
    public var origin: Origin
    /// The app's release version (`2.4.0`) when `origin` is an app.
    public var appVersion: String?
    /// The person or service that caused the event.
    public var actor: String?
    /// Shared by every event of one request or workflow.
    public var correlationId: String?
    /// The event or command that directly caused this one.
    public var causationId: String?
    /// The service that wrote the event (`inbox`, `orders`, `catalogue`, `identity`).
    public var service: String?

    public init(
        origin: Origin = .api, appVersion: String? = nil, actor: String? = nil, correlationId: String? = nil,
        causationId: String? = nil, service: String? = nil
    ) {
        self.origin = origin
        self.appVersion = appVersion
        self.actor = actor
        self.correlationId = correlationId
        self.causationId = causationId
        self.service = service
    }
}
