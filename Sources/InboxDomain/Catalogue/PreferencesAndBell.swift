import Foundation

/// A person switched one channel of one category on or off in the notification preferences.
/// Refused at append for the locked channels (security and orders push cannot be turned off) and
/// for saved searches (governed per search).
public struct NotificationPreferenceChanged: CatalogueEvent, Hashable {
    public static let eventType = "notification_preference_changed"
    public var personId: String
    public var category: NotificationCategory
    public var channel: NotificationChannel
    public var enabled: Bool
    public var streamId: String { Streams.preferences(personId) }

    public init(personId: String, category: NotificationCategory, channel: NotificationChannel, enabled: Bool) {
        self.personId = personId
        self.category = category
        self.channel = channel
        self.enabled = enabled
    }

    public var problem: (field: String, reason: String)? {
        if PreferenceRules.isManagedPerSearch(category) {
            return ("category", "saved_searches has no switch of its own: each saved search has its interval and push")
        }
        if PreferenceRules.isLocked(category, channel) && !enabled {
            return ("enabled", "\(category.rawValue) \(channel.rawValue) is locked on and cannot be turned off")
        }
        return nil
    }
}

/// One bell entry was read (opened in the bell, or the push it belongs to was opened).
public struct NotificationRead: CatalogueEvent, Hashable {
    public static let eventType = "notification_read"
    public var personId: String
    public var notificationId: String
    public var streamId: String { Streams.bell(personId) }

    public init(personId: String, notificationId: String) {
        self.personId = personId
        self.notificationId = notificationId
    }
}

/// Every entry in the person's bell at that moment was marked read.
public struct AllNotificationsRead: CatalogueEvent, Hashable {
    public static let eventType = "all_notifications_read"
    public var personId: String
    public var streamId: String { Streams.bell(personId) }
    public init(personId: String) { self.personId = personId }
}

public struct NotificationDeleted: CatalogueEvent, Hashable {
    public static let eventType = "notification_deleted"
    public var personId: String
    public var notificationId: String
    public var streamId: String { Streams.bell(personId) }

    public init(personId: String, notificationId: String) {
        self.personId = personId
        self.notificationId = notificationId
    }
}

/// The website's "delete all": every entry in the bell at that moment is cleared.
public struct AllNotificationsDeleted: CatalogueEvent, Hashable {
    public static let eventType = "all_notifications_deleted"
    public var personId: String
    public var streamId: String { Streams.bell(personId) }
    public init(personId: String) { self.personId = personId }
}

/// A bell entry carried over from the previous system, such as the retired `offer_accepted`,
/// `offer_received` and `offer_refused`: readable in the bell, never sent.
public struct LegacyNotificationImported: CatalogueEvent, Hashable {
    public static let eventType = "legacy_notification_imported"
    public var personId: String
    public var notificationId: String
    public var category: NotificationCategory
    public var event: String
    /// The ids the entry's screen needs, all strings.
    public var ids: [String: String]
    /// When the entry was made, ISO 8601 (`2024-05-01T10:00:00Z`).
    public var createdAt: String
    public var read: Bool
    public var streamId: String { Streams.bell(personId) }

    /// `createdAt` as a date, nil when it is not an ISO 8601 time.
    public var createdDate: Date? {
        if let date = try? Date(createdAt, strategy: .iso8601) { return date }
        return try? Date(createdAt, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }

    public var problem: (field: String, reason: String)? {
        if createdDate == nil { return ("createdAt", "is not an ISO 8601 time such as 2024-05-01T10:00:00Z") }
        let isSnakeCase = !event.isEmpty && event.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" }
        if !isSnakeCase { return ("event", "must be snake_case (a-z, 0-9, _)") }
        return nil
    }

    public init(
        personId: String, notificationId: String, category: NotificationCategory, event: String, ids: [String: String],
        createdAt: String, read: Bool
    ) {
        self.personId = personId
        self.notificationId = notificationId
        self.category = category
        self.event = event
        self.ids = ids
        self.createdAt = createdAt
        self.read = read
    }
}
