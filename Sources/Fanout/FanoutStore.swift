import Foundation
import Encodings
import InboxDomain
import PostgresClient
import PushProtocol

/// The fan-out's tables (sql/006): deciding outbox entries into deliveries, claiming deliveries to
/// send, and recording what became of them. Every call is one transaction (or one statement) on
/// the caller's connection and blocks it; several fan-outs at once never take the same row
/// (`FOR UPDATE SKIP LOCKED`, and a claim that lasts `claimFor`).
public struct FanoutStore: Sendable {
    public struct Settings: Sendable {
        public var policy: AppPolicy
        /// How long a push is tried before it is given up (and how old news may be when decided).
        public var deadline: Duration
        /// How long a claim keeps a delivery from the other fan-outs; a fan-out that dies leaves
        /// its claims to them after this.
        public var claimFor: Duration
        /// Names this process on the batches it holds (`inbox status`, and the log of a takeover).
        public var node: String

        public init(
            policy: AppPolicy = .production, deadline: Duration = .seconds(24 * 3600), claimFor: Duration = .seconds(60),
            node: String = ProcessInfo.processInfo.hostName
        ) {
            self.policy = policy
            self.deadline = deadline
            self.claimFor = claimFor
            self.node = node
        }
    }

    public let settings: Settings

    public init(settings: Settings) {
        self.settings = settings
    }

    // MARK: Deciding

    /// A batch of decided entries held by one fan-out (sql/010): `claim` is new at every claim, so
    /// only its holder can finish it.
    public struct Batch: Sendable, Hashable {
        public var id: Int64
        public var claim: UUID
    }

    /// What `decide` (or `takeOver`) did.
    public struct Decided: Sendable {
        public var entries: Int
        /// The pushes decided, held by the caller (through `batch`) to send at once.
        public var claimed: [Claimed]
        public var otherApps: [FanoutDecision.OtherApp]
        /// The batch row that holds `claimed`; nil when nothing was decided to send.
        public var batch: Batch?

        public var deliveries: Int { claimed.count }

        static let nothing = Decided(entries: 0, claimed: [], otherApps: [], batch: nil)
    }

    /// Decides up to `limit` pending outbox entries in one transaction: the entries leave the
    /// pending queue and one batch row (sql/010) records that this fan-out holds them, so an entry
    /// is decided once, by one fan-out. The caller sends the pushes at once and records them with
    /// `record(_:batches:on:)`; only a push that must be tried again gets a row of its own.
    public func decide(limit: Int, now: Date, on connection: PostgresConnection) throws -> Decided {
        try connection.transaction { connection in
            let entries = try loadEntries(
                """
                WHERE id = ANY(ARRAY(
                    SELECT outbox_id FROM notification_outbox_pending ORDER BY outbox_id LIMIT $1 FOR UPDATE SKIP LOCKED))
                """, limit, on: connection)
            if entries.isEmpty { return .nothing }
            let deadline = now.addingTimeInterval(settings.deadline.inSeconds)
            let (claimed, decision) = try plan(entries, now: now, deadline: deadline, reclaimed: false, on: connection)
            var batch: Batch?
            if !claimed.isEmpty {
                let claim = UUID()
                let id = try connection.query(
                    """
                    INSERT INTO push_batches (outbox_ids, claim, node, claimed_until, deadline)
                    VALUES ($1, $2, $3, clock_timestamp() + $4 * interval '1 millisecond', $5) RETURNING id
                    """, Array(Set(claimed.map(\.outboxId))).sorted(), claim, settings.node, settings.claimFor.wholeMilliseconds, deadline
                ).scalar(Int64.self)
                batch = Batch(id: id, claim: claim)
            }
            try connection.query("DELETE FROM notification_outbox_pending WHERE outbox_id = ANY($1::bigint[])", entries.map(\.id))
            var counts: [String: Int] = [:]
            for (reason, count) in decision.skipped { counts["skipped." + reason] = count }
            try Self.count(counts, on: connection)
            return Decided(entries: entries.count, claimed: claimed, otherApps: decision.otherApps, batch: batch)
        }
    }

