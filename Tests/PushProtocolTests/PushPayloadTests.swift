import Foundation
import InboxDomain
import PushProtocol
import Testing

/// Rendering and encoding: the data the app routes on, collapse keys, and the two providers'
/// bodies read back by an independent JSON parser.
@Suite struct PushPayloadTests {
    static let uuid1 = "0b7f4c1e-3a52-4d6b-9e8f-1c2d3e4f5a6b"
    static let uuid2 = "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a"

    static let shipped = PushNotification(
        kind: .orderShipped, ids: ["watchId": "w-1", "orderId": "o-1", "conversationId": "c-1"], notificationId: "n-1")

    static func object(_ bytes: [UInt8]) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }

    @Test func dataCarriesTypeEventTheIdsAndTheBellEntryInAFixedOrder() {
        let content = PushRenderer.render(Self.shipped, language: .nl, badge: 4)
        #expect(content.data.map(\.key) == ["type", "event", "conversationId", "orderId", "watchId", "notificationId"])
        #expect(content[data: "type"] == "orders")
        #expect(content[data: "event"] == "order_shipped")
        #expect(content[data: "orderId"] == "o-1")
        #expect(content[data: "notificationId"] == "n-1")
        #expect(content[data: "side"] == nil)
        #expect(content.title == "Je horloge is onderweg")
        #expect(content.collapseId == "order:o-1")
        #expect(content.badge == 4)
    }

    @Test func aShopsNewsCarriesSideAndSellerAndNoBellEntry() {
        let news = PushNotification(
            kind: .shopOrderPaid, ids: ["orderId": "o-1", "watchId": "w-1", "sellerId": "s-1"], notificationId: "ignored")
        let content = PushRenderer.render(news, language: .en, badge: nil)
        #expect(content[data: "type"] == "shop")
        #expect(content[data: "side"] == "seller")
        #expect(content[data: "sellerId"] == "s-1")
        #expect(content[data: "notificationId"] == nil)
        #expect(content.collapseId == "shop:s-1:order:o-1")
    }

    @Test func idsNeverOverwriteTheFieldsTheRendererWrites() {
        let sneaky = PushNotification(
            kind: .messageReceived, ids: ["type": "x", "aps": "x", "googleThing": "x", "conversationId": "c"],
            notificationId: "n")
        let content = PushRenderer.render(sneaky, language: .en, badge: nil)
        #expect(content.data.map(\.key) == ["type", "event", "conversationId", "notificationId"])
        #expect(content[data: "type"] == "messages")
    }

    @Test func collapseKeysArePerOrderWatchSearchAndThreadAndTheNotificationsOwnForTheRest() {
        func key(_ kind: NotificationKind, _ ids: [String: String]) -> String {
            CollapseKey.of(PushNotification(kind: kind, ids: ids, notificationId: "n-7"))
        }
        #expect(key(.orderPaid, ["orderId": "o", "conversationId": "c", "watchId": "w"]) == "order:o")
        #expect(key(.priceDropped, ["watchId": "w"]) == "watch:w")
        #expect(key(.savedSearchMatched, ["savedSearchId": "s", "watchId": "w"]) == "search:s")
        #expect(key(.messageReceived, ["conversationId": "c", "messageId": "m", "watchId": "w"]) == "conversation:c")
        #expect(key(.shopMessageReceived, ["sellerId": "s", "conversationId": "c"]) == "shop:s:conversation:c")
        // The reminder of buyers waiting names no thread: each replaces the shop's last one.
        #expect(key(.shopUnanswered, ["sellerId": "s"]) == "shop:s:unanswered")
        // A security notification, or one without the id its group needs, collapses only with a
        // copy of itself: a push sent again after a crash replaces the first on the lock screen.
        #expect(key(.newSignIn, ["signInId": "x"]) == "notification:n-7")
        #expect(key(.orderPaid, [:]) == "notification:n-7")
        #expect(key(.shopMessageReceived, ["conversationId": "c"]) == "notification:n-7")
        #expect(key(.shopOfferMade, ["sellerId": "s"]) == "notification:n-7")
        #expect(CollapseKey.of(PushNotification(kind: .newSignIn, ids: [:], notificationId: "n-8")) != key(.newSignIn, [:]))
    }

    @Test func collapseKeysFitIn64BytesStayDistinctAndNeverMixTwoShops() {
        let a = CollapseKey.of(PushNotification(kind: .shopMessageReceived, ids: ["sellerId": Self.uuid1, "conversationId": Self.uuid2], notificationId: "n"))
        let b = CollapseKey.of(PushNotification(kind: .shopMessageReceived, ids: ["sellerId": Self.uuid2, "conversationId": Self.uuid2], notificationId: "n"))
        let own = CollapseKey.of(PushNotification(kind: .messageReceived, ids: ["conversationId": Self.uuid2], notificationId: "n"))
        #expect(Set([a, b, own]).count == 3)
        for key in [a, b, own] { #expect(key.utf8.count <= CollapseKey.maximumBytes, "\(key)") }
        #expect(a.hasPrefix("sha256:"))
        #expect(own == "conversation:" + Self.uuid2)
        #expect(CollapseKey.fitted(String(repeating: "é", count: 100)) == CollapseKey.fitted(String(repeating: "é", count: 100)))
        #expect(CollapseKey.fitted(String(repeating: "x", count: 64)) == String(repeating: "x", count: 64))
        #expect(CollapseKey.fitted(String(repeating: "x", count: 65)).utf8.count <= 64)
    }

    @Test func theAPNsPayloadHasApsAndTheRoutingDataBesideIt() throws {
        let content = PushRenderer.render(Self.shipped, language: .de, badge: 3)
        let payload = try Self.object(try APNsPayload.encode(content))
        let aps = try #require(payload["aps"] as? [String: Any])
        let alert = try #require(aps["alert"] as? [String: Any])
        #expect(alert["title"] as? String == "Deine Uhr ist unterwegs")
        #expect(alert["body"] as? String == content.body)
        #expect(aps["badge"] as? Int == 3)
        #expect(aps["sound"] as? String == "default")
        #expect(aps["thread-id"] as? String == "order:o-1")
        for field in content.data { #expect(payload[field.key] as? String == field.value, "\(field.key)") }
        #expect(payload.count == content.data.count + 1)
    }

    @Test func anAPNsPayloadWithoutBadgeOrCollapseLeavesThemOut() throws {
        let signIn = PushNotification(kind: .newSignIn, ids: ["signInId": "x\"y\\z\n"], notificationId: "n")
        var content = PushRenderer.render(signIn, language: .fr, badge: nil)
        content.collapseId = nil
        let payload = try Self.object(try APNsPayload.encode(content))
        let aps = try #require(payload["aps"] as? [String: Any])
        #expect(aps["badge"] == nil && aps["thread-id"] == nil)
        #expect(payload["signInId"] as? String == "x\"y\\z\n")
    }

    @Test func theAPNsHeadersSayTopicTypePriorityExpiryAndCollapse() {
        let content = PushRenderer.render(Self.shipped, language: .en, badge: nil)
        let headers = APNsHeaders(topic: "eu.wristler.app", content: content, now: Date(timeIntervalSince1970: 1_700_000_000.7), timeToLive: .seconds(3600))
        #expect(headers.fields == [
            PushField("apns-topic", "eu.wristler.app"), PushField("apns-push-type", "alert"), PushField("apns-priority", "10"),
            PushField("apns-expiration", "1700003600"), PushField("apns-collapse-id", "order:o-1"),
        ])
        let security = PushRenderer.render(PushNotification(kind: .passwordChanged, ids: [:], notificationId: "n"), language: .en, badge: nil)
        #expect(APNsHeaders(topic: "t", content: security, now: Date()).fields.contains(PushField("apns-collapse-id", "notification:n")))
        #expect(APNsHeaders.path(deviceToken: "abc123") == "/3/device/abc123")
        #expect(APNsEnvironment.development.other == .production)
        #expect(APNsEnvironment.production.host == "api.push.apple.com")
    }

    @Test func theFCMBodyIsAMessageWithNotificationDataAndAndroidCollapse() throws {
        let content = PushRenderer.render(Self.shipped, language: .fr, badge: nil)
        let body = try Self.object(try FCMPayload.encode(content, token: "tok:en", ttl: .seconds(86_400)))
        let message = try #require(body["message"] as? [String: Any])
        #expect(message["token"] as? String == "tok:en")
        let notification = try #require(message["notification"] as? [String: String])
        #expect(notification == ["title": "Votre montre est en route", "body": content.body])
        let data = try #require(message["data"] as? [String: String])
        #expect(data == Dictionary(uniqueKeysWithValues: content.data.map { ($0.key, $0.value) }))
        let android = try #require(message["android"] as? [String: Any])
        #expect(android["collapse_key"] as? String == "order:o-1")
        #expect(android["ttl"] as? String == "86400s")
        #expect(android["priority"] as? String == "high")
        #expect((android["notification"] as? [String: String]) == ["tag": "order:o-1"])
        #expect(FCMPayload.path(projectId: "wristler") == "/v1/projects/wristler/messages:send")

        let security = PushRenderer.render(PushNotification(kind: .emailChanged, ids: [:], notificationId: "n"), language: .en, badge: nil)
        let plain = try #require(try Self.object(try FCMPayload.encode(security, token: "t"))["message"] as? [String: Any])
        let plainAndroid = try #require(plain["android"] as? [String: Any])
        #expect((plainAndroid["notification"] as? [String: String]) == ["tag": "notification:n"], "a copy sent again replaces the first")
        var uncollapsed = security
        uncollapsed.collapseId = nil
        let bare = try #require(try Self.object(try FCMPayload.encode(uncollapsed, token: "t"))["message"] as? [String: Any])
        let bareAndroid = try #require(bare["android"] as? [String: Any])
        #expect(bareAndroid["collapse_key"] == nil && bareAndroid["notification"] == nil)
    }

    /// A body far over the limit, with multi-byte characters (up to 7 bytes: 🕰️ is two scalars)
    /// and escapes, shifted by `shift` bytes so the cut falls at every place inside them.
    static func huge(shift: Int) -> PushContent {
        var content = PushRenderer.render(shipped, language: .en, badge: 12)
        content.body = String(repeating: "x", count: shift) + String(repeating: "Zeiger \"ä\" 🕰️ \\ \n", count: 400)
        return content
    }

    static func apnsBody(_ payload: [String: Any]) -> String? {
        ((payload["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String
    }

    static func fcmBody(_ payload: [String: Any]) -> String? {
        ((payload["message"] as? [String: Any])?["notification"] as? [String: Any])?["body"] as? String
    }

    @Test(arguments: 0..<12)
    func anOversizedBodyIsCutBetweenCharactersNeverTheRoutingData(shift: Int) throws {
        let content = Self.huge(shift: shift)
        let token = String(repeating: "t", count: 163)
        let encoded: [([UInt8], ([String: Any]) -> String?)] = [
            (try APNsPayload.encode(content), Self.apnsBody), (try FCMPayload.encode(content, token: token), Self.fcmBody),
        ]
        for (bytes, body) in encoded {
            #expect(bytes.count <= 4096)
            // As late as fits: the next character (at most 7 bytes, 8 escaped) would not have.
            #expect(bytes.count > 4096 - 8)
            #expect(String(validating: bytes, as: UTF8.self) != nil)
            let cut = try #require(body(try Self.object(bytes)))
            #expect(cut.hasSuffix("…"))
            #expect(content.body.hasPrefix(String(cut.dropLast())))
            #expect(cut.count > 100)
        }
        let apns = try Self.object(encoded[0].0)
        for field in content.data { #expect(apns[field.key] as? String == field.value) }
        #expect((apns["aps"] as? [String: Any])?["thread-id"] as? String == "order:o-1")
        #expect((apns["aps"] as? [String: Any])?["badge"] as? Int == 12)
        let fcm = try #require(try Self.object(encoded[1].0)["message"] as? [String: Any])
        #expect(fcm["token"] as? String == token)
        #expect((fcm["data"] as? [String: String])?["orderId"] == "o-1")
    }

    @Test func aBodyThatFitsIsNeverCut() throws {
        var content = PushRenderer.render(Self.shipped, language: .en, badge: nil)
        content.body = String(repeating: "a", count: 3000)
        let payload = try Self.object(try APNsPayload.encode(content))
        #expect(((payload["aps"] as? [String: Any])?["alert"] as? [String: Any])?["body"] as? String == content.body)
    }

    @Test func routingDataTooBigForAnyBodyIsAnError() {
        var content = PushRenderer.render(Self.shipped, language: .en, badge: nil)
        content.data.append(PushField("huge", String(repeating: "x", count: 5000)))
        #expect(throws: PushPayloadError.self) { try APNsPayload.encode(content) }
        #expect(throws: PushPayloadError.self) { try FCMPayload.encode(content, token: "t") }
        do {
            _ = try APNsPayload.encode(content)
        } catch {
            guard case .routingDataTooLarge(let bytes, let limit) = error else { return }
            #expect(bytes > 5000 && limit == 4096)
        }
    }
}
