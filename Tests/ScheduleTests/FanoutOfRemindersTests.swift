import Devices
import Fanout
import Foundation
import InboxDomain
import InboxTesting
import PushProtocol
import Schedule
import Testing

/// A reminder is a shop's news like any other: the fan-out decides it for everybody who works at
/// the shop, per their `shop` switch, with `side: "seller"` and `sellerId`, in each phone's language.
@Suite(.serialized) struct FanoutOfRemindersTests {
    @Test func theFanOutDecidesTheReminderForEveryoneWhoWorksAtTheShop() async throws {
        try await withTestDatabase { db in
            let registry = DeviceRegistry(client: db.client)
            for (person, locale) in [("member-1", "nl"), ("member-2", "fr"), ("member-off", "en"), ("stranger", "en")] {
                _ = try registry.register(
                    person: person, pushToken: "token-\(person)", details: Device.Details(platform: "android", appId: "eu.wristler.app", locale: locale))
            }
            let thread = ShopThread("fanout")
            try await db.appendAndProject([
                ShopMemberAdded(shopId: thread.shopId, personId: "member-1"), ShopMemberAdded(shopId: thread.shopId, personId: "member-2"),
                ShopMemberAdded(shopId: thread.shopId, personId: "member-off"),
                NotificationPreferenceChanged(personId: "member-off", category: .shop, channel: .push, enabled: false),
                thread.start(), thread.buyerWrites(1),
            ])
            let now = wholeSecond(after: try await db.sentAt(thread.message(1)))
            #expect(try await db.check(at: now).reminders.count == 1)
            let decided = try await db.client.withConnection { connection in
                try FanoutStore(settings: FanoutStore.Settings()).decide(limit: 100, now: Date(), on: connection)
            }
            let reminders = decided.claimed.filter { $0.notification.event == "shop_unanswered" }
            #expect(Set(reminders.map(\.personId)) == ["member-1", "member-2"], "members whose shop switch is on, nobody else")
            for push in reminders {
                #expect(push.notification.category == .shop)
                #expect(push.notification.ids == ["sellerId": thread.shopId])
                #expect(push.notification.sellerId == thread.shopId)
                #expect(PushRenderer.render(push.notification, language: .en, badge: nil)[data: "notificationId"] == nil, "no bell entry")
            }
            let dutch = try #require(reminders.first { $0.personId == "member-1" })
            #expect(PushTexts.title(dutch.notification, .nl) == "Kopers wachten op je antwoord")
            #expect(dutch.device?.locale == "nl")
        }
    }
}