    /// Takes over one batch whose holder's claim ran out (it died, or lost its database): its
    /// entries are decided again from the live tables (a device deleted meanwhile gets nothing)
    /// and every push is marked `reclaimed`, since it may be on the phone already. Nothing when no
    /// batch is abandoned.
    public func takeOver(now: Date, on connection: PostgresConnection) throws -> Decided {
        try connection.transaction { connection in
            let claim = UUID()
            let rows = try connection.query(
                """
                UPDATE push_batches b SET claim = $1, node = $2, claimed_until = clock_timestamp() + $3 * interval '1 millisecond',
                    taken_over = b.taken_over + 1
                WHERE b.id = (SELECT id FROM push_batches WHERE claimed_until < clock_timestamp() ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
                RETURNING b.id, b.outbox_ids, b.deadline
                """, claim, settings.node, settings.claimFor.wholeMilliseconds)
            guard let row = rows.first else { return .nothing }
            let id = try row.decode(Int64.self, at: 0)
            let entries = try loadEntries("WHERE id = ANY($1::bigint[])", try row.decode([Int64].self, at: 1), on: connection)
            let (claimed, decision) = try plan(entries, now: now, deadline: try row.decode(Date.self, at: 2), reclaimed: true, on: connection)
            if claimed.isEmpty {
                try connection.query("DELETE FROM push_batches WHERE id = $1", id)
                return Decided(entries: entries.count, claimed: [], otherApps: decision.otherApps, batch: nil)
            }
            return Decided(entries: entries.count, claimed: claimed, otherApps: decision.otherApps, batch: Batch(id: id, claim: claim))
        }
    }

    /// Outbox entries, by the `condition` on their id.
    private func loadEntries(_ condition: String, _ argument: some PostgresEncodable, on connection: PostgresConnection) throws -> [OutboxEntry] {
        let rows = try connection.query(
            """
            SELECT id, notification_id, audience, recipient_id, category, event, enqueued_at, created_at,
                ARRAY(SELECT key FROM jsonb_each_text(ids) ORDER BY key) AS id_keys,
                ARRAY(SELECT value FROM jsonb_each_text(ids) ORDER BY key) AS id_values
            FROM notification_outbox
            \(condition)
            ORDER BY id
            """, argument)
        var entries: [OutboxEntry] = []
        entries.reserveCapacity(rows.count)
        for row in rows {
            let keys = try row.decode([String].self, "id_keys")
            let values = try row.decode([String].self, "id_values")
            entries.append(
                OutboxEntry(
                    id: try row.decode(Int64.self, "id"), notificationId: try row.decode(String.self, "notification_id"),
                    audience: try row.decode(String.self, "audience"), recipientId: try row.decode(String.self, "recipient_id"),
                    category: try row.decode(String.self, "category"), event: try row.decode(String.self, "event"),
                    ids: Dictionary(zip(keys, values)) { first, _ in first }, enqueuedAt: try row.decode(Date.self, "enqueued_at"),
                    happenedAt: try row.decode(Date.self, "created_at")))
        }
        return entries
    }

    /// The pushes of `entries`, decided from the live tables, with the badge of each person now.
    private func plan(
        _ entries: [OutboxEntry], now: Date, deadline: Date, reclaimed: Bool, on connection: PostgresConnection
    ) throws -> ([Claimed], FanoutDecision) {
        let facts = try loadFacts(for: entries, on: connection)
        let decision = FanoutDecision.decide(
            entries, facts: facts, policy: settings.policy, staleBefore: now.addingTimeInterval(-settings.deadline.inSeconds))
        if decision.deliveries.isEmpty { return ([], decision) }
        let people = Array(Set(decision.deliveries.map(\.personId)))
        var unread: [String: Int] = [:]
        for row in try connection.query("SELECT person_id, unread_count FROM bell_counters WHERE person_id = ANY($1::text[])", people) {
            unread[try row.decode(String.self, at: 0)] = try row.decode(Int.self, at: 1)
        }
        let entriesById = Dictionary(entries.map { ($0.id, $0) }) { first, _ in first }
        var claimed: [Claimed] = []
        claimed.reserveCapacity(decision.deliveries.count)
        for delivery in decision.deliveries {
            guard let entry = entriesById[delivery.outboxId] else { continue }
            let device = delivery.device
            claimed.append(
                Claimed(
                    deliveryId: nil, outboxId: entry.id, deviceId: device.id, personId: delivery.personId, attempts: 1, deadline: deadline,
                    device: PushPlatform(rawValue: device.platform).map {
                        Claimed.Registration(
                            platform: $0, token: device.token, appId: device.appId, locale: device.locale,
                            apnsEnvironment: device.apnsEnvironment.flatMap(APNsEnvironment.init(rawValue:)))
                    },
                    notification: PushNotification(
                        category: NotificationCategory(rawValue: entry.category) ?? .messages, event: entry.event, ids: entry.ids,
                        notificationId: entry.audience == "person" ? entry.notificationId : nil),
                    unread: unread[delivery.personId] ?? 0, reclaimed: reclaimed))
        }
        return (claimed, decision)
    }

