import Fanout
import Foundation
import InboxDomain
import Testing

/// `FanoutDecision`, pure: who gets a push on which device, from facts given by hand.
@Suite struct FanoutDecisionTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func entry(
        _ id: Int64, _ audience: String, _ recipient: String, _ category: NotificationCategory, ids: [String: String] = [:], age: Double = 10
    ) -> OutboxEntry {
        OutboxEntry(
            id: id, notificationId: "n\(id)", audience: audience, recipientId: recipient, category: category.rawValue, event: "x", ids: ids,
            enqueuedAt: now.addingTimeInterval(-age))
    }

    func device(_ name: Int, appId: String? = "eu.wristler.app", registeredAgo: Double = 3600) -> RegisteredDevice {
        RegisteredDevice(id: UUID(uuid: (UInt8(name), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)), appId: appId, createdAt: now.addingTimeInterval(-registeredAgo))
    }

    func decide(_ entries: [OutboxEntry], _ facts: DecisionFacts, policy: AppPolicy = .production) -> FanoutDecision {
        FanoutDecision.decide(entries, facts: facts, policy: policy, staleBefore: now.addingTimeInterval(-86_400))
    }

    @Test func blockedAccountsSwitchesLocksAndSavedSearchesDecide() {
        var facts = DecisionFacts()
        for (index, person) in ["p1", "p2", "p3", "p4"].enumerated() { facts.devices[person] = [device(index + 1)] }
        facts.blocked = ["p2"]
        facts.pushSwitches = ["p3": ["messages": false, "orders": false]]
        facts.savedSearches = ["mine": (person: "p4", settings: SavedSearchSettings(interval: .never, push: true))]
        let decision = decide(
            [
                entry(1, "person", "p1", .messages), entry(2, "person", "p2", .security), entry(3, "person", "p3", .messages),
                entry(4, "person", "p3", .orders), entry(5, "person", "p4", .savedSearches, ids: ["savedSearchId": "mine"]),
                entry(6, "person", "p1", .savedSearches, ids: ["savedSearchId": "mine"]),
            ], facts)
        #expect(decision.pushes == [1: 1, 2: 0, 3: 0, 4: 1, 5: 1, 6: 0])
        #expect(decision.skipped == ["blocked": 1, "preference_off": 2], "p3's messages off; orders are locked on; p1 does not own the search")
    }

    @Test func aShopsNewsGoesToEachMemberByTheirOwnSwitchAndNobodyElse() {
        var facts = DecisionFacts()
        facts.members = ["s1": ["p1", "p2", "p3"]]
        facts.devices = ["p1": [device(1), device(2)], "p2": [device(3)], "p9": [device(9)]]
        facts.pushSwitches = ["p2": ["shop": false]]
        let decision = decide([entry(1, "shop", "s1", .shop, ids: ["sellerId": "s1"]), entry(2, "shop", "s2", .shop)], facts)
        #expect(Set(decision.deliveries.map(\.personId)) == ["p1"])
        #expect(decision.deliveries.count == 2, "every device of p1")
        #expect(decision.skipped == ["preference_off": 1, "no_device": 1], "p2 turned it off, p3 has no phone; s2 has nobody")
    }

    @Test func lateDevicesOtherAppsStaleNewsAndUnknownCategoriesGetNothing() {
        var facts = DecisionFacts()
        facts.devices = ["p1": [device(1), device(2, registeredAgo: 1), device(3, appId: nil), device(4, appId: "eu.wristler.app.staging")]]
        let staging = decide([entry(1, "person", "p1", .security)], facts, policy: AppPolicy(isProduction: false, ownAppId: "eu.wristler.app.staging"))
        #expect(staging.deliveries.map(\.deviceId) == [device(4).id], "registered after the news: device 2; another app's: 1 and 3")
        #expect(staging.otherApps.count == 2)
        let production = decide([entry(1, "person", "p1", .security)], facts)
        #expect(production.deliveries.count == 3, "production pushes to every app")
        let stale = decide([entry(1, "person", "p1", .security, age: 90_000)], facts)
        #expect(stale.deliveries.isEmpty && stale.skipped == ["stale": 1])
        // Enqueued a moment ago by a projector that was a day behind: the news is a day old.
        var late = entry(1, "person", "p1", .security, age: 10)
        late.happenedAt = now.addingTimeInterval(-90_000)
        let lateDecision = decide([late], facts)
        #expect(lateDecision.deliveries.isEmpty && lateDecision.skipped == ["stale": 1])
        late.happenedAt = now.addingTimeInterval(-3_600)
        #expect(decide([late], facts).deliveries.count == 3, "an hour-old news enqueued late is still pushed")
        var unknown = entry(1, "person", "p1", .security)
        unknown.category = "from_a_newer_release"
        #expect(decide([unknown], facts).skipped == ["unknown_category": 1])
    }
}
