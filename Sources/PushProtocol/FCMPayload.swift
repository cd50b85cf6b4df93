/// The body of an FCM HTTP v1 request (`POST /v1/projects/{project}/messages:send`):
///
/// ```json
/// {"message":{"token":"…","notification":{"title":"…","body":"…"},
///  "data":{"type":"orders","event":"order_shipped","orderId":"…","notificationId":"…"},
///  "android":{"collapse_key":"order:…","priority":"high","ttl":"86400s","notification":{"tag":"order:…"}}}}
/// ```
///
/// `data` is the same string map as APNs' top-level keys. `tag` makes a newer notification replace
/// the older one in the tray, `collapse_key` lets FCM drop the older one while the phone is off;
/// both are left out when the content does not collapse. `priority: high` because every push shows
/// words (Google keeps normal priority for pushes that do not). The whole body stays within 4096
/// bytes (FCM's limit for a message): a longer body is cut, never the routing data or the token.
public enum FCMPayload {
    /// FCM's limit for a message.
    public static let maximumBytes = 4096

    /// The most FCM keeps a message for a phone that is off: four weeks.
    public static let maximumTimeToLive: Duration = .seconds(2_419_200)

    /// The request body of `content` for the registration `token`.
    public static func encode(_ content: PushContent, token: String, ttl: Duration = APNsHeaders.defaultTimeToLive) throws(PushPayloadError)
        -> [UInt8]
    {
        let seconds = min(max(ttl.components.seconds, 0), maximumTimeToLive.components.seconds)
        return try PayloadBudget.fit(body: content.body, limit: maximumBytes) { body in
            write(content, body: body, token: token, ttlSeconds: seconds)
        }
    }

    /// The request's path for a Firebase project.
    public static func path(projectId: String) -> String { "/v1/projects/" + projectId + "/messages:send" }

    static func write(_ content: PushContent, body: String, token: String, ttlSeconds: Int64) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(320 + token.utf8.count + content.title.utf8.count + body.utf8.count + content.data.count * 48)
        out.appendRaw(#"{"message":{"token":"#)
        out.appendJSON(token)
        out.appendRaw(#","notification":{"title":"#)
        out.appendJSON(content.title)
        out.appendRaw(#","body":"#)
        out.appendJSON(body)
        out.appendRaw(#"},"data":{"#)
        for (index, field) in content.data.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.appendMember(field.key, field.value)
        }
        out.appendRaw(#"},"android":{"#)
        if let collapseId = content.collapseId {
            out.appendRaw(#""collapse_key":"#)
            out.appendJSON(collapseId)
            out.append(UInt8(ascii: ","))
        }
        out.appendRaw(#""priority":"high","ttl":""#)
        out.append(contentsOf: String(ttlSeconds).utf8)
        out.appendRaw(#"s""#)
        if let collapseId = content.collapseId {
            out.appendRaw(#","notification":{"tag":"#)
            out.appendJSON(collapseId)
            out.appendRaw("}")
        }
        out.appendRaw("}}}")
        return out
    }
}