    /// The live tables' facts about the people of `entries` (five queries for the whole batch).
    private func loadFacts(for entries: [OutboxEntry], on connection: PostgresConnection) throws -> DecisionFacts {
        var facts = DecisionFacts()
        let shops = Array(Set(entries.filter { $0.audience == "shop" }.map(\.recipientId)))
        if !shops.isEmpty {
            for row in try connection.query("SELECT shop_id, person_id FROM shop_members WHERE shop_id = ANY($1::text[])", shops) {
                facts.members[try row.decode(String.self, at: 0), default: []].append(try row.decode(String.self, at: 1))
            }
        }
        var people = Set(entries.filter { $0.audience == "person" }.map(\.recipientId))
        for members in facts.members.values { people.formUnion(members) }
        let personList = Array(people)
        if personList.isEmpty { return facts }
        for row in try connection.query("SELECT person_id FROM blocked_accounts WHERE person_id = ANY($1::text[])", personList) {
            facts.blocked.insert(try row.decode(String.self, at: 0))
        }
        for row in try connection.query(
            "SELECT person_id, category, enabled FROM notification_preferences WHERE person_id = ANY($1::text[]) AND channel = 'push'",
            personList)
        {
            facts.pushSwitches[try row.decode(String.self, at: 0), default: [:]][try row.decode(String.self, at: 1)] = try row.decode(
                Bool.self, at: 2)
        }
        let searches = Array(Set(entries.compactMap { $0.category == NotificationCategory.savedSearches.rawValue ? $0.ids["savedSearchId"] : nil }))
        if !searches.isEmpty {
            for row in try connection.query(
                "SELECT saved_search_id, person_id, interval, push FROM saved_searches WHERE saved_search_id = ANY($1::text[]) AND NOT deleted",
                searches)
            {
                facts.savedSearches[try row.decode(String.self, at: 0)] = (
                    person: try row.decode(String.self, at: 1),
                    settings: SavedSearchSettings(
                        interval: SavedSearchInterval(rawValue: try row.decode(String.self, at: 2)) ?? .never, push: try row.decode(Bool.self, at: 3))
                )
            }
        }
        for row in try connection.query(
            """
            SELECT person_id, id, app_id, created_at, platform, push_token, locale, apns_environment
            FROM devices WHERE person_id = ANY($1::text[]) ORDER BY created_at, id
            """, personList)
        {
            facts.devices[try row.decode(String.self, at: 0), default: []].append(
                RegisteredDevice(
                    id: try row.decode(UUID.self, at: 1), appId: try row.decode(String?.self, at: 2), createdAt: try row.decode(Date.self, at: 3),
                    platform: try row.decode(String.self, at: 4), token: try row.decode(String.self, at: 5), locale: try row.decode(String?.self, at: 6),
                    apnsEnvironment: try row.decode(String?.self, at: 7)))
        }
        return facts
    }

    // MARK: Claiming

    /// A delivery claimed for sending, with what its push needs. `device` is nil when the
    /// registration was deleted (or taken over by somebody else) after the decision.
    public struct Claimed: Sendable {
        public struct Registration: Sendable {
            public var platform: PushPlatform
            public var token: String
            public var appId: String?
            public var locale: String?
            public var apnsEnvironment: APNsEnvironment?
        }

        /// The delivery row (sql/006) of a push being tried again; nil for a push of a batch
        /// (decided just now, or taken over), which has no row of its own.
        public var deliveryId: Int64?
        public var outboxId: Int64
        public var deviceId: UUID
        public var personId: String
        public var attempts: Int
        public var deadline: Date
        public var device: Registration?
        public var notification: PushNotification
        /// The person's unread bell count now: the iOS badge.
        public var unread: Int
        /// Claimed before by a fan-out that never said what became of it (it died, or lost its
        /// database): its push may have gone out already, and may now go out twice.
        public var reclaimed: Bool
    }

