import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import Testing

/// `PreferenceDecisions.channels`: the function the fan-out calls, against projected preferences.
@Suite struct PreferenceDecisionTests {
    static func decide(_ notification: PlannedNotification, _ person: String, _ db: TestDatabase) async throws -> Set<NotificationChannel> {
        try await db.client.withConnection { connection in
            try PreferenceDecisions.channels(for: notification, person: person, on: connection)
        }
    }

    @Test func switchesLocksSavedSearchesShopsAndBlocksDecideTheChannels() async throws {
        try await withTestDatabase { db in
            try await db.withProjectors {
                try await db.append(
                    NotificationPreferenceChanged(personId: "p1", category: .messages, channel: .push, enabled: false),
                    NotificationPreferenceChanged(personId: "p1", category: .orders, channel: .push, enabled: false),
                    NotificationPreferenceChanged(personId: "p1", category: .orders, channel: .email, enabled: false),
                    SavedSearchCreated(savedSearchId: "ss1", personId: "p1", name: "Daytona", query: .object([:]), interval: .never, push: true),
                    SavedSearchCreated(savedSearchId: "ss2", personId: "p1", name: "Speedmaster", query: .object([:]), interval: .daily, push: false),
                    SavedSearchDeleted(savedSearchId: "ss2", personId: "p1"),
                    ShopMemberAdded(shopId: "shop", personId: "p1"),
                    AccountBlocked(personId: "p9"))
                try await db.waitUntilProjected()
            }
            func person(_ category: NotificationCategory, _ ids: [String: String] = [:]) -> PlannedNotification {
                PlannedNotification(audience: .person("p1"), category: category, event: "x", ids: ids)
            }
            #expect(try await Self.decide(person(.messages), "p1", db) == [.email])
            #expect(try await Self.decide(person(.orders), "p1", db) == [.push], "orders push is locked on")
            #expect(try await Self.decide(person(.security), "p1", db) == [.push, .email], "on unless turned off")
            #expect(try await Self.decide(person(.savedSearches, ["savedSearchId": "ss1"]), "p1", db) == [.push])
            #expect(try await Self.decide(person(.savedSearches, ["savedSearchId": "ss2"]), "p1", db) == [], "a deleted search sends nothing")
            let news = PlannedNotification(audience: .shop("shop"), category: .shop, event: "order_paid", ids: [:])
            #expect(try await Self.decide(news, "p1", db) == [.push, .email])
            #expect(try await Self.decide(news, "p2", db) == [], "p2 does not work at the shop")
            #expect(try await Self.decide(person(.security), "p9", db) == [], "Wristler blocked p9")
        }
    }
}
