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
/// | `security`        | none: every sign-in and change stays on screen |
///
/// A shop's keys start with the seller, so the news of two shops somebody works at never replace
/// each other, nor the person's own order or thread. A notification without the id its category
/// collapses on has no key. A key is at most 64 bytes (APNs refuses a longer `apns-collapse-id`
/// with `BadCollapseId`); a longer one is replaced by `sha256:` and the base64url of its SHA-256
/// (50 bytes), which keeps it distinct and the same every time.
public enum CollapseKey {
    /// APNs' limit on `apns-collapse-id`.
    public static let maximumBytes = 64

    /// The key of `notification`, nil when it does not collapse.
    public static func of(_ notification: PushNotification) -> String? {
        let ids = notification.ids
        let key: String
        switch notification.category {
        case .security:
            return nil
        case .orders:
            guard let orderId = ids["orderId"] else { return nil }
            key = "order:" + orderId
        case .savedWatches:
            guard let watchId = ids["watchId"] else { return nil }
            key = "watch:" + watchId
        case .savedSearches:
            guard let savedSearchId = ids["savedSearchId"] else { return nil }
            key = "search:" + savedSearchId
        case .messages:
            guard let conversationId = ids["conversationId"] else { return nil }
            key = "conversation:" + conversationId
        case .shop:
            guard let sellerId = ids["sellerId"] else { return nil }
            if let orderId = ids["orderId"] {
                key = "shop:" + sellerId + ":order:" + orderId
            } else if let conversationId = ids["conversationId"] {
                key = "shop:" + sellerId + ":conversation:" + conversationId
            } else if notification.event == "shop_unanswered" {
                // The reminder carries everything still waiting: the newer one replaces the older.
                key = "shop:" + sellerId + ":unanswered"
            } else {
                return nil
            }
        }
        return fitted(key)
    }

    /// `key` itself when it fits in 64 bytes, its SHA-256 short form when it does not.
    public static func fitted(_ key: String) -> String {
        if key.utf8.count <= maximumBytes { return key }
        return "sha256:" + Base64URL.encode(SHA256.digest(key.utf8))
    }
}