    /// Claims up to `limit` due deliveries for `claimFor`, oldest first, skipping the ones other
    /// fan-outs hold.
    public func claim(limit: Int, on connection: PostgresConnection) throws -> [Claimed] {
        // `= ANY(ARRAY(...))` and LATERAL lookups keep every step on an index: as a join, the
        // planner hashed the whole deliveries, devices and counters tables for each batch.
        let rows = try connection.query(
            """
            WITH claimed AS (
                UPDATE push_deliveries d
                SET claimed_until = clock_timestamp() + $2 * interval '1 millisecond', attempts = d.attempts + 1,
                    reclaimed = d.claimed_until IS NOT NULL
                WHERE d.id = ANY(ARRAY(
                    SELECT id FROM push_deliveries
                    WHERE not_before <= clock_timestamp() AND (claimed_until IS NULL OR claimed_until < clock_timestamp())
                    ORDER BY not_before, id LIMIT $1 FOR UPDATE SKIP LOCKED))
                RETURNING d.id, d.outbox_id, d.device_id, d.person_id, d.attempts, d.deadline, d.reclaimed
            )
            SELECT c.id, c.outbox_id, c.device_id, c.person_id, c.attempts, c.deadline, c.reclaimed,
                v.platform, v.push_token, v.app_id, v.locale, v.apns_environment,
                o.notification_id, o.audience, o.category, o.event,
                ARRAY(SELECT key FROM jsonb_each_text(o.ids) ORDER BY key) AS id_keys,
                ARRAY(SELECT value FROM jsonb_each_text(o.ids) ORDER BY key) AS id_values,
                coalesce(b.unread_count, 0) AS unread
            FROM claimed c
            CROSS JOIN LATERAL (SELECT * FROM notification_outbox o WHERE o.id = c.outbox_id) o
            LEFT JOIN LATERAL (SELECT * FROM devices v WHERE v.id = c.device_id AND v.person_id = c.person_id) v ON true
            LEFT JOIN LATERAL (SELECT unread_count FROM bell_counters b WHERE b.person_id = c.person_id) b ON true
            ORDER BY c.id
            """, limit, settings.claimFor.wholeMilliseconds)
        var claimed: [Claimed] = []
        claimed.reserveCapacity(rows.count)
        for row in rows {
            var device: Claimed.Registration?
            if let platform = try row.decode(String?.self, "platform").flatMap(PushPlatform.init(rawValue:)) {
                device = Claimed.Registration(
                    platform: platform, token: try row.decode(String.self, "push_token"), appId: try row.decode(String?.self, "app_id"),
                    locale: try row.decode(String?.self, "locale"),
                    apnsEnvironment: try row.decode(String?.self, "apns_environment").flatMap(APNsEnvironment.init(rawValue:)))
            }
            let keys = try row.decode([String].self, "id_keys")
            let values = try row.decode([String].self, "id_values")
            let isPerson = try row.decode(String.self, "audience") == "person"
            let category = NotificationCategory(rawValue: try row.decode(String.self, "category")) ?? .messages
            claimed.append(
                Claimed(
                    deliveryId: try row.decode(Int64.self, "id"), outboxId: try row.decode(Int64.self, "outbox_id"), deviceId: try row.decode(UUID.self, "device_id"),
                    personId: try row.decode(String.self, "person_id"), attempts: try row.decode(Int.self, "attempts"),
                    deadline: try row.decode(Date.self, "deadline"), device: device,
                    notification: PushNotification(
                        category: category, event: try row.decode(String.self, "event"), ids: Dictionary(zip(keys, values)) { first, _ in first },
                        notificationId: isPerson ? try row.decode(String.self, "notification_id") : nil),
                    unread: try row.decode(Int.self, "unread"), reclaimed: try row.decode(Bool.self, "reclaimed")))
        }
        return claimed
    }

    // MARK: Recording

    /// What to do with a claimed delivery after its answer.
    public enum Resolution: Sendable, Hashable {
        /// Sent (or, without credentials, logged): the delivery is done. `learned` is the APNs host
        /// to store on the registration.
        case delivered(PushPlatform, learned: APNsEnvironment?, logged: Bool = false)
        /// The platform says the registration is dead: delete it (and the delivery).
        case deleteRegistration(reason: String)
        /// Try again at `at`.
        case retry(at: Date, reason: String)
        /// Given up: a permanent refusal, or past the deadline.
        case drop(reason: String)
        /// Not sent: the registration is gone, or another app's.
        case skip(reason: String)
    }

