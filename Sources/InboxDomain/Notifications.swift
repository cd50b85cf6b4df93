/// A switch in the notification preferences, and the `type` of every bell entry and push.
public enum NotificationCategory: String, Codable, Sendable, Hashable, CaseIterable {
    case messages
    case orders
    case savedWatches = "saved_watches"
    case savedSearches = "saved_searches"
    case security
    /// A shop's news, for the people who work at it: push (and mail) only, never the bell.
    case shop
}

/// How a notification reaches a person besides the bell.
public enum NotificationChannel: String, Codable, Sendable, Hashable, CaseIterable {
    case push
    case email
}
