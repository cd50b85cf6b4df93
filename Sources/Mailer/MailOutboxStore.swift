import Encodings
import Foundation
import InboxDomain
import PostgresClient

/// The mail outbox's tables (sql/014_mail_outbox.sql): deciding what is mailed, claiming the
/// people whose mail may go now, and recording what became of it. Every call is one transaction,
/// and any number of mailers on any number of nodes may call them at once: pending entries and
/// people are taken `FOR UPDATE SKIP LOCKED`, and a claim (a fresh uuid until `claimedUntil`)
/// keeps a person to one mailer, so no mail is sent twice, except by a mailer that dies between
/// handing a mail to the relay and recording it (its claim runs out, another mailer sends again).
public struct MailOutboxStore: Sendable {
    public struct Settings: Sendable {
        /// At most one mail per person per `gather` (INBOX_MAIL_GATHER_SECONDS): what arrives
        /// meanwhile waits for the next one.
        public var gather: Duration
        /// How long a claim holds a person: longer than one mail can take (the SMTP timeout).
        public var claimFor: Duration
        /// The waits after the 1st, 2nd, ... temporary failure; the last repeats.
        public var backoff: [Duration]
        /// After this many temporary failures the mail is dropped and counted.
        public var maximumAttempts: Int

        public init(
            gather: Duration = .seconds(3600), claimFor: Duration = .seconds(300),
            backoff: [Duration] = [.seconds(60), .seconds(300), .seconds(1800), .seconds(7200), .seconds(21_600)], maximumAttempts: Int = 10
        ) {
            self.gather = gather
            self.claimFor = claimFor
            self.backoff = backoff.isEmpty ? [.seconds(60)] : backoff
            self.maximumAttempts = max(1, maximumAttempts)
        }

        /// The wait after the `attempts`-th temporary failure (1-based).
        public func wait(afterAttempt attempts: Int) -> Duration {
            backoff[min(max(attempts, 1), backoff.count) - 1]
        }
    }

    /// What one `decide` did.
    public struct Decided: Sendable, Equatable {
        /// Pending entries taken (and deleted from `mail_pending`).
        public var entries: Int
        /// Of those, queued for mail.
        public var queued: Int
    }

    /// One notification waiting in a person's queue.
    /// The most notifications one mail takes (the oldest first); the rest wait for the next mail,
    /// so a flood for one person never loads without bound (a mail lists 50 of them,
    /// `MailRenderer.listed`, and counts the others).
    public static let itemsPerMail = 1_000

    public struct Item: Sendable, Hashable {
        public var outboxId: Int64
        public var category: String
        public var event: String
        public var ids: String
        public var happenedAt: Date
    }

    /// A person this mailer holds, with everything queued for them when it claimed.
    public struct Claimed: Sendable {
        public var personId: String
        public var claim: UUID
        public var attempts: Int
        /// The Message-ID of an earlier try of this mail, to send again with.
        public var messageID: String?
        public var items: [Item]
    }

    /// What became of a claimed person's mail.
    public enum Resolution: Sendable, Equatable {
        /// The relay accepted it (or the folder holds it); `messageID` is the mail's.
        case sent(messageID: String)
        /// Try again after the backoff, with the same Message-ID.
        case temporary(reason: String, messageID: String)
        /// Refused for good: the items are dropped and counted.
        case permanent(reason: String)
        /// The person has no contact (none set, or deleted): the items are dropped and counted.
        case noContact
    }

    /// What `record` did for one person.
    public enum Recorded: Sendable, Equatable {
        case sent
        /// Will be tried again at this time.
        case retry(at: Date, attempts: Int)
        /// Dropped: refused for good, or the last attempt failed.
        case dropped(attempts: Int)
        case noContact
        /// The claim was no longer this mailer's (it ran out and another took the person over):
        /// nothing was recorded.
        case claimLost
    }

    public let settings: Settings

    public init(settings: Settings = Settings()) {
        self.settings = settings
    }

