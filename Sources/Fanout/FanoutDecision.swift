import Foundation
import InboxDomain

/// A notification waiting in `notification_outbox` to be decided.
public struct OutboxEntry: Sendable, Hashable {
    public var id: Int64
    public var notificationId: String
    /// `person` (about the person themselves) or `shop` (a shop's news, for the people who work there).
    public var audience: String
    /// The person, or the shop.
    public var recipientId: String
    public var category: String
    public var event: String
    public var ids: [String: String]
    /// When the projection enqueued it: a device registered later does not get it.
    public var enqueuedAt: Date
    /// When what it tells happened (its event's time in the log). News older than a push's
    /// deadline is not pushed however late it was enqueued: by a projector that was behind for a
    /// day, or one catching up on the whole log from empty tables.
    public var happenedAt: Date

    public init(
        id: Int64, notificationId: String, audience: String, recipientId: String, category: String, event: String, ids: [String: String],
        enqueuedAt: Date, happenedAt: Date? = nil
    ) {
        self.happenedAt = happenedAt ?? enqueuedAt
        self.id = id
        self.notificationId = notificationId
        self.audience = audience
        self.recipientId = recipientId
        self.category = category
        self.event = event
        self.ids = ids
        self.enqueuedAt = enqueuedAt
    }
}

/// A push registration as the decision (and then the push) needs it.
public struct RegisteredDevice: Sendable, Hashable {
    public var id: UUID
    public var appId: String?
    public var createdAt: Date
    public var platform: String
    public var token: String
    public var locale: String?
    public var apnsEnvironment: String?

    public init(
        id: UUID, appId: String?, createdAt: Date, platform: String = "android", token: String = "", locale: String? = nil,
        apnsEnvironment: String? = nil
    ) {
        self.id = id
        self.appId = appId
        self.createdAt = createdAt
        self.platform = platform
        self.token = token
        self.locale = locale
        self.apnsEnvironment = apnsEnvironment
    }
}

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

/// What the live read models say about the people of a batch of outbox entries.
public struct DecisionFacts: Sendable {
    /// Who works at each shop.
    public var members: [String: [String]] = [:]
    /// Accounts Wristler blocked: nothing is pushed to them.
    public var blocked: Set<String> = []
    /// The push switch each person stored per category (absent: never touched, so on).
    public var pushSwitches: [String: [String: Bool]] = [:]
    /// Saved searches by id: their owner and settings (absent: deleted).
    public var savedSearches: [String: (person: String, settings: SavedSearchSettings)] = [:]
    /// Each person's registrations.
    public var devices: [String: [RegisteredDevice]] = [:]

    public init() {}
}

/// The fan-out's decision for a batch of outbox entries: one delivery per registered device of
/// every person who is to get a push, by the rules of `PreferenceRules` (security and orders locked
/// on, saved searches per search, every other category per switch, a shop's news to each person
/// who works there per their own `shop` switch). Pure: `FanoutStore` loads the facts and writes the
/// result in one transaction.
public struct FanoutDecision: Sendable {
    public struct Delivery: Sendable, Hashable {
        public var outboxId: Int64
        public var device: RegisteredDevice
        public var personId: String

        public var deviceId: UUID { device.id }
    }

    /// A registration of another app, skipped by a server that is not production (logged).
    public struct OtherApp: Sendable, Hashable {
        public var outboxId: Int64
        public var deviceId: UUID
        public var appId: String?
    }

    public var deliveries: [Delivery] = []
    /// Pushes decided per outbox entry (0 when nobody gets one).
    public var pushes: [Int64: Int] = [:]
    /// Why a person or device got no push, counted: `blocked`, `preference_off`, `no_device`,
    /// `other_app`, `stale`, `unknown_category`.
    public var skipped: [String: Int] = [:]
    public var otherApps: [OtherApp] = []

    /// Decides `entries`. An entry enqueued before `staleBefore` is not pushed any more (its news
    /// is older than a push's deadline).
    public static func decide(_ entries: [OutboxEntry], facts: DecisionFacts, policy: AppPolicy, staleBefore: Date) -> FanoutDecision {
        var decision = FanoutDecision()
        for entry in entries {
            decision.pushes[entry.id] = 0
            guard let category = NotificationCategory(rawValue: entry.category) else {
                decision.skipped["unknown_category", default: 0] += 1
                continue
            }
            if min(entry.happenedAt, entry.enqueuedAt) < staleBefore {
                decision.skipped["stale", default: 0] += 1
                continue
            }
            let people = entry.audience == "shop" ? facts.members[entry.recipientId] ?? [] : [entry.recipientId]
            for person in people {
                if facts.blocked.contains(person) {
                    decision.skipped["blocked", default: 0] += 1
                    continue
                }
                var savedSearch: SavedSearchSettings?
                if PreferenceRules.isManagedPerSearch(category), let id = entry.ids["savedSearchId"], let search = facts.savedSearches[id],
                    search.person == person
                {
                    savedSearch = search.settings
                }
                let switches = facts.pushSwitches[person]?[entry.category]
                let channels = PreferenceRules.channels(for: category, stored: { $0 == .push ? switches : nil }, savedSearch: savedSearch)
                guard channels.contains(.push) else {
                    decision.skipped["preference_off", default: 0] += 1
                    continue
                }
                let devices = (facts.devices[person] ?? []).filter { $0.createdAt <= entry.enqueuedAt }
                if devices.isEmpty { decision.skipped["no_device", default: 0] += 1 }
                for device in devices {
                    guard policy.allows(device.appId) else {
                        decision.skipped["other_app", default: 0] += 1
                        decision.otherApps.append(OtherApp(outboxId: entry.id, deviceId: device.id, appId: device.appId))
                        continue
                    }
                    decision.deliveries.append(Delivery(outboxId: entry.id, device: device, personId: person))
                    decision.pushes[entry.id, default: 0] += 1
                }
            }
        }
        return decision
    }
}