    /// Records the resolutions of claimed pushes and finishes `batches`, in one transaction: a
    /// delivery row is deleted or rescheduled; a push of a batch that must be tried again gets a
    /// row of its own (the only time a first try writes one); the batch rows go. Returns the
    /// batches that were no longer this caller's (taken over by another fan-out because this one
    /// outlived its claim): their pushes may go out twice.
    @discardableResult
    public func record(
        _ resolutions: [(claimed: Claimed, resolution: Resolution)], batches: [Batch] = [], on connection: PostgresConnection
    ) throws -> [Batch] {
        if resolutions.isEmpty && batches.isEmpty { return [] }
        var finished: [Int64] = []
        var retryIds: [Int64] = []
        var retryAt: [Date] = []
        var retryReasons: [String] = []
        var firstRetries: [(claimed: Claimed, at: Date, reason: String)] = []
        var deadDevices: [UUID] = []
        var learnedDevices: [UUID] = []
        var learnedEnvironments: [String] = []
        var counts: [String: Int] = [:]
        for (claimed, resolution) in resolutions {
            if claimed.reclaimed { counts["reclaimed", default: 0] += 1 }
            switch resolution {
            case .delivered(let platform, let learned, let logged):
                counts[(logged ? "logged." : "sent.") + platform.rawValue, default: 0] += 1
                if let learned {
                    learnedDevices.append(claimed.deviceId)
                    learnedEnvironments.append(learned.rawValue)
                }
            case .deleteRegistration(let reason):
                deadDevices.append(claimed.deviceId)
                counts[Self.counterName("deleted.", reason), default: 0] += 1
            case .retry(let at, let reason):
                if let id = claimed.deliveryId {
                    retryIds.append(id)
                    retryAt.append(at)
                    retryReasons.append(reason)
                } else {
                    firstRetries.append((claimed, at, reason))
                }
                counts[Self.counterName("retried.", reason), default: 0] += 1
            case .drop(let reason):
                counts[Self.counterName("failed.", reason), default: 0] += 1
            case .skip(let reason):
                counts[Self.counterName("skipped.", reason), default: 0] += 1
            }
            if case .retry = resolution {} else if let id = claimed.deliveryId { finished.append(id) }
        }
        return try connection.transaction { connection in
            if !finished.isEmpty { try connection.query("DELETE FROM push_deliveries WHERE id = ANY($1::bigint[])", finished) }
            if !retryIds.isEmpty {
                try connection.query(
                    """
                    UPDATE push_deliveries d SET not_before = u.at, claimed_until = NULL, last_reason = u.reason
                    FROM unnest($1::bigint[], $2::timestamptz[], $3::text[]) AS u(id, at, reason) WHERE d.id = u.id AND d.id = ANY($1::bigint[])
                    """, retryIds, retryAt, retryReasons)
            }
            if !firstRetries.isEmpty {
                // A takeover may race a holder that outlived its claim: the first row stays.
                try connection.query(
                    """
                    INSERT INTO push_deliveries (outbox_id, device_id, person_id, deadline, attempts, not_before, last_reason)
                    SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::timestamptz[], $5::integer[], $6::timestamptz[], $7::text[])
                    ON CONFLICT (outbox_id, device_id) DO NOTHING
                    """, firstRetries.map(\.claimed.outboxId), firstRetries.map(\.claimed.deviceId), firstRetries.map(\.claimed.personId),
                    firstRetries.map(\.claimed.deadline), firstRetries.map { Int32($0.claimed.attempts) }, firstRetries.map(\.at),
                    firstRetries.map(\.reason))
            }
            // The device's other pending pushes find it gone when claimed (`skipped.device_gone`).
            if !deadDevices.isEmpty { try connection.query("DELETE FROM devices WHERE id = ANY($1::uuid[])", deadDevices) }
            if !learnedDevices.isEmpty {
                try connection.query(
                    """
                    UPDATE devices v SET apns_environment = u.environment, updated_at = clock_timestamp()
                    FROM unnest($1::uuid[], $2::text[]) AS u(id, environment)
                    WHERE v.id = u.id AND v.id = ANY($1::uuid[]) AND v.apns_environment IS DISTINCT FROM u.environment
                    """, learnedDevices, learnedEnvironments)
            }
            try Self.count(counts, on: connection)
            if batches.isEmpty { return [] }
            var finishedBatches = Set<Int64>()
            for row in try connection.query(
                """
                DELETE FROM push_batches b USING unnest($1::bigint[], $2::uuid[]) AS u(id, claim)
                WHERE b.id = u.id AND b.claim = u.claim AND b.id = ANY($1::bigint[]) RETURNING b.id
                """, batches.map(\.id), batches.map(\.claim))
            {
                finishedBatches.insert(try row.decode(Int64.self, at: 0))
            }
            return batches.filter { !finishedBatches.contains($0.id) }
        }
    }