    /// Takes up to `limit` pending entries and deletes them from `mail_pending`, in one
    /// transaction; queues those whose person's `email` switch for the category is on (as
    /// stored in `notification_preferences`, read now) and makes sure each such person has a
    /// `mail_people` row. Saved searches are mailed per search (not built yet) and are skipped.
    public func decide(limit: Int, now: Date, on connection: PostgresConnection) throws -> Decided {
        try connection.transaction { connection in
            let rows = try connection.query(
                """
                WITH taken AS (
                    DELETE FROM mail_pending WHERE outbox_id = ANY(ARRAY(
                        SELECT outbox_id FROM mail_pending ORDER BY outbox_id LIMIT $1 FOR UPDATE SKIP LOCKED))
                    RETURNING outbox_id)
                SELECT o.id, o.recipient_id, o.category, o.event, o.ids::text AS ids, o.created_at, p.enabled
                FROM taken t
                JOIN notification_outbox o ON o.id = t.outbox_id
                LEFT JOIN notification_preferences p ON p.person_id = o.recipient_id AND p.category = o.category AND p.channel = 'email'
                WHERE o.audience = 'person'
                """, limit)
            var people: [String] = []
            var outboxIds: [Int64] = []
            var categories: [String] = []
            var events: [String] = []
            var ids: [String] = []
            var happened: [Date] = []
            for row in rows {
                guard let category = NotificationCategory(rawValue: try row.decode(String.self, "category")),
                    !PreferenceRules.isManagedPerSearch(category),
                    PreferenceRules.isEnabled(category, .email, stored: try row.decode(Bool?.self, "enabled"))
                else { continue }
                people.append(try row.decode(String.self, "recipient_id"))
                outboxIds.append(try row.decode(Int64.self, "id"))
                categories.append(category.rawValue)
                events.append(try row.decode(String.self, "event"))
                ids.append(try row.decode(String.self, "ids"))
                happened.append(try row.decode(Date.self, "created_at"))
            }
            let taken = rows.count
            if people.isEmpty { return Decided(entries: taken, queued: 0) }
            try connection.query(
                """
                INSERT INTO mail_queue (person_id, outbox_id, category, event, ids, happened_at)
                SELECT p, o, c, e, i::jsonb, h FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])
                    AS u(p, o, c, e, i, h)
                ON CONFLICT (person_id, outbox_id) DO NOTHING
                """, people, outboxIds, categories, events, ids, happened)
            // A new person may be mailed now; one waiting for its gathering keeps its due time.
            try connection.query(
                """
                INSERT INTO mail_people AS m (person_id, due_at, next_allowed_at)
                SELECT DISTINCT p, $2::timestamptz, $2::timestamptz FROM unnest($1::text[]) AS u(p) ORDER BY 1
                ON CONFLICT (person_id) DO UPDATE SET due_at = coalesce(m.due_at, greatest(m.next_allowed_at, $2::timestamptz))
                """, people, now)
            try Self.count(["queued": people.count], on: connection)
            return Decided(entries: taken, queued: people.count)
        }
    }

