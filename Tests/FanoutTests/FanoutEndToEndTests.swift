import Devices
import EventLog
import Fanout
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import PushProtocol
import Testing

/// From an appended event to the pushes at local TLS HTTP/2 servers that answer as APNs and FCM do
/// (Tests/PushMocks), through the projectors, the outbox and the fan-out.
@Suite(.serialized) struct FanoutEndToEndTests {
    /// The seed's rules, row by row: each category (messages, orders, saved watches, saved searches,
    /// security, a shop's news), the locked ones, a shop's news to two people
    /// who work there (one turned it off), a person who turned a category off, a saved search with
    /// and without push; payload, language, collapse key and badge of each push.
    @Test func everyRuleOfTheSeedBecomesExactlyTheExpectedPushes() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            let p1iOS = apnsToken("a1", 1)
            _ = try db.register("p1", "ios", token: p1iOS, locale: "nl-NL", apns: "production")
            _ = try db.register("p1", "android", token: "p1-android", locale: "de_DE")
            let p2iOS = apnsToken("a2", 2)
            _ = try db.register("p2", "ios", token: p2iOS, locale: "en-GB", apns: "production")
            _ = try db.register("p3", "android", token: "p3-android", locale: "fr")
            _ = try db.register("p4", "android", token: "p4-android", locale: "fr-BE")
            _ = try db.register("p5", "android", token: "p5-android", locale: "pt-BR")
            try await db.withProjectors {
                try await db.append(
                    NotificationPreferenceChanged(personId: "p4", category: .messages, channel: .push, enabled: false),
                    NotificationPreferenceChanged(personId: "p4", category: .orders, channel: .push, enabled: false),
                    NotificationPreferenceChanged(personId: "p3", category: .shop, channel: .push, enabled: false),
                    ShopMemberAdded(shopId: "s1", personId: "p2"), ShopMemberAdded(shopId: "s1", personId: "p3"),
                    SavedSearchCreated(savedSearchId: "ss-push", personId: "p5", name: "Daytona", query: .object([:]), interval: .never, push: true),
                    SavedSearchCreated(savedSearchId: "ss-quiet", personId: "p5", name: "Nautilus", query: .object([:]), interval: .daily, push: false),
                    ConversationStarted(conversationId: "c1", buyerId: "p1", shopId: "s1", watchId: "w1"),
                    ConversationStarted(conversationId: "c4", buyerId: "p4", shopId: "s9", watchId: "w4"),
                    FavouriteAdded(personId: "p5", watchId: "w5"))
                try await db.waitUntilProjected()
                try await db.withFanout(transport: try mock.transport()) {
                    // A seller's reply first, alone, so that p1's badge is known: one unread entry.
                    try await db.append(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .seller, authorId: "p2", body: "Hello"))
                    _ = try await mock.waitForPushes { $0.count >= 2 }
                    try await db.append(
                        MessageSent(conversationId: "c1", messageId: "m2", authorSide: .buyer, authorId: "p1", body: "Is it still available?"),
                        MessageSent(conversationId: "c4", messageId: "m4", authorSide: .seller, authorId: "x", body: "Hi"),
                        OrderPaid(orderId: "o1", buyerId: "p4", shopId: "s9", watchId: "w4", amount: Money(amount: 100, currency: "EUR")),
                        SignedIn(personId: "p1", signInId: "si1", platform: "ios"),
                        SavedSearchMatched(savedSearchId: "ss-push", personId: "p5", watchIds: ["w7"]),
                        SavedSearchMatched(savedSearchId: "ss-quiet", personId: "p5", watchIds: ["w8"]),
                        WatchPriceChanged(
                            watchId: "w5", shopId: "s9", price: Money(amount: 900, currency: "EUR"), previousPrice: Money(amount: 1000, currency: "EUR")))
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                }
            }
            let pushes = try await mock.pushes()
            #expect(pushes.allSatisfy { $0.status == 200 }, "\(pushes)")
            let byKey = Dictionary(grouping: pushes) { "\($0.token) \($0.data["event"] ?? "")" }
            #expect(byKey.values.allSatisfy { $0.count == 1 }, "no push twice: \(pushes)")
            #expect(
                Set(byKey.keys) == [
                    "\(p1iOS) message_received", "p1-android message_received", "\(p2iOS) message_received",
                    "p4-android order_paid", "\(p1iOS) new_sign_in", "p1-android new_sign_in", "p5-android saved_search_matched",
                    "p5-android price_dropped",
                ], "p3 turned the shop's news off, p4 messages off (orders are locked on), ss-quiet does not push: \(pushes)")

            // p1's phone, in Dutch, collapsed per thread, with the bell entry and p1's badge.
            let reply = try #require(byKey["\(p1iOS) message_received"]?.first)
            #expect(reply.listener == "apnsProduction")
            #expect(reply.title == BellTexts.title(event: "message_received", category: "messages", .nl))
            #expect(reply.body == PushTexts.body(PushNotification(kind: .messageReceived, ids: [:], notificationId: "x"), .nl))
            #expect(reply.data["type"] == "messages" && reply.data["event"] == "message_received")
            #expect(reply.data["conversationId"] == "c1" && reply.data["messageId"] == "m1" && reply.data["watchId"] == "w1")
            #expect(reply.data["notificationId"] != nil && reply.data["side"] == nil)
            #expect(reply.collapse == "conversation:c1")
            #expect(reply.badge == 1)
            #expect(reply.headers["apns-topic"] == "eu.wristler.app" && reply.headers["apns-push-type"] == "alert")
            // The same notification on p1's Android phone, in German, tagged per thread.
            let android = try #require(byKey["p1-android message_received"]?.first)
            #expect(android.listener == "fcm")
            #expect(android.title == BellTexts.title(event: "message_received", category: "messages", .de))
            #expect(android.collapse == "conversation:c1" && android.collapseKey == "conversation:c1")
            #expect(android.data["notificationId"] == reply.data["notificationId"])
            // The shop's news: seller side, the shop, no bell entry, English.
            let news = try #require(byKey["\(p2iOS) message_received"]?.first)
            #expect(news.data["type"] == "shop" && news.data["side"] == "seller" && news.data["sellerId"] == "s1")
            #expect(news.data["notificationId"] == nil && news.data["conversationId"] == "c1")
            #expect(news.title == PushTexts.title(PushNotification(kind: .shopMessageReceived, ids: [:], notificationId: "x"), .en))
            #expect(news.title != reply.title || news.body != reply.body, "a shop's news has words of its own")
            // The order, in French, collapsed per order.
            let order = try #require(byKey["p4-android order_paid"]?.first)
            #expect(order.data["type"] == "orders" && order.data["orderId"] == "o1")
            #expect(order.collapse?.contains("o1") == true)
            #expect(order.title == BellTexts.title(event: "order_paid", category: "orders", .fr))
            // The saved search: per search, English for a language we do not have.
            let match = try #require(byKey["p5-android saved_search_matched"]?.first)
            #expect(match.data["savedSearchId"] == "ss-push" && match.data["watchId"] == "w7")
            #expect(match.title == BellTexts.title(event: "saved_search_matched", category: "saved_searches", .en))
            #expect(match.collapse?.contains("ss-push") == true)
            // A saved watch, collapsed per watch.
            let price = try #require(byKey["p5-android price_dropped"]?.first)
            #expect(price.data["type"] == "saved_watches" && price.data["watchId"] == "w5")
            #expect(price.collapse == "watch:w5")
            // Security: collapsed only with a copy of itself (one the fan-out sent again after a crash).
            let signIn = try #require(byKey["\(p1iOS) new_sign_in"]?.first)
            #expect(signIn.collapse == "notification:" + (signIn.data["notificationId"] ?? "?"))
            #expect(signIn.headers["apns-id"]?.count == 36, "an apns-id of the push's own")
            #expect(try await db.counter("sent.ios") == 3)
            #expect(try await db.counter("sent.android") == 5)
            // Every answer's latency, per provider, as /metrics' histogram shows it.
            #expect(try await db.counter("latency.apns.count") == 3)
            #expect(try await db.counter("latency.fcm.count") == 5)
            let counters = try await db.client.withConnection { try FanoutStore.status(on: $0) }.counters
            let lines = PushLatency.metricLines(counters)
            #expect(lines.contains(#"inbox_push_provider_duration_seconds_bucket{provider="fcm",le="+Inf"} 5"#), "\(lines)")
            #expect(lines.contains(#"inbox_push_provider_duration_seconds_count{provider="apns"} 3"#), "\(lines)")
            let sum = lines.first { $0.hasPrefix(#"inbox_push_provider_duration_seconds_sum{provider="apns"}"#) }
            #expect(sum.flatMap { Double($0.split(separator: " ").last ?? "") }.map { $0 > 0 && $0 < 30 } == true, "\(String(describing: sum))")
        }
    }
}
