import Foundation
import InboxDomain

/// The body of an APNs request (`POST /3/device/{token}`):
///
/// ```json
/// {"aps":{"alert":{"title":"…","body":"…"},"badge":3,"sound":"default","thread-id":"order:…"},
///  "type":"orders","event":"order_shipped","orderId":"…","watchId":"…","notificationId":"…"}
/// ```
///
/// The routing data sits at the top level beside `aps`, where Apple wants custom keys: the app
/// reads it from `userInfo` as strings, the same keys and values as FCM's `data`. `badge` is there
/// only when the content has one; `thread-id` (the lock screen's grouping) is the collapse key and
/// is left out when there is none. At most 4096 bytes (APNs refuses more with `PayloadTooLarge`):
/// a longer body is cut, never the routing data.
public enum APNsPayload {
    /// APNs' limit for an alert's payload.
    public static let maximumBytes = 4096

    /// The payload of `content`, its body cut to fit when needed.
    public static func encode(_ content: PushContent) throws(PushPayloadError) -> [UInt8] {
        try PayloadBudget.fit(body: content.body, limit: maximumBytes) { body in write(content, body: body) }
    }

    static func write(_ content: PushContent, body: String) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256 + content.title.utf8.count + body.utf8.count + content.data.count * 48)
        out.appendRaw(#"{"aps":{"alert":{"title":"#)
        out.appendJSON(content.title)
        out.appendRaw(#","body":"#)
        out.appendJSON(body)
        out.appendRaw("}")
        if let badge = content.badge {
            out.appendRaw(#","badge":"#)
            out.append(contentsOf: String(max(badge, 0)).utf8)
        }
        out.appendRaw(#","sound":"default""#)
        if let thread = content.collapseId {
            out.appendRaw(#","thread-id":"#)
            out.appendJSON(thread)
        }
        out.appendRaw("}")
        for field in content.data {
            out.append(UInt8(ascii: ","))
            out.appendMember(field.key, field.value)
        }
        out.appendRaw("}")
        return out
    }
}

extension APNsEnvironment {
    /// The host to send to, port 443.
    public var host: String {
        switch self {
        case .production: "api.push.apple.com"
        case .development: "api.sandbox.push.apple.com"
        }
    }
}

/// The headers of an APNs request, besides `authorization: bearer <provider token>` (the sender's,
/// from `APNsProviderToken`).
///
/// - `apns-push-type: alert`: every push here shows words.
/// - `apns-priority: 10`: send at once. Every category is something the person acts on (a message,
///   a payment, a sign-in) or asked to hear about as it happens; 5, which lets Apple hold a push to
///   save power, is for pushes that show nothing.
/// - `apns-expiration`: when Apple stops trying a phone that is off, as unix seconds: the sending
///   time plus a time to live (a day by default, as FCM's `ttl`).
/// - `apns-collapse-id`: the collapse key, only when there is one.
public struct APNsHeaders: Sendable, Hashable {
    /// The bundle id of the app (the registration's `appId`).
    public var topic: String
    public var pushType: String
    public var priority: Int
    /// Unix seconds.
    public var expiration: Int64
    public var collapseId: String?

    /// The time to live of a push when none is given: a day.
    public static let defaultTimeToLive: Duration = .seconds(86_400)

    public init(topic: String, content: PushContent, now: Date, timeToLive: Duration = defaultTimeToLive) {
        self.topic = topic
        self.pushType = "alert"
        self.priority = 10
        self.expiration = Int64(now.timeIntervalSince1970.rounded(.down)) + max(timeToLive.components.seconds, 0)
        self.collapseId = content.collapseId
    }

    /// The headers as HTTP/2 has them: lower-case names, in a fixed order.
    public var fields: [PushField] {
        var fields = [
            PushField("apns-topic", topic), PushField("apns-push-type", pushType), PushField("apns-priority", String(priority)),
            PushField("apns-expiration", String(expiration)),
        ]
        if let collapseId { fields.append(PushField("apns-collapse-id", collapseId)) }
        return fields
    }

    /// The request's path for a device token (hex, as the phone gave it).
    public static func path(deviceToken: String) -> String { "/3/device/" + deviceToken }
}