    /// Claims up to `limit` people whose mail may go at `now` (its gathering interval and any
    /// backoff passed, no live claim of another mailer), each with a new claim until
    /// `now + claimFor`, and reads what is queued for them. Items whose category's `email` was
    /// turned off since they were decided leave the queue here, unsent (`switched_off`).
    public func claim(now: Date, limit: Int, on connection: PostgresConnection) throws -> [Claimed] {
        try connection.transaction { connection in
            let people = try connection.query(
                """
                UPDATE mail_people m SET claim = gen_random_uuid(), claimed_until = $2::timestamptz + $3 * interval '1 millisecond'
                WHERE m.person_id = ANY(ARRAY(
                    SELECT person_id FROM mail_people
                    WHERE due_at <= $2::timestamptz AND (claimed_until IS NULL OR claimed_until <= $2::timestamptz)
                    ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED))
                RETURNING m.person_id, m.claim, m.attempts, m.message_id
                """, limit, now, settings.claimFor.wholeMilliseconds)
            if people.count == 0 { return [] }
            var claimed: [String: Claimed] = [:]
            for row in people {
                let person = try row.decode(String.self, "person_id")
                claimed[person] = Claimed(
                    personId: person, claim: try row.decode(UUID.self, "claim"), attempts: Int(try row.decode(Int32.self, "attempts")),
                    messageID: try row.decode(String?.self, "message_id"), items: [])
            }
            // The switch is read again: an item whose category was turned off while it waited (the
            // previous mail's unsubscribe link) leaves the queue unsent.
            var switchedOff: (people: [String], outboxIds: [Int64]) = ([], [])
            for row in try connection.query(
                """
                SELECT q.person_id, q.outbox_id, q.category, q.event, q.ids::text AS ids, q.happened_at, p.enabled
                FROM (SELECT *, row_number() OVER (PARTITION BY person_id ORDER BY happened_at, outbox_id) AS n
                      FROM mail_queue WHERE person_id = ANY($1::text[])) q
                LEFT JOIN notification_preferences p ON p.person_id = q.person_id AND p.category = q.category AND p.channel = 'email'
                WHERE q.n <= $2 ORDER BY q.person_id, q.happened_at, q.outbox_id
                """, Array(claimed.keys), Int64(Self.itemsPerMail))
            {
                let person = try row.decode(String.self, "person_id")
                if let category = NotificationCategory(rawValue: try row.decode(String.self, "category")),
                    !PreferenceRules.isEnabled(category, .email, stored: try row.decode(Bool?.self, "enabled"))
                {
                    switchedOff.people.append(person)
                    switchedOff.outboxIds.append(try row.decode(Int64.self, "outbox_id"))
                    continue
                }
                claimed[person]?.items.append(
                    Item(
                        outboxId: try row.decode(Int64.self, "outbox_id"), category: try row.decode(String.self, "category"),
                        event: try row.decode(String.self, "event"), ids: try row.decode(String.self, "ids"),
                        happenedAt: try row.decode(Date.self, "happened_at")))
            }
            if !switchedOff.people.isEmpty {
                try connection.query(
                    "DELETE FROM mail_queue q USING unnest($1::text[], $2::bigint[]) AS u(p, o) WHERE q.person_id = u.p AND q.outbox_id = u.o",
                    switchedOff.people, switchedOff.outboxIds)
                try Self.count(["switched_off": switchedOff.people.count], on: connection)
            }
            // A person with nothing left to mail (all switched off) is let go at once.
            let empty = claimed.values.filter { $0.items.isEmpty }.map(\.personId)
            if !empty.isEmpty {
                try connection.query(
                    """
                    UPDATE mail_people SET claim = NULL, claimed_until = NULL,
                        due_at = CASE WHEN EXISTS (SELECT 1 FROM mail_queue q WHERE q.person_id = mail_people.person_id) THEN due_at END
                    WHERE person_id = ANY($1::text[])
                    """, empty)
            }
            return claimed.values.filter { !$0.items.isEmpty }.sorted { $0.personId < $1.personId }
        }
    }

    /// Lets go of people claimed and not mailed (the round ran short of time): they are due as
    /// before, for any mailer, at once.
    public func release(_ claimed: [Claimed], on connection: PostgresConnection) throws {
        if claimed.isEmpty { return }
        try connection.query(
            """
            UPDATE mail_people m SET claim = NULL, claimed_until = NULL
            FROM unnest($1::text[], $2::uuid[]) AS u(p, c) WHERE m.person_id = u.p AND m.claim = u.c
            """, claimed.map(\.personId), claimed.map(\.claim))
    }

