import Devices
import Fanout
import Foundation
import InboxDomain
import NotificationOutbox
import Testing

/// `FanoutDecision`, pure: which devices of the person an outbox entry is for get a push, from
/// registrations given by hand. Whether the person gets it at all was decided with the
/// notification (`NotificationDelivery`, `BellFoldTests`); the fan-out counts what was not.
@Suite struct FanoutDecisionTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)

    func entry(_ id: Int64, _ recipient: String, _ kind: NotificationKind = .messageReceived, skipped: SkipReason? = nil, age: Double = 10)
        -> OutboxEntry
    {
        OutboxEntry(
            id: id, notificationId: "n\(id)", kind: kind, recipientId: recipient, ids: [:], happenedAt: now.addingTimeInterval(-age),
            enqueuedAt: now.addingTimeInterval(-age), delivery: NotificationDelivery(pushSkipped: skipped, mail: nil, mailSkipped: nil))
    }

    func device(_ name: Int, of person: String, appId: String? = "eu.wristler.app", registeredAgo: Double = 3600) -> DeviceRegistry.PushRegistration {
        DeviceRegistry.PushRegistration(
            id: UUID(uuid: (UInt8(name), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)), personId: person, platform: .android, token: "t\(name)",
            appId: appId, createdAt: now.addingTimeInterval(-registeredAgo))
    }

    func decide(_ entries: [OutboxEntry], _ devices: [DeviceRegistry.PushRegistration], policy: AppPolicy = .production) -> FanoutDecision {
        FanoutDecision.decide(
            entries, devices: Dictionary(grouping: devices, by: \.personId), policy: policy, staleBefore: now.addingTimeInterval(-86_400))
    }

    @Test func everyDeviceOfThePersonGetsItAndWhatWasDecidedNotToBePushedIsCountedByItsReason() {
        let devices = [device(1, of: "p1"), device(2, of: "p1"), device(3, of: "p2"), device(4, of: "p3")]
        let decision = decide(
            [entry(1, "p1"), entry(2, "p2", skipped: .preferenceOff), entry(3, "p3", skipped: .blocked), entry(4, "", .shopOrderPaid, skipped: .noMember)],
            devices)
        #expect(decision.deliveries.map(\.deviceId) == [devices[0].id, devices[1].id])
        #expect(decision.pushes == [1: 2, 2: 0, 3: 0, 4: 0])
        #expect(decision.skipped == [.decided(.preferenceOff): 1, .decided(.blocked): 1, .decided(.noMember): 1])
        #expect(FanoutDecision.people(of: [entry(1, "p1"), entry(2, "p2", skipped: .preferenceOff)]) == ["p1"])
    }

    @Test func aDeviceRegisteredAfterTheNotificationGetsNothingAndNoDeviceIsCounted() {
        let late = device(1, of: "p1", registeredAgo: 1)
        let decision = decide([entry(1, "p1", age: 10), entry(2, "nobody-registered")], [late])
        #expect(decision.deliveries.isEmpty)
        #expect(decision.skipped == [.noDevice: 2])
    }

    @Test func newsOlderThanTheDeadlineIsNotPushed() {
        let decision = decide([entry(1, "p1", age: 90_000)], [device(1, of: "p1")])
        #expect(decision.deliveries.isEmpty)
        #expect(decision.skipped == [.stale: 1])
    }

    @Test func aServerThatIsNotProductionPushesOnlyToItsOwnApp() {
        let staging = AppPolicy(isProduction: false, ownAppId: "eu.wristler.app.staging")
        let devices = [device(1, of: "p1", appId: "eu.wristler.app.staging"), device(2, of: "p1"), device(3, of: "p1", appId: nil)]
        let decision = decide([entry(1, "p1")], devices, policy: staging)
        #expect(decision.deliveries.map(\.deviceId) == [devices[0].id])
        #expect(decision.otherApps.map(\.deviceId) == [devices[1].id, devices[2].id])
        #expect(decision.skipped == [.otherApp: 2])
        #expect(PushSkip.decided(.noMember).name == "no_member" && PushSkip.otherApp.name == "other_app")
    }
}
