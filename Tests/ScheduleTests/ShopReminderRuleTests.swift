import EventLog
import Foundation
import InboxDomain
import InboxTesting
import Schedule
import Testing

/// One state of a thread, built through the log, and whether its shop is reminded of it.
struct ReminderCase: Sendable {
    let name: String
    let reminds: Bool
    /// The thread's events, in log order; the thread is `ShopThread(name)`.
    let events: @Sendable (ShopThread) -> [any CatalogueEvent]

    static let all: [ReminderCase] = [
        ReminderCase(name: "the buyer's last message, unread", reminds: true) { t in [t.start(), t.buyerWrites(1)] },
        ReminderCase(name: "the buyer's last message, read by the shop", reminds: true) { t in
            [
                t.start(), t.buyerWrites(1),
                ConversationRead(conversationId: t.conversationId, side: .seller, personId: "member", upToMessageId: t.message(1)),
            ]
        },
        ReminderCase(name: "the buyer wrote twice in a row", reminds: true) { t in [t.start(), t.buyerWrites(1), t.buyerWrites(2)] },
        ReminderCase(name: "the shop answered last", reminds: false) { t in [t.start(), t.buyerWrites(1), t.shopWrites(2)] },
        ReminderCase(name: "Wristler wrote last", reminds: false) { t in [t.start(), t.buyerWrites(1), t.wristlerWrites(2)] },
        ReminderCase(name: "the shop answered, then the buyer wrote again", reminds: true) { t in
            [t.start(), t.buyerWrites(1), t.shopWrites(2), t.buyerWrites(3)]
        },
        ReminderCase(name: "archived on the shop's side", reminds: false) { t in
            [t.start(), t.buyerWrites(1), ConversationArchived(conversationId: t.conversationId, side: .seller, personId: "member")]
        },
        ReminderCase(name: "archived on the buyer's side only", reminds: true) { t in
            [t.start(), t.buyerWrites(1), ConversationArchived(conversationId: t.conversationId, side: .buyer, personId: t.buyerId)]
        },
        ReminderCase(name: "archived by the shop, then unarchived", reminds: true) { t in
            [
                t.start(), t.buyerWrites(1), ConversationArchived(conversationId: t.conversationId, side: .seller, personId: "member"),
                ConversationUnarchived(conversationId: t.conversationId, side: .seller, personId: "member"),
            ]
        },
        ReminderCase(name: "archived by the shop, then the buyer wrote again", reminds: true) { t in
            [t.start(), t.buyerWrites(1), ConversationArchived(conversationId: t.conversationId, side: .seller, personId: "member"), t.buyerWrites(2)]
        },
        ReminderCase(name: "the watch is sold", reminds: false) { t in
            [WatchStatusChanged(watchId: t.watchId, shopId: t.shopId, status: .sold), t.start(), t.buyerWrites(1)]
        },
        ReminderCase(name: "the watch went offline after the message", reminds: false) { t in
            [t.start(), t.buyerWrites(1), WatchStatusChanged(watchId: t.watchId, shopId: t.shopId, status: .offline)]
        },
        ReminderCase(name: "the watch is deleted", reminds: false) { t in
            [t.start(), t.buyerWrites(1), WatchStatusChanged(watchId: t.watchId, shopId: t.shopId, status: .deleted)]
        },
        ReminderCase(name: "the watch is for sale again", reminds: true) { t in
            [
                WatchStatusChanged(watchId: t.watchId, shopId: t.shopId, status: .offline), t.start(), t.buyerWrites(1),
                WatchStatusChanged(watchId: t.watchId, shopId: t.shopId, status: .forSale),
            ]
        },
        ReminderCase(name: "the thread led to an order", reminds: false) { t in
            [
                t.start(), t.buyerWrites(1),
                OrderPaid(
                    orderId: "o-\(t.name)", buyerId: t.buyerId, shopId: t.shopId, watchId: t.watchId, conversationId: t.conversationId,
                    amount: Money(amount: 150_000, currency: "EUR")),
            ]
        },
        ReminderCase(name: "an order of the same watch from another thread", reminds: true) { t in
            [
                t.start(), t.buyerWrites(1),
                OrderPaid(
                    orderId: "o-\(t.name)", buyerId: "someone-else", shopId: t.shopId, watchId: t.watchId, conversationId: "c-elsewhere",
                    amount: Money(amount: 150_000, currency: "EUR")),
            ]
        },
        ReminderCase(name: "the shop marked it no reply needed", reminds: false) { t in
            [t.start(), t.buyerWrites(1), ConversationMarkedNoReplyNeeded(conversationId: t.conversationId, personId: "member")]
        },
        ReminderCase(name: "marked no reply needed, then the buyer wrote again", reminds: true) { t in
            [t.start(), t.buyerWrites(1), ConversationMarkedNoReplyNeeded(conversationId: t.conversationId, personId: "member"), t.buyerWrites(2)]
        },
        ReminderCase(name: "marked no reply needed, then the shop wrote", reminds: false) { t in
            [
                t.start(), t.buyerWrites(1), ConversationMarkedNoReplyNeeded(conversationId: t.conversationId, personId: "member"),
                t.shopWrites(2),
            ]
        },
        ReminderCase(name: "Wristler's aftercare thread", reminds: false) { t in [t.start(kind: .aftercare), t.buyerWrites(1)] },
        ReminderCase(name: "closed by a block", reminds: false) { t in
            [t.start(), t.buyerWrites(1), ConversationClosedByBlock(conversationId: t.conversationId, blockerId: t.shopId, blockedId: t.buyerId)]
        },
        ReminderCase(name: "a buyer Wristler blocked", reminds: false) { t in
            [t.start(), t.buyerWrites(1), AccountBlocked(personId: t.buyerId, reason: "fraud")]
        },
        ReminderCase(name: "somebody else Wristler blocked", reminds: true) { t in
            [t.start(), t.buyerWrites(1), AccountBlocked(personId: "someone-else", reason: "fraud")]
        },
    ]
}

