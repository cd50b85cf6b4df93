import Foundation
import InboxDomain

/// What an APNs answer means, from Apple's "Handling notification responses from APNs" (the
/// status, and the `reason` of the JSON body of a refusal):
///
/// | status | reason                                   | outcome                         |
/// |--------|------------------------------------------|---------------------------------|
/// | 200    |                                          | `.delivered`                    |
/// | 410    | `Unregistered`, `ExpiredToken`, any      | `.unregistered`                 |
/// | 400    | `DeviceTokenNotForTopic`                 | `.unregistered` (another app's token: it never will be ours) |
/// | 400    | `BadDeviceToken`                         | `.badDeviceToken` (probe the other host once, then delete) |
/// | 403    | `ExpiredProviderToken`                   | `.expiredProviderToken`         |
/// | 400    | `IdleTimeout`                            | `.retry` (the connection's, not the push's) |
/// | 429    | `TooManyRequests`, `TooManyProviderTokenUpdates` | `.retry`                |
/// | 5xx    | `InternalServerError`, `ServiceUnavailable`, `Shutdown` | `.retry`         |
/// | other  | `PayloadTooLarge`, `MissingTopic`, `BadCollapseId`, `BadTopic`, `TopicDisallowed`, `InvalidProviderToken`, `Forbidden`, … | `.permanent` |
///
/// `InvalidProviderToken` is permanent rather than a reason to sign again: a new token from the
/// same wrong key or team is refused the same way, and signing in a loop would earn
/// `TooManyProviderTokenUpdates`. Apple sends no `Retry-After` today; one is honoured if it comes.
public enum APNsAnswer {
    /// The outcome of an answer. `now` reads a `Retry-After` that is a date.
    public static func classify(status: Int, body: [UInt8], retryAfter: String?, now: Date) -> PushOutcome {
        if status == 200 { return .delivered }
        let reason = JSONValue.parse(body)?["reason"]?.stringValue ?? "HTTP \(status)"
        if status == 410 { return .unregistered(reason: reason) }
        switch reason {
        case "DeviceTokenNotForTopic", "Unregistered", "ExpiredToken": return .unregistered(reason: reason)
        case "BadDeviceToken": return .badDeviceToken
        case "ExpiredProviderToken": return .expiredProviderToken
        case "IdleTimeout": return .retry(reason: reason, after: RetryAfter.parse(retryAfter, now: now))
        default: break
        }
        if status == 429 || (500...599).contains(status) {
            return .retry(reason: reason, after: RetryAfter.parse(retryAfter, now: now))
        }
        return .permanent(reason: reason)
    }
}
