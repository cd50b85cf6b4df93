import Devices
import Encodings
import Foundation
import InboxDomain
import NotificationOutbox
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
    /// Where this store's next take of the queue starts, shared by the loops that use it.
    let takeFloor = NotificationOutbox.TakeFloor()

    public init(settings: Settings) {
        self.settings = settings
    }

    // MARK: Deciding

    /// A batch of decided entries held by one fan-out (sql/010): `claim` is new at every claim, so
    /// only its holder can record it.
    public struct Batch: Sendable, Hashable {
        public var id: Int64
        public var claim: UUID
        /// How many pushes it lists (the length of its `answered` bits); 0 for a batch of an older
        /// release, which lists none.
        public var size: Int = 0
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
    /// is decided once, by one fan-out. The caller sends the pushes at once and records their
    /// answers as they arrive (`record(_:finishing:on:)`); only a push that must be tried again
    /// gets a row of its own.
    public func decide(limit: Int, now: Date, on connection: PostgresConnection) throws -> Decided {
        try connection.transaction { connection in
            let taken = try NotificationOutbox.take(.push, limit: limit, floor: takeFloor, on: connection)
            if taken.count == 0 { return .nothing }
            let deadline = now.addingTimeInterval(settings.deadline.inSeconds)
            let claim = UUID()
            var (claimed, decision) = try plan(taken.entries, now: now, deadline: deadline, reclaimed: false, on: connection)
            var batch: Batch?
            if !claimed.isEmpty {
                let id = try connection.query(
                    """
                    INSERT INTO push_batches (outbox_ids, claim, node, claimed_until, deadline, push_outbox_ids, push_devices, answered)
                    VALUES ('{}', $1, $2, clock_timestamp() + $3 * interval '1 millisecond', $4, $5, $6, repeat('0', $7::integer)::varbit) RETURNING id
                    """, claim, settings.node, settings.claimFor.wholeMilliseconds, deadline, claimed.map(\.outboxId), claimed.map(\.deviceId),
                    Int64(claimed.count)
                ).scalar(Int64.self)
                batch = Batch(id: id, claim: claim, size: claimed.count)
                for index in claimed.indices {
                    claimed[index].batch = batch
                    claimed[index].slot = index
                }
            }
            try Self.count(Self.counts(decision, unreadable: taken.unreadable), on: connection)
            return Decided(entries: taken.count, claimed: claimed, otherApps: decision.otherApps, batch: batch)
        }
    }

    /// Takes over one batch whose holder's claim ran out (it died, or lost its database): its
    /// pushes whose answers the holder had not recorded are sent again, each to its registration
    /// as it is now (one deleted meanwhile gets nothing), and marked `reclaimed`, since each may be
    /// on the phone already; what the holder had counted is added to the counters. Nothing when no
    /// batch is abandoned.
    public func takeOver(now: Date, on connection: PostgresConnection) throws -> Decided {
        try connection.transaction { connection in
            let claim = UUID()
            let rows = try connection.query(
                """
                WITH abandoned AS (
                    SELECT id, counted_names, counted FROM push_batches WHERE claimed_until < clock_timestamp()
                    ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
                UPDATE push_batches b SET claim = $1, node = $2, claimed_until = clock_timestamp() + $3 * interval '1 millisecond',
                    taken_over = b.taken_over + 1, counted_names = '{}', counted = '{}'
                FROM abandoned WHERE b.id = abandoned.id
                RETURNING b.id, b.outbox_ids, b.deadline, b.push_outbox_ids, b.push_devices, b.answered::text AS answered,
                    abandoned.counted_names, abandoned.counted
                """, claim, settings.node, settings.claimFor.wholeMilliseconds)
            guard let row = rows.first else { return .nothing }
            let id = try row.decode(Int64.self, "id")
            let deadline = try row.decode(Date.self, "deadline")
            try Self.count(Self.sum(try row.decode([String].self, "counted_names"), try row.decode([Int64].self, "counted")), on: connection)
            let pushOutboxIds = try row.decode([Int64].self, "push_outbox_ids")
            var claimed: [Claimed]
            var decided = Decided.nothing
            if pushOutboxIds.isEmpty {
                // A batch of an older release lists no pushes: its entries are decided again.
                let taken = try NotificationOutbox.entries(try row.decode([Int64].self, "outbox_ids"), on: connection)
                let (planned, decision) = try plan(taken.entries, now: now, deadline: deadline, reclaimed: true, on: connection)
                claimed = planned
                decided = Decided(entries: taken.count, claimed: [], otherApps: decision.otherApps, batch: nil)
            } else {
                let answered = Array(try row.decode(String.self, "answered").utf8)
                let devices = try row.decode([UUID].self, "push_devices")
                let unanswered = pushOutboxIds.indices.filter { $0 >= answered.count || answered[$0] != UInt8(ascii: "1") }
                claimed = try resend(unanswered.map { ($0, pushOutboxIds[$0], devices[$0]) }, deadline: deadline, on: connection)
                decided.entries = Set(unanswered.map { pushOutboxIds[$0] }).count
            }
            if claimed.isEmpty {
                try connection.query("DELETE FROM push_batches WHERE id = $1", id)
                return decided
            }
            let batch = Batch(id: id, claim: claim, size: pushOutboxIds.count)
            for index in claimed.indices {
                claimed[index].batch = batch
                if pushOutboxIds.isEmpty { claimed[index].slot = nil }
            }
            decided.claimed = claimed
            decided.batch = batch
            return decided
        }
    }

    /// The pushes of a taken-over batch still to send: (slot, outbox entry, registration), each
    /// with its entry and its registration as it is now (nil: deleted, or now somebody else's who
    /// is not a recipient of the entry).
    private func resend(_ pushes: [(slot: Int, outboxId: Int64, deviceId: UUID)], deadline: Date, on connection: PostgresConnection) throws -> [Claimed] {
        if pushes.isEmpty { return [] }
        let entries = Dictionary(grouping: try NotificationOutbox.entries(Array(Set(pushes.map(\.outboxId))), on: connection).entries, by: \.id)
        let registrations = try DeviceRegistry.pushRegistrations(ids: pushes.map(\.deviceId), on: connection)
        let unread = try Self.unread(of: registrations.values.map(\.personId), on: connection)
        return pushes.compactMap { push in
            guard let recipients = entries[push.outboxId], let first = recipients.first else { return nil }
            let registration = registrations[push.deviceId].flatMap { device in recipients.contains { $0.recipientId == device.personId } ? device : nil }
            let person = registration?.personId ?? first.recipientId
            return Claimed(
                deliveryId: nil, outboxId: push.outboxId, deviceId: push.deviceId, personId: person, attempts: 1, deadline: deadline,
                device: registration, notification: PushNotification(kind: first.kind, ids: first.ids, notificationId: first.notificationId),
                unread: unread[person] ?? 0, reclaimed: true, slot: push.slot)
        }
    }

    /// Counter names and counts (with repeats) summed by name.
    static func sum(_ names: [String], _ counts: [Int64]) -> [String: Int] {
        var sums: [String: Int] = [:]
        for (name, count) in zip(names, counts) { sums[name, default: 0] += Int(count) }
        return sums
    }

    /// The counters of a decision: what was not pushed, by reason.
    static func counts(_ decision: FanoutDecision, unreadable: Int) -> [String: Int] {
        var counts: [String: Int] = [:]
        for (skip, count) in decision.skipped { counts["skipped." + skip.name, default: 0] += count }
        if unreadable > 0 { counts["skipped." + PushSkip.unknownKind.name, default: 0] += unreadable }
        return counts
    }

    /// The pushes of `entries` to their people's registrations now, with the badge of each person now.
    private func plan(
        _ entries: [OutboxEntry], now: Date, deadline: Date, reclaimed: Bool, on connection: PostgresConnection
    ) throws -> ([Claimed], FanoutDecision) {
        let devices = try DeviceRegistry.pushRegistrations(of: FanoutDecision.people(of: entries), on: connection)
        let decision = FanoutDecision.decide(
            entries, devices: devices, policy: settings.policy, staleBefore: now.addingTimeInterval(-settings.deadline.inSeconds))
        if decision.deliveries.isEmpty { return ([], decision) }
        let unread = try Self.unread(of: decision.deliveries.map(\.personId), on: connection)
        let entriesById = Dictionary(entries.map { ($0.id, $0) }) { first, _ in first }
        var claimed: [Claimed] = []
        claimed.reserveCapacity(decision.deliveries.count)
        for delivery in decision.deliveries {
            guard let entry = entriesById[delivery.outboxId] else { continue }
            claimed.append(
                Claimed(
                    deliveryId: nil, outboxId: entry.id, deviceId: delivery.deviceId, personId: delivery.personId, attempts: 1, deadline: deadline,
                    device: delivery.device, notification: PushNotification(kind: entry.kind, ids: entry.ids, notificationId: entry.notificationId),
                    unread: unread[delivery.personId] ?? 0, reclaimed: reclaimed))
        }
        return (claimed, decision)
    }

    /// Each person's unread bell count now: the iOS badge.
    private static func unread(of people: [String], on connection: PostgresConnection) throws -> [String: Int] {
        var unread: [String: Int] = [:]
        for row in try connection.query("SELECT person_id, unread_count FROM bell_counters WHERE person_id = ANY($1::text[])", Array(Set(people))) {
            unread[try row.decode(String.self, at: 0)] = try row.decode(Int.self, at: 1)
        }
        return unread
    }

    // MARK: Claiming

    /// A push claimed for sending, with what it needs. `device` is nil when the registration was
    /// deleted (or taken over by somebody else) after the decision.
    public struct Claimed: Sendable {
        /// The delivery row (sql/006) of a push being tried again; nil for a push of a batch
        /// (decided just now, or taken over), which has no row of its own.
        public var deliveryId: Int64?
        public var outboxId: Int64
        public var deviceId: UUID
        public var personId: String
        public var attempts: Int
        public var deadline: Date
        public var device: DeviceRegistry.PushRegistration?
        public var notification: PushNotification
        /// The person's unread bell count now: the iOS badge.
        public var unread: Int
        /// Claimed before by a fan-out that never said what became of it (it died, or lost its
        /// database): its push may have gone out already, and may now go out twice.
        public var reclaimed: Bool
        /// The batch that holds it; nil for a push being tried again (it has its delivery row).
        public var batch: Batch?
        /// Its place in its batch's list of pushes (the bit of `answered` that says it is recorded).
        public var slot: Int?

        /// The push's own id (`apns-id`), the same on every attempt of this notification to this
        /// registration: the registration's id with the outbox entry's id folded into its first
        /// eight bytes, stamped UUID version 8 (RFC 9562's custom version). No hash: it is made
        /// once per push, and two pushes share one only if their registrations' random ids differ
        /// by exactly their entries' ids.
        public var pushId: UUID {
            var bytes = deviceId.uuid
            withUnsafeMutableBytes(of: &bytes) { raw in
                for index in 0..<8 { raw[index] ^= UInt8(truncatingIfNeeded: UInt64(bitPattern: outboxId) >> (56 - 8 * index)) }
                raw[6] = raw[6] & 0x0F | 0x80
                raw[8] = raw[8] & 0x3F | 0x80
            }
            return UUID(uuid: bytes)
        }
    }

    /// Claims up to `limit` due deliveries (pushes to try again) for `claimFor`, oldest first,
    /// skipping the ones other fan-outs hold.
    public func claim(limit: Int, on connection: PostgresConnection) throws -> [Claimed] {
        let rows = try connection.query(
            """
            UPDATE push_deliveries d
            SET claimed_until = clock_timestamp() + $2 * interval '1 millisecond', attempts = d.attempts + 1,
                reclaimed = d.claimed_until IS NOT NULL
            WHERE d.id = ANY(ARRAY(
                SELECT id FROM push_deliveries
                WHERE not_before <= clock_timestamp() AND (claimed_until IS NULL OR claimed_until < clock_timestamp())
                ORDER BY not_before, id LIMIT $1 FOR UPDATE SKIP LOCKED))
            RETURNING d.id, d.outbox_id, d.device_id, d.person_id, d.attempts, d.deadline, d.reclaimed
            """, limit, settings.claimFor.wholeMilliseconds)
        if rows.count == 0 { return [] }
        var due: [(id: Int64, outboxId: Int64, deviceId: UUID, personId: String, attempts: Int, deadline: Date, reclaimed: Bool)] = []
        for row in rows {
            due.append(
                (
                    try row.decode(Int64.self, "id"), try row.decode(Int64.self, "outbox_id"), try row.decode(UUID.self, "device_id"),
                    try row.decode(String.self, "person_id"), try row.decode(Int.self, "attempts"), try row.decode(Date.self, "deadline"),
                    try row.decode(Bool.self, "reclaimed")
                ))
        }
        let entries = Dictionary(
            try NotificationOutbox.entries(Array(Set(due.map(\.outboxId))), on: connection).entries.map { ($0.id, $0) }) { first, _ in first }
        let devices = try DeviceRegistry.pushRegistrations(due.map { ($0.deviceId, $0.personId) }, on: connection)
        let unread = try Self.unread(of: due.map(\.personId), on: connection)
        var claimed: [Claimed] = []
        var unreadable: [Int64] = []
        claimed.reserveCapacity(due.count)
        for push in due.sorted(by: { $0.id < $1.id }) {
            guard let entry = entries[push.outboxId] else {
                unreadable.append(push.id)
                continue
            }
            claimed.append(
                Claimed(
                    deliveryId: push.id, outboxId: push.outboxId, deviceId: push.deviceId, personId: push.personId, attempts: push.attempts,
                    deadline: push.deadline, device: devices[push.deviceId],
                    notification: PushNotification(kind: entry.kind, ids: entry.ids, notificationId: entry.notificationId),
                    unread: unread[push.personId] ?? 0, reclaimed: push.reclaimed))
        }
        if !unreadable.isEmpty {
            // Of a kind a newer release enqueued: counted and let go, never tried for ever.
            try connection.query("DELETE FROM push_deliveries WHERE id = ANY($1::bigint[])", unreadable)
            try Self.count(["skipped." + PushSkip.unknownKind.name: unreadable.count], on: connection)
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

    /// Records the resolutions of claimed pushes as their answers arrive. Every recorded push of a
    /// batch gets its bit set on the batch's row (`answered`), so that a fan-out taking the batch
    /// over sends only what was not; the rows of `finishing` (every push of theirs recorded, now or
    /// before) go, and what their pushes counted is added to the counters.
    ///
    /// Answers that only count (sent, logged, a registration gone) of batches not finishing are
    /// one update per batch: their bits, and their counts kept on the row until the batch ends or
    /// is taken over. Anything else is one transaction: a delivery row deleted or rescheduled, a
    /// push of a batch to try again given a row of its own (the only time a first try writes one),
    /// a dead registration deleted, a learned APNs host stored. Returns the batches that were no
    /// longer this caller's (taken over by another fan-out because this one outlived its claim):
    /// their pushes may go out twice. `extra` counters (the providers' latencies) are added with
    /// the answers' own.
    @discardableResult
    public func record(
        _ resolutions: [(claimed: Claimed, resolution: Resolution)], finishing: [Batch] = [], counting extra: [String: Int] = [:],
        on connection: PostgresConnection
    ) throws -> [Batch] {
        if resolutions.isEmpty && finishing.isEmpty { return [] }
        var finished: [Int64] = []
        var retryIds: [Int64] = []
        var retryAt: [Date] = []
        var retryReasons: [String] = []
        var firstRetries: [(claimed: Claimed, at: Date, reason: String)] = []
        var deadDevices: [UUID] = []
        var learned: [UUID: APNsEnvironment] = [:]
        var answered: [Int64: (batch: Batch, slots: [Int], counts: [String: Int])] = [:]
        var counts: [String: Int] = [:]
        var onlyCounts = finishing.isEmpty
        for (claimed, resolution) in resolutions {
            // What the push counts: its outcome, and whether it was sent again after a takeover (not
            // a push that went nowhere: its registration was gone).
            let outcome: String
            switch resolution {
            case .delivered(let platform, let environment, let logged):
                outcome = (logged ? "logged." : "sent.") + platform.rawValue
                if let environment { learned[claimed.deviceId] = environment }
            case .deleteRegistration(let reason):
                deadDevices.append(claimed.deviceId)
                outcome = Self.counterName("deleted.", reason)
            case .retry(let at, let reason):
                if let id = claimed.deliveryId {
                    retryIds.append(id)
                    retryAt.append(at)
                    retryReasons.append(reason)
                } else {
                    firstRetries.append((claimed, at, reason))
                }
                outcome = Self.counterName("retried.", reason)
            case .drop(let reason):
                outcome = Self.counterName("failed.", reason)
            case .skip(let reason):
                outcome = Self.counterName("skipped.", reason)
            }
            let reclaimed = claimed.reclaimed && claimed.device != nil
            if case .retry = resolution {} else if let id = claimed.deliveryId { finished.append(id) }
            switch resolution {
            case .delivered(_, nil, _), .skip: break
            default: onlyCounts = false
            }
            if let batch = claimed.batch, let slot = claimed.slot, batch.size > 0 {
                answered[batch.id, default: (batch, [], [:])].slots.append(slot)
                answered[batch.id]!.counts[outcome, default: 0] += 1
                if reclaimed { answered[batch.id]!.counts["reclaimed", default: 0] += 1 }
            } else {
                onlyCounts = false
                counts[outcome, default: 0] += 1
                if reclaimed { counts["reclaimed", default: 0] += 1 }
            }
        }
        if !extra.isEmpty {
            // Kept with a batch's own counts when there is one (summed with them), else counted now.
            if let batch = answered.keys.min() {
                answered[batch]!.counts.merge(extra, uniquingKeysWith: +)
            } else {
                counts.merge(extra, uniquingKeysWith: +)
                onlyCounts = false
            }
        }
        let finishingBatches = Set(finishing.map(\.id))
        let marked = answered.values.filter { !finishingBatches.contains($0.batch.id) }.sorted { $0.batch.id < $1.batch.id }
        if onlyCounts {
            // One statement per batch, no transaction: each is whole on its own.
            return try marked.filter { try !mark($0.batch, $0.slots, keeping: $0.counts, on: connection) }.map(\.batch)
        }
        for answers in answered.values where finishingBatches.contains(answers.batch.id) { counts.merge(answers.counts, uniquingKeysWith: +) }
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
            try DeviceRegistry.delete(deadDevices, on: connection)
            try DeviceRegistry.learned(learned, on: connection)
            var lost: [Batch] = []
            for answers in marked {
                counts.merge(answers.counts, uniquingKeysWith: +)
                if try !mark(answers.batch, answers.slots, keeping: [:], on: connection) { lost.append(answers.batch) }
            }
            if !finishing.isEmpty {
                var finishedBatches = Set<Int64>()
                for row in try connection.query(
                    """
                    DELETE FROM push_batches b USING unnest($1::bigint[], $2::uuid[]) AS u(id, claim)
                    WHERE b.id = u.id AND b.claim = u.claim AND b.id = ANY($1::bigint[]) RETURNING b.id, b.counted_names, b.counted
                    """, finishing.map(\.id), finishing.map(\.claim))
                {
                    finishedBatches.insert(try row.decode(Int64.self, at: 0))
                    counts.merge(Self.sum(try row.decode([String].self, at: 1), try row.decode([Int64].self, at: 2)), uniquingKeysWith: +)
                }
                lost += finishing.filter { !finishedBatches.contains($0.id) }
            }
            try Self.count(counts, on: connection)
            return lost
        }
    }

    /// Sets the bits of `slots` on `batch`'s row and keeps `counts` there, if the batch is still
    /// the caller's; whether it was.
    private func mark(_ batch: Batch, _ slots: [Int], keeping counts: [String: Int], on connection: PostgresConnection) throws -> Bool {
        var mask = [UInt8](repeating: UInt8(ascii: "0"), count: batch.size)
        for slot in slots where slot < mask.count { mask[slot] = UInt8(ascii: "1") }
        let names = counts.keys.sorted()
        return try connection.query(
            """
            UPDATE push_batches SET answered = answered | $3::text::varbit, counted_names = counted_names || $4::text[],
                counted = counted || $5::bigint[]
            WHERE id = $1 AND claim = $2
            """, batch.id, batch.claim, String(decoding: mask, as: UTF8.self), names, names.map { Int64(counts[$0]!) }
        ).affectedRows ?? 0 > 0
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
        let outbox = try NotificationOutbox.waiting(.push, on: connection)
        let deliveries = try connection.query(
            "SELECT count(*), coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8 FROM push_deliveries")[0]
        let batches = try connection.query(
            """
            SELECT coalesce(sum(n), 0)::bigint, coalesce(sum(n) FILTER (WHERE claimed_until < clock_timestamp()), 0)::bigint
            FROM (SELECT claimed_until, cardinality(outbox_ids) + (SELECT count(DISTINCT o) FROM unnest(push_outbox_ids) o) AS n
                  FROM push_batches) b
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
            undecided: outbox.count, oldestUndecidedSeconds: outbox.oldestSeconds,
            pending: try deliveries.decode(Int.self, at: 0), oldestPendingSeconds: try deliveries.decode(Double.self, at: 1),
            sending: try batches.decode(Int.self, at: 0), abandoned: try batches.decode(Int.self, at: 1),
            counters: counters.map { (name: $0.0, count: $0.1) },
            providerTokens: tokens.map { (node: $0.0, provider: $0.1, ageSeconds: $0.2) })
    }
}