/// The seed's rules, each positive and negative, on threads built through the log and projected.
/// One at a time: each test has a database and four projectors, and the suite must not take the
/// test server's connections from the other suites that run meanwhile.
@Suite(.serialized) struct ShopReminderRuleTests {
    /// Every case in one database, each thread with a shop of its own, in one check: the shops
    /// reminded are exactly those of the cases that remind, each of its thread's last message.
    @Test func eachRuleDecidesWhetherItsThreadReminds() async throws {
        try await withTestDatabase { db in
            var expected: [String: [String]] = [:]
            var names: [String: String] = [:]
            var events: [any CatalogueEvent] = []
            for (index, rule) in ReminderCase.all.enumerated() {
                let thread = ShopThread("case\(index)")
                let caseEvents = rule.events(thread)
                events += caseEvents
                names[thread.shopId] = rule.name
                let lastBuyerMessage = caseEvents.compactMap { ($0 as? MessageSent).flatMap { $0.authorSide == .buyer ? $0.messageId : nil } }.last!
                if rule.reminds { expected[thread.shopId] = [lastBuyerMessage] }
            }
            try await db.appendAndProject(events)
            let now = wholeSecond(after: Date()).addingTimeInterval(60)
            let reminded = try await db.check(at: now).remindedMessages
            for shop in Set(expected.keys).union(reminded.keys).sorted() {
                #expect(reminded[shop] == expected[shop], "\(names[shop] ?? shop): expected \(expected[shop] ?? []), reminded \(reminded[shop] ?? [])")
            }
            #expect(try await db.reminderRows().count == expected.count)
            // A second check reminds of nothing, whatever the first did.
            #expect(try await db.check(at: now.addingTimeInterval(3 * hour)).reminders.isEmpty)
        }
    }