    /// Records what became of `claimed`'s mail at `now`, in one transaction, only if the claim is
    /// still this mailer's. The items that were in the mail (and only those: one queued meanwhile
    /// waits for the next) leave the queue when it was sent, refused for good, had nobody to go
    /// to, or failed its last attempt; a temporary failure keeps them until the backoff's end.
    public func record(_ claimed: Claimed, _ resolution: Resolution, now: Date, on connection: PostgresConnection) throws -> Recorded {
        try connection.transaction { connection in
            // Locked first, so that the statements after it see a decision that committed meanwhile.
            guard
                let row = try connection.query(
                    "SELECT attempts FROM mail_people WHERE person_id = $1 AND claim = $2 FOR UPDATE", claimed.personId, claimed.claim
                ).first
            else { return .claimLost }
            let attempts = Int(try row.decode(Int32.self, "attempts")) + 1
            let items = claimed.items.map(\.outboxId)
            let recorded: Recorded
            var counts: [String: Int] = [:]
            var reason: String?
            switch resolution {
            case .sent:
                recorded = .sent
                counts = ["sent": 1, "notifications_sent": items.count]
            case .temporary(let text, let messageID) where attempts < settings.maximumAttempts:
                let at = now.addingTimeInterval(settings.wait(afterAttempt: attempts).inSeconds)
                try connection.query(
                    """
                    UPDATE mail_people SET attempts = $2, due_at = $3, message_id = $4, last_reason = $5, claim = NULL, claimed_until = NULL
                    WHERE person_id = $1
                    """, claimed.personId, Int32(attempts), at, messageID, String(text.prefix(500)))
                try Self.count(["retried": 1], on: connection)
                return .retry(at: at, attempts: attempts)
            case .temporary(let text, _):
                recorded = .dropped(attempts: attempts)
                counts = ["dropped": 1, "dropped.attempts": 1, "notifications_dropped": items.count]
                reason = text
            case .permanent(let text):
                recorded = .dropped(attempts: attempts)
                counts = ["dropped": 1, "dropped.permanent": 1, "notifications_dropped": items.count]
                reason = text
            case .noContact:
                recorded = .noContact
                counts = ["no_contact": 1, "notifications_dropped": items.count]
                reason = "no contact"
            }
            try connection.query("DELETE FROM mail_queue WHERE person_id = $1 AND outbox_id = ANY($2::bigint[])", claimed.personId, items)
            let sent = recorded == .sent
            // What was queued meanwhile goes at the next allowed time: after a sent mail, one gathering later.
            try connection.query(
                """
                UPDATE mail_people SET
                    next_allowed_at = CASE WHEN $2 THEN $3::timestamptz + $4 * interval '1 millisecond' ELSE next_allowed_at END,
                    mails_sent = mails_sent + CASE WHEN $2 THEN 1 ELSE 0 END,
                    last_sent_at = CASE WHEN $2 THEN $3::timestamptz ELSE last_sent_at END,
                    attempts = 0, message_id = NULL, claim = NULL, claimed_until = NULL, last_reason = $5
                WHERE person_id = $1
                """, claimed.personId, sent, now, settings.gather.wholeMilliseconds, reason.map { String($0.prefix(500)) })
            try connection.query(
                """
                UPDATE mail_people SET due_at = CASE WHEN EXISTS (SELECT 1 FROM mail_queue q WHERE q.person_id = $1)
                    THEN greatest(next_allowed_at, $2::timestamptz) END
                WHERE person_id = $1
                """, claimed.personId, now)
            try Self.count(counts, on: connection)
            return recorded
        }
    }

    /// The counters of `mail_counters`, by name.
    public static func counters(on connection: PostgresConnection) throws -> [String: Int64] {
        var counters: [String: Int64] = [:]
        for row in try connection.query("SELECT name, count FROM mail_counters") {
            counters[try row.decode(String.self, "name")] = try row.decode(Int64.self, "count")
        }
        return counters
    }

    /// How much waits: pending entries not decided, people with mail queued, notifications queued.
    public struct Status: Sendable {
        public var undecided: Int64
        public var peopleWaiting: Int64
        public var queued: Int64
        public var counters: [String: Int64]
    }

    public static func status(on connection: PostgresConnection) throws -> Status {
        let row = try connection.query(
            """
            SELECT (SELECT count(*) FROM mail_pending) AS undecided,
                (SELECT count(*) FROM mail_people WHERE due_at IS NOT NULL) AS waiting,
                (SELECT count(*) FROM mail_queue) AS queued
            """)[0]
        return Status(
            undecided: try row.decode(Int64.self, "undecided"), peopleWaiting: try row.decode(Int64.self, "waiting"),
            queued: try row.decode(Int64.self, "queued"), counters: try counters(on: connection))
    }

    /// Adds to `mail_counters`.
    static func count(_ counts: [String: Int], on connection: PostgresConnection) throws {
        try connection.addToCounters("mail_counters", counts)
    }
}
