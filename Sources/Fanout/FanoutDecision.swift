import Devices
import Foundation
import InboxDomain
import NotificationOutbox

/// Which registrations a server pushes to: production to every one; staging and development only
/// to their own app's (`eu.wristler.app.staging`, `eu.wristler.app.dev`), so that a test server
/// can never reach somebody's store app. A registration without `appId` counts as another app's.
public struct AppPolicy: Sendable, Hashable {
    public var isProduction: Bool
    /// The app id of this server's own builds.
    public var ownAppId: String

    public init(isProduction: Bool, ownAppId: String) {
        self.isProduction = isProduction
        self.ownAppId = ownAppId
    }

    public static let production = AppPolicy(isProduction: true, ownAppId: "eu.wristler.app")

    public func allows(_ appId: String?) -> Bool { isProduction || appId == ownAppId }
}

/// Why a push was not sent to a person or a device: every one is counted (`skipped.<reason>`),
/// none is dropped silently.
public enum PushSkip: Sendable, Hashable {
    /// Decided with the notification, at its place in the log (blocked, preference_off, no_member).
    case decided(SkipReason)
    /// Older than a push's deadline when it was taken: it is in the bell.
    case stale
    /// The person had no registration when it was enqueued.
    case noDevice
    /// Another app's registration, on a server that is not production.
    case otherApp
    /// The registration was deleted (or taken over) between the decision and the sending.
    case deviceGone
    /// A kind this release does not know (a newer release enqueued it).
    case unknownKind

    /// The counter's name after `skipped.`.
    public var name: String {
        switch self {
        case .decided(let reason): reason.rawValue
        case .stale: "stale"
        case .noDevice: "no_device"
        case .otherApp: "other_app"
        case .deviceGone: "device_gone"
        case .unknownKind: "unknown_kind"
        }
    }
}

/// The fan-out's part of a batch of outbox entries: one delivery per registered device of the
/// person each entry is for, unless the entry was decided not to be pushed (with its event, at its
/// place in the log: `NotificationDelivery`), is too old, or the person has no device of this
/// server's apps. Pure: `FanoutStore` loads the devices and writes the result in one transaction.
public struct FanoutDecision: Sendable {
    public struct Delivery: Sendable, Hashable {
        public var outboxId: Int64
        public var device: DeviceRegistry.PushRegistration

        public var deviceId: UUID { device.id }
        public var personId: String { device.personId }
    }

    /// A registration of another app, skipped by a server that is not production (logged).
    public struct OtherApp: Sendable, Hashable {
        public var outboxId: Int64
        public var deviceId: UUID
        public var appId: String?
    }

    public var deliveries: [Delivery] = []
    /// Pushes decided per outbox entry (0 when nobody gets one), over all its recipients.
    public var pushes: [Int64: Int] = [:]
    /// Why a person or device got no push, counted.
    public var skipped: [PushSkip: Int] = [:]
    public var otherApps: [OtherApp] = []

    /// The people `entries` may push to: those the entries were decided to be pushed to.
    public static func people(of entries: [OutboxEntry]) -> Set<String> {
        Set(entries.filter { $0.delivery.pushSkipped == nil }.map(\.recipientId))
    }

    /// Decides `entries` with the registrations of their people. An entry whose news happened (or
    /// was enqueued) before `staleBefore` is not pushed any more (older than a push's deadline).
    public static func decide(
        _ entries: [OutboxEntry], devices: [String: [DeviceRegistry.PushRegistration]], policy: AppPolicy, staleBefore: Date
    ) -> FanoutDecision {
        var decision = FanoutDecision()
        for entry in entries {
            if decision.pushes[entry.id] == nil { decision.pushes[entry.id] = 0 }
            if let reason = entry.delivery.pushSkipped {
                decision.skipped[.decided(reason), default: 0] += 1
                continue
            }
            if min(entry.happenedAt, entry.enqueuedAt) < staleBefore {
                decision.skipped[.stale, default: 0] += 1
                continue
            }
            // A device registered after the notification was enqueued does not get it.
            let registered = (devices[entry.recipientId] ?? []).filter { $0.createdAt <= entry.enqueuedAt }
            if registered.isEmpty { decision.skipped[.noDevice, default: 0] += 1 }
            for device in registered {
                guard policy.allows(device.appId) else {
                    decision.skipped[.otherApp, default: 0] += 1
                    decision.otherApps.append(OtherApp(outboxId: entry.id, deviceId: device.id, appId: device.appId))
                    continue
                }
                decision.deliveries.append(Delivery(outboxId: entry.id, device: device))
                decision.pushes[entry.id, default: 0] += 1
            }
        }
        return decision
    }
}