    @Test func aWaitingThreadRemindsItsShopOnceWithOneOutboxRowForEveryoneWhoWorksThere() async throws {
        try await withTestDatabase { db in
            let thread = ShopThread("once")
            try await db.appendAndProject([
                ShopMemberAdded(shopId: thread.shopId, personId: "m-2"), ShopMemberAdded(shopId: thread.shopId, personId: "m-1"), thread.start(),
                thread.buyerWrites(1),
            ])
            let now = wholeSecond(after: try await db.sentAt(thread.message(1)))
            let outcome = try await db.check(at: now)
            let expectedId = ShopReminders.notificationId(shop: thread.shopId, newestMessage: thread.message(1))
            #expect(outcome.reminders.map(\.notificationId) == [expectedId])
            #expect(outcome.remindedMessages == [thread.shopId: [thread.message(1)]])
            #expect(
                try await db.reminderRows() == [
                    ReminderRow(
                        notificationId: expectedId, audience: "shop", recipientId: thread.shopId, category: "shop", ids: #"{"sellerId": "s-once"}"#,
                        pending: true, recipients: "m-1,m-2")
                ], "one row for the fan-out, in its pending queue, decided for each person who works at the shop")
            for later in [1.0, hour, 3 * hour, 13 * day] {
                #expect(try await db.check(at: now.addingTimeInterval(later)).reminders.isEmpty, "after \(later) s")
            }
            #expect(try await db.reminderRows().count == 1)
            let recorded = try await db.client.withConnection { connection in
                try connection.query("SELECT last_reminded_at, reminders, messages FROM shop_reminders WHERE shop_id = 's-once'").first.map {
                    (try $0.decode(Date.self, at: 0), try $0.decode(Int64.self, at: 1), try $0.decode(Int64.self, at: 2))
                }
            }
            #expect(recorded?.0 == now && recorded?.1 == 1 && recorded?.2 == 1)
        }
    }

    @Test func aNewBuyerMessageAfterTheReminderIsANewWaitingMessage() async throws {
        try await withTestDatabase { db in
            let thread = ShopThread("again")
            try await db.appendAndProject([thread.start(), thread.buyerWrites(1)])
            let now = wholeSecond(after: try await db.sentAt(thread.message(1)))
            #expect(try await db.check(at: now).remindedMessages == [thread.shopId: [thread.message(1)]])
            try await db.appendAndProject([thread.buyerWrites(2)])
            #expect(
                try await db.check(at: now.addingTimeInterval(2 * hour)).remindedMessages == [thread.shopId: [thread.message(2)]],
                "the new message only, once the gap has passed")
            #expect(try await db.check(at: now.addingTimeInterval(5 * hour)).reminders.isEmpty)
            #expect(try await db.reminderRows().map(\.notificationId) == [
                ShopReminders.notificationId(shop: thread.shopId, newestMessage: thread.message(1)),
                ShopReminders.notificationId(shop: thread.shopId, newestMessage: thread.message(2)),
            ])
        }
    }

    @Test func theShopsAnswerAfterAReminderEndsIt() async throws {
        try await withTestDatabase { db in
            let first = ShopThread("answered", shop: "s-busy")
            let second = ShopThread("answered-later", shop: "s-busy")
            try await db.appendAndProject([first.start(), first.buyerWrites(1), second.start(), second.buyerWrites(1)])
            let now = wholeSecond(after: try await db.sentAt(second.message(1)))
            try await db.appendAndProject([first.shopWrites(2)])
            #expect(try await db.check(at: now).remindedMessages == ["s-busy": [second.message(1)]], "the answered thread waits no more")
            try await db.appendAndProject([second.shopWrites(2)])
            #expect(try await db.check(at: now.addingTimeInterval(3 * hour)).reminders.isEmpty)
        }
    }

    @Test func everythingWaitingAtOneShopComesInOnePushNamedAfterItsNewestMessage() async throws {
        try await withTestDatabase { db in
            let a = ShopThread("a", shop: "s-many")
            let b = ShopThread("b", shop: "s-many")
            let c = ShopThread("c", shop: "s-other")
            try await db.appendAndProject([a.start(), a.buyerWrites(1)])
            try await db.appendAndProject([b.start(), b.buyerWrites(1), c.start(), c.buyerWrites(1)])
            let now = wholeSecond(after: try await db.sentAt(c.message(1)))
            let outcome = try await db.check(at: now)
            #expect(outcome.remindedMessages == ["s-many": [a.message(1), b.message(1)], "s-other": [c.message(1)]], "oldest first")
            #expect(outcome.messages == 3)
            let rows = try await db.reminderRows()
            #expect(rows.count == 2, "one push per shop")
            #expect(Set(rows.map(\.recipientId)) == ["s-many", "s-other"])
            #expect(rows.allSatisfy { $0.recipients == "" }, "nobody works at either: for nobody, counted")
            #expect(
                rows.first { $0.recipientId == "s-many" }?.notificationId
                    == ShopReminders.notificationId(shop: "s-many", newestMessage: b.message(1)))
            #expect(rows.first { $0.recipientId == "s-many" }?.ids == #"{"sellerId": "s-many"}"#)
        }
    }

    @Test func aShopIsRemindedAtMostOncePerGapAndWhatWaitedMeanwhileComesInItsNextPush() async throws {
        try await withTestDatabase { db in
            let first = ShopThread("first", shop: "s-gap")
            let second = ShopThread("second", shop: "s-gap")
            let elsewhere = ShopThread("elsewhere", shop: "s-free")
            try await db.appendAndProject([first.start(), first.buyerWrites(1)])
            let reminded = wholeSecond(after: try await db.sentAt(first.message(1)))
            #expect(try await db.check(at: reminded).remindedMessages == ["s-gap": [first.message(1)]])
            try await db.appendAndProject([second.start(), second.buyerWrites(1), elsewhere.start(), elsewhere.buyerWrites(1)])
            let early = try await db.check(at: reminded.addingTimeInterval(hour + 59 * 60))
            #expect(early.remindedMessages == ["s-free": [elsewhere.message(1)]], "another shop has a gap of its own")
            #expect(early.shopsHeldBack == 1)
            let justBefore = try await db.check(at: reminded.addingTimeInterval(2 * hour - 1))
            #expect(justBefore.reminders.isEmpty && justBefore.shopsHeldBack == 1, "1 s before the gap is over")
            let atTheGap = try await db.check(at: reminded.addingTimeInterval(2 * hour))
            #expect(atTheGap.remindedMessages == ["s-gap": [second.message(1)]], "exactly 2 h after: the message that waited meanwhile")
            #expect(atTheGap.shopsHeldBack == 0)
            #expect(try await db.reminderRows().count == 3)
        }
    }

    @Test func onlyMessagesOfTheWindowCountToTheSecond() async throws {
        try await withTestDatabase { db in
            let thread = ShopThread("window")
            try await db.appendAndProject([thread.start(), thread.buyerWrites(1)])
            let sent = try await db.sentAt(thread.message(1))
            let tooLate = try await db.check(at: sent.addingTimeInterval(14 * day + 1))
            #expect(tooLate.reminders.isEmpty && tooLate.shopsHeldBack == 0, "14 days and 1 s old: it no longer counts")
            #expect(
                try await db.check(at: sent.addingTimeInterval(14 * day - 1)).remindedMessages == [thread.shopId: [thread.message(1)]],
                "1 s younger than 14 days: it counts")
            // Once out of the window, the record of its reminder goes: it can never count again.
            _ = try await db.check(at: sent.addingTimeInterval(14 * day + 1))
            #expect(try await db.scalar("SELECT count(*)::int FROM shop_reminded_messages", Int.self) == 0)
            #expect(try await db.check(at: sent.addingTimeInterval(20 * day)).reminders.isEmpty)
            #expect(try await db.reminderRows().count == 1)
        }
    }

    @Test func aCheckWaitsForTheReadModelsWhenTheyLeaveAnEventUnappliedForMoreThanAMinute() async throws {
        try await withTestDatabase { db in
            let thread = ShopThread("behind")
            try await db.appendAndProject([thread.start(), thread.buyerWrites(1)])
            // The shop answers while no projector runs.
            let answer = try await db.store.append([try NewEvent(catalogueEvent: thread.shopWrites(2))])[0].event
            let stale = try await db.check(at: answer.recordedAt.addingTimeInterval(61))
            #expect(stale.projectionsBehind == ["bell", "people", "threads"] && stale.reminders.isEmpty, "the answer is in the log only")
            #expect(try await db.reminderRows().isEmpty)
            try await db.project()
            let caughtUp = try await db.check(at: answer.recordedAt.addingTimeInterval(61))
            #expect(caughtUp.projectionsBehind.isEmpty && caughtUp.reminders.isEmpty, "answered: nothing waits")
        }
    }

    @Test func theWindowAndGapAreSettings() async throws {
        try await withTestDatabase { db in
            let thread = ShopThread("settings")
            try await db.appendAndProject([thread.start(), thread.buyerWrites(1)])
            let sent = try await db.sentAt(thread.message(1))
            let reminders = ShopReminders(settings: ShopReminders.Settings(gap: .seconds(60), window: .seconds(3600)))
            #expect(try await db.check(reminders, at: sent.addingTimeInterval(3601)).reminders.isEmpty, "outside a window of an hour")
            let now = wholeSecond(after: sent)
            #expect(try await db.check(reminders, at: now).reminders.count == 1)
            try await db.appendAndProject([thread.buyerWrites(2)])
            #expect(try await db.check(reminders, at: now.addingTimeInterval(59)).reminders.isEmpty)
            #expect(try await db.check(reminders, at: now.addingTimeInterval(60)).remindedMessages == [thread.shopId: [thread.message(2)]])
        }
    }
}
