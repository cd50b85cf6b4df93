import Foundation
import InboxDomain

/// What an FCM HTTP v1 answer means, from Google's `ErrorCode` list. The code is the `errorCode`
/// of the `google.firebase.fcm.v1.FcmError` entry of `error.details` when there is one, else
/// `error.status`, else the HTTP status alone:
///
/// | HTTP | code                                  | outcome                              |
/// |------|---------------------------------------|--------------------------------------|
/// | 200  |                                       | `.delivered`                         |
/// | 404  | `UNREGISTERED`                        | `.unregistered`                      |
/// | 400  | `INVALID_ARGUMENT` naming the registration token (its message, or a `BadRequest` violation of `message.token`) | `.unregistered` |
/// | 400  | `INVALID_ARGUMENT` otherwise          | `.permanent` (a bad payload, not a bad token) |
/// | 403  | `SENDER_ID_MISMATCH`                  | `.permanent` (another project's token; kept) |
/// | 401  | `THIRD_PARTY_AUTH_ERROR`              | `.permanent` (our APNs credentials at Firebase) |
/// | 401  | `UNAUTHENTICATED`                     | `.expiredProviderToken` (a new access token) |
/// | 429  | `QUOTA_EXCEEDED`                      | `.retry`                             |
/// | 5xx  | `UNAVAILABLE`, `INTERNAL`             | `.retry`                             |
/// | other| `PERMISSION_DENIED`, `NOT_FOUND` without `UNREGISTERED`, … | `.permanent`    |
///
/// Only `UNREGISTERED` and a token named invalid delete: a 404 `NOT_FOUND` that is a wrong project
/// in the URL must not delete every Android registration one push at a time.
public enum FCMAnswer {
    /// The outcome of an answer. `now` reads a `Retry-After` that is a date.
    public static func classify(status: Int, body: [UInt8], retryAfter: String?, now: Date) -> PushOutcome {
        if status == 200 { return .delivered }
        let error = JSONValue.parse(body)?["error"]
        let details = error?["details"]?.items ?? []
        let fcmCode = details.first { $0["@type"]?.stringValue == "type.googleapis.com/google.firebase.fcm.v1.FcmError" }?["errorCode"]?.stringValue
        let code = fcmCode ?? error?["status"]?.stringValue ?? "HTTP \(status)"
        let message = error?["message"]?.stringValue ?? ""
        let reason = message.isEmpty ? code : code + ": " + message
        switch code {
        case "UNREGISTERED":
            return .unregistered(reason: reason)
        case "INVALID_ARGUMENT":
            return namesTheToken(message: message, details: details) ? .unregistered(reason: reason) : .permanent(reason: reason)
        case "SENDER_ID_MISMATCH", "THIRD_PARTY_AUTH_ERROR", "PERMISSION_DENIED":
            return .permanent(reason: reason)
        case "UNAUTHENTICATED":
            return .expiredProviderToken
        case "QUOTA_EXCEEDED", "UNAVAILABLE", "INTERNAL":
            return .retry(reason: reason, after: RetryAfter.parse(retryAfter, now: now))
        default:
            break
        }
        if status == 401 { return .expiredProviderToken }
        if status == 429 || (500...599).contains(status) {
            return .retry(reason: reason, after: RetryAfter.parse(retryAfter, now: now))
        }
        return .permanent(reason: reason)
    }

    /// Whether an `INVALID_ARGUMENT` is about the registration token rather than the message.
    static func namesTheToken(message: String, details: [JSONValue]) -> Bool {
        if message.lowercased().contains("registration token") { return true }
        return details.contains { detail in
            detail["fieldViolations"]?.items.contains { $0["field"]?.stringValue == "message.token" } ?? false
        }
    }
}
