/// What a person chose for one saved search: how often it mails, and whether it pushes.
public struct SavedSearchSettings: Sendable, Hashable {
    public var interval: SavedSearchInterval
    public var push: Bool

    public init(interval: SavedSearchInterval, push: Bool) {
        self.interval = interval
        self.push = push
    }
}

/// The rules of the notification preferences, without storage: which switches exist, which are
/// locked on, and which channels a notification goes to given a person's choices.
///
/// - Every category is on, on every channel, unless the person turned it off.
/// - `security` and `orders` push are locked on: a stored "off" for them is ignored.
/// - `saved_searches` has no switches of its own: each search decides (`push`, and `interval` for
///   mail, `never` meaning no mail).
/// - `shop` reaches only people who work at the shop, and never the bell.
/// - The bell itself is not a channel: every notification about the person lands there.
public enum PreferenceRules {
    /// Whether the channel of the category cannot be turned off.
    public static func isLocked(_ category: NotificationCategory, _ channel: NotificationChannel) -> Bool {
        channel == .push && (category == .security || category == .orders)
    }

    /// Whether the category is governed per saved search rather than by a switch.
    public static func isManagedPerSearch(_ category: NotificationCategory) -> Bool {
        category == .savedSearches
    }

    /// Whether the person can change the switch at `/v1/me/notification-preferences`.
    public static func isSwitchable(_ category: NotificationCategory, _ channel: NotificationChannel) -> Bool {
        !isLocked(category, channel) && !isManagedPerSearch(category)
    }

    /// The state of a switch given what the person stored (nil: never touched).
    public static func isEnabled(_ category: NotificationCategory, _ channel: NotificationChannel, stored: Bool?) -> Bool {
        if isLocked(category, channel) { return true }
        return stored ?? true
    }

    /// The channels a notification of `category` goes to. `stored` is the person's switch for a
    /// channel (nil when never touched); `savedSearch` is the search a saved-search notification is
    /// about (nil when it is gone: nothing is sent for a deleted search).
    public static func channels(
        for category: NotificationCategory, stored: (NotificationChannel) -> Bool?, savedSearch: SavedSearchSettings? = nil
    ) -> Set<NotificationChannel> {
        if isManagedPerSearch(category) {
            guard let savedSearch else { return [] }
            var channels: Set<NotificationChannel> = []
            if savedSearch.push { channels.insert(.push) }
            if savedSearch.interval != .never { channels.insert(.email) }
            return channels
        }
        return Set(NotificationChannel.allCases.filter { isEnabled(category, $0, stored: stored($0)) })
    }
}
