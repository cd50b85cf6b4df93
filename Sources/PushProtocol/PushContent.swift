import InboxDomain

/// One key and value of a push's `data`, both strings (FCM's `data` takes nothing else, and the
/// app reads APNs' custom keys the same way).
public struct PushField: Sendable, Hashable {
    public var key: String
    public var value: String

    public init(_ key: String, _ value: String) {
        self.key = key
        self.value = value
    }
}

/// A push rendered for one device: its words in the device's language, the routing data, the
/// collapse key and the badge. Everything a payload is encoded from, and nothing about the
/// transport.
public struct PushContent: Sendable, Hashable {
    public var title: String
    public var body: String
    /// The routing data in a fixed order: `type`, `event`, `side` (a shop's news), the ids by
    /// name, `notificationId` (the person's own notifications).
    public var data: [PushField]
    /// `apns-collapse-id` and FCM's tag and collapse key; nil when it does not collapse.
    public var collapseId: String?
    /// The iOS badge: the person's unread bell count when sent; nil leaves the badge as it is.
    public var badge: Int?

    public init(title: String, body: String, data: [PushField], collapseId: String?, badge: Int?) {
        self.title = title
        self.body = body
        self.data = data
        self.collapseId = collapseId
        self.badge = badge
    }

    /// The value of a `data` key, for tests and logs.
    public subscript(data key: String) -> String? { data.first { $0.key == key }?.value }
}

/// Puts a notification into the words and data of one device's push. Pure, and cheap enough to
/// run per device: table look-ups, a sort of a handful of ids, and a SHA-256 only for a collapse
/// key over 64 bytes.
public enum PushRenderer {
    /// Keys the routing data never takes from `ids`: the fields the renderer writes itself, APNs'
    /// own `aps`, and what FCM refuses or overrides in `data` (`from`, `gcm`, `google…`,
    /// `collapse_key`, `message_type`, `notification`).
    static let reservedKeys: Set<String> = [
        "type", "event", "side", "notificationId", "aps", "from", "gcm", "collapse_key", "message_type", "notification",
    ]

    /// `notification` for a device reading `language`, with the person's unread count as `badge`
    /// (pass nil for Android, which has no badge count of ours).
    public static func render(_ notification: PushNotification, language: Language, badge: Int?) -> PushContent {
        var data: [PushField] = []
        data.reserveCapacity(notification.ids.count + 4)
        data.append(PushField("type", notification.category.rawValue))
        data.append(PushField("event", notification.event))
        if notification.isShopNews { data.append(PushField("side", "seller")) }
        for (key, value) in notification.ids.sorted(by: { $0.key < $1.key }) where !isReserved(key) {
            data.append(PushField(key, value))
        }
        if !notification.isShopNews { data.append(PushField("notificationId", notification.notificationId)) }
        return PushContent(
            title: PushTexts.title(notification, language), body: PushTexts.body(notification, language), data: data,
            collapseId: CollapseKey.of(notification), badge: badge)
    }

    static func isReserved(_ key: String) -> Bool {
        reservedKeys.contains(key) || key.hasPrefix("google")
    }
}