    /// A reason as a counter's name: the code before a provider's message (`SENDER_ID_MISMATCH: …`),
    /// so that the counters stay a short list however the providers word their messages.
    static func counterName(_ prefix: String, _ reason: String) -> String {
        let code = reason.range(of: ": ").map { String(reason[..<$0.lowerBound]) } ?? reason
        return prefix + String(code.prefix(80))
    }

    /// Adds to `push_counters`.
    static func count(_ counts: [String: Int], on connection: PostgresConnection) throws {
        try connection.addToCounters("push_counters", counts)
    }

    /// Records when this node made its provider tokens.
    public func recordProviderTokens(_ issued: [String: Date], node: String, on connection: PostgresConnection) throws {
        let providers = issued.keys.sorted()
        if providers.isEmpty { return }
        try connection.query(
            """
            INSERT INTO push_provider_tokens (node, provider, issued_at) SELECT $1, p, i FROM unnest($2::text[], $3::timestamptz[]) AS u(p, i)
            ON CONFLICT (node, provider) DO UPDATE SET issued_at = EXCLUDED.issued_at
            """, node, providers, providers.map { issued[$0]! })
    }

    // MARK: Status

    /// The fan-out's state for `inbox status` and /metrics.
    public struct Status: Sendable {
        /// Outbox entries not decided yet, and the age of the oldest.
        public var undecided: Int
        public var oldestUndecidedSeconds: Double
        /// Deliveries waiting to be sent (or retried), and the age of the oldest.
        public var pending: Int
        public var oldestPendingSeconds: Double
        /// Outbox entries decided and held by a fan-out that is sending their pushes (or died
        /// doing so: `abandoned` of them wait for a takeover).
        public var sending: Int
        public var abandoned: Int
        public var counters: [(name: String, count: Int64)]
        /// Age of each node's provider tokens.
        public var providerTokens: [(node: String, provider: String, ageSeconds: Double)]
    }

    public static func status(on connection: PostgresConnection) throws -> Status {
        // One snapshot for every count: recording a batch deletes its row and writes its retries
        // in one transaction, and counts read one statement after another could miss both (the
        // retries read before, the batch after), so a waiter saw nothing left while retries were.
        if connection.isInTransaction { return try readStatus(on: connection) }
        return try connection.transaction(isolation: .repeatableRead) { try readStatus(on: $0) }
    }

    private static func readStatus(on connection: PostgresConnection) throws -> Status {
        let outbox = try connection.query(
            """
            SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(o.enqueued_at)), 0)::float8
            FROM notification_outbox_pending p JOIN notification_outbox o ON o.id = p.outbox_id
            """)[0]
        let deliveries = try connection.query(
            "SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8 FROM push_deliveries")[0]
        let batches = try connection.query(
            """
            SELECT coalesce(sum(cardinality(outbox_ids)), 0)::bigint,
                coalesce(sum(cardinality(outbox_ids)) FILTER (WHERE claimed_until < clock_timestamp()), 0)::bigint
            FROM push_batches
            """)[0]
        var counters: [(String, Int64)] = []
        for row in try connection.query("SELECT name, count FROM push_counters ORDER BY name") {
            counters.append((try row.decode(String.self, at: 0), try row.decode(Int64.self, at: 1)))
        }
        var tokens: [(String, String, Double)] = []
        for row in try connection.query(
            "SELECT node, provider, extract(epoch FROM clock_timestamp() - issued_at)::float8 FROM push_provider_tokens ORDER BY node, provider")
        {
            tokens.append((try row.decode(String.self, at: 0), try row.decode(String.self, at: 1), try row.decode(Double.self, at: 2)))
        }
        return Status(
            undecided: try outbox.decode(Int.self, at: 0), oldestUndecidedSeconds: try outbox.decode(Double.self, at: 1),
            pending: try deliveries.decode(Int.self, at: 0), oldestPendingSeconds: try deliveries.decode(Double.self, at: 1),
            sending: try batches.decode(Int.self, at: 0), abandoned: try batches.decode(Int.self, at: 1),
            counters: counters.map { (name: $0.0, count: $0.1) },
            providerTokens: tokens.map { (node: $0.0, provider: $0.1, ageSeconds: $0.2) })
    }
}
