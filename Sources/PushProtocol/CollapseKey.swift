import Crypto
import Encodings
import InboxDomain

/// Which pushes replace each other on the lock screen: `apns-collapse-id` for APNs, and FCM's
/// `android.notification.tag` and `android.collapse_key`. A newer push with the same key replaces
/// the older one, so the phone shows where an order or a thread ended up rather than every step.
///
/// | category          | key                                          |
/// |-------------------|----------------------------------------------|
/// | `orders`          | `order:<orderId>`                            |
/// | `saved_watches`   | `watch:<watchId>`                            |
/// | `saved_searches`  | `search:<savedSearchId>`                     |
/// | `messages`        | `conversation:<conversationId>`              |
/// | `shop`            | `shop:<sellerId>:order:<orderId>`, else `shop:<sellerId>:conversation:<conversationId>`; the `shop_unanswered` reminder `shop:<sellerId>:unanswered` |
/// | `security`, and any other without the id its category collapses on | `notification:<notificationId>`: its own |
///
/// A shop's keys start with the seller, so the news of two shops somebody works at never replace
/// each other, nor the person's own order or thread. Every push has a key: one that names nothing
/// but the notification itself replaces only a copy of itself, which is what a fan-out that
/// crashed after handing a push over sends again, so the phone shows each sign-in once. A key is at most 64 bytes (APNs refuses a longer `apns-collapse-id`
/// with `BadCollapseId`); a longer one is replaced by `sha256:` and the base64url of its SHA-256
/// (50 bytes), which keeps it distinct and the same every time.
public enum CollapseKey {
    /// APNs' limit on `apns-collapse-id`.
    public static let maximumBytes = 64

    /// The key of `notification`.
    public static func of(_ notification: PushNotification) -> String {
        fitted(group(notification) ?? "notification:" + notification.notificationId)
    }

    /// The group the seed names for the notification's category, nil when it has none (security)
    /// or lacks the id it would collapse on.
    static func group(_ notification: PushNotification) -> String? {
        let ids = notification.ids
        switch notification.category {
        case .security:
            return nil
        case .orders:
            return ids["orderId"].map { "order:" + $0 }
        case .savedWatches:
            return ids["watchId"].map { "watch:" + $0 }
        case .savedSearches:
            return ids["savedSearchId"].map { "search:" + $0 }
        case .messages:
            return ids["conversationId"].map { "conversation:" + $0 }
        case .shop:
            guard let sellerId = ids["sellerId"] else { return nil }
            if let orderId = ids["orderId"] { return "shop:" + sellerId + ":order:" + orderId }
            if let conversationId = ids["conversationId"] { return "shop:" + sellerId + ":conversation:" + conversationId }
            // The reminder carries everything still waiting: the newer one replaces the older.
            if notification.kind == .shopUnanswered { return "shop:" + sellerId + ":unanswered" }
            return nil
        }
    }

    /// `key` itself when it fits in 64 bytes, its SHA-256 short form when it does not.
    public static func fitted(_ key: String) -> String {
        if key.utf8.count <= maximumBytes { return key }
        return "sha256:" + Base64URL.encode(SHA256.digest(key.utf8))
    }
}
