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
        /// The shop digest's window (INBOX_SHOP_DIGEST_SECONDS): a buyer's message waits this
        /// long for the others written meanwhile, then they go in one mail, less those the shop
        /// has read (or answered) by then.
        public var shopDigest: Duration
        /// News older than this when it is decided is not mailed (INBOX_MAIL_STALE_SECONDS),
        /// counted as `skipped.stale`: a mailer that was down for a month, or behind a projector
        /// that caught up on years of the log from empty tables, does not mail what it missed.
        /// Its age is that of its event in the log, or of its outbox row if younger, as the
        /// fan-out's push deadline (docs/fanout.md).
        public var staleAfter: Duration

        public init(
            gather: Duration = .seconds(3600), claimFor: Duration = .seconds(300),
            backoff: [Duration] = [.seconds(60), .seconds(300), .seconds(1800), .seconds(7200), .seconds(21_600)], maximumAttempts: Int = 10,
            shopDigest: Duration = .seconds(3600), staleAfter: Duration = .seconds(604_800)
        ) {
            self.gather = gather
            self.shopDigest = shopDigest
            self.staleAfter = staleAfter
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

    /// The most notifications one mail takes (the oldest first); the rest wait for the next mail,
    /// so a flood for one person never loads without bound (a mail lists 50 of them,
    /// `MailRenderer.listed`, and counts the others).
    public static let itemsPerMail = 1_000

    /// One notification waiting in a person's queue.
    public struct Item: Sendable, Hashable {
        public var outboxId: Int64
        public var category: String
        public var event: String
        /// The outbox row's ids as a JSON object, with a saved search match's `watchIds` and a
        /// paid order's `amount` added from the event.
        public var ids: String
        public var happenedAt: Date
        /// A buyer's message in a shop digest, read when the mail is claimed: its first
        /// `excerptLength` characters, and its offer.
        public var excerpt: String?
        public var offer: Money?

        public init(
            outboxId: Int64, category: String, event: String, ids: String, happenedAt: Date, excerpt: String? = nil, offer: Money? = nil
        ) {
            self.outboxId = outboxId
            self.category = category
            self.event = event
            self.ids = ids
            self.happenedAt = happenedAt
            self.excerpt = excerpt
            self.offer = offer
        }
    }

    /// How much of a buyer's message a shop digest quotes.
    public static let excerptLength = 300

    /// One of a person's mails (a stream) that this mailer holds, with everything queued for it
    /// when it claimed.
    public struct Claimed: Sendable {
        public var personId: String
        public var stream: MailStream
        public var claim: UUID
        public var attempts: Int
        /// The Message-ID of an earlier try of this mail, to send again with.
        public var messageID: String?
        public var items: [Item]
        /// A saved search's name, for its mail.
        public var searchName: String?
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
    /// transaction, and queues each for the mails it belongs to (`MailStream`), as the
    /// preferences stored now allow:
    /// - a person's notification, when its category's `email` switch is on (`notifications`);
    /// - a saved search's match, when the search still exists, is the person's, and its interval
    ///   is not `never` (`search:<id>`, with the match's watches read from the event);
    /// - a shop's message or offer (`shop:<id>`, the digest) or paid order (`sold`, with the
    ///   amount read from the event), for each person who works at the shop now whose `shop`
    ///   switch for `email` is on.
    /// Each (person, stream) gets a `mail_people` row; one whose queue was empty is due at the
    /// later of its next allowed time and now plus the stream's window. An entry older than
    /// `Settings.staleAfter` is taken and not queued (`skipped.stale`).
    public func decide(limit: Int, now: Date, on connection: PostgresConnection) throws -> Decided {
        try connection.transaction { connection in
            // The events are read for what the outbox's ids leave out: a match's watches, an order's amount.
            let rows = try connection.query(
                """
                WITH taken AS (
                    DELETE FROM mail_pending WHERE outbox_id = ANY(ARRAY(
                        SELECT outbox_id FROM mail_pending ORDER BY outbox_id LIMIT $1 FOR UPDATE SKIP LOCKED))
                    RETURNING outbox_id)
                SELECT o.id, o.audience, o.recipient_id, o.category, o.event, o.created_at, p.enabled, s.interval,
                    least(o.created_at, o.enqueued_at) < $2 AS stale,
                    o.ids->>'savedSearchId' AS search_id, o.ids->>'sellerId' AS seller_id,
                    (CASE WHEN e.position IS NULL THEN o.ids
                          ELSE o.ids || jsonb_strip_nulls(jsonb_build_object('watchIds', e.payload->'watchIds', 'amount', e.payload->'amount'))
                     END)::text AS ids
                FROM taken t
                JOIN notification_outbox o ON o.id = t.outbox_id
                LEFT JOIN notification_preferences p
                    ON o.audience = 'person' AND p.person_id = o.recipient_id AND p.category = o.category AND p.channel = 'email'
                LEFT JOIN saved_searches s
                    ON o.category = 'saved_searches' AND s.saved_search_id = o.ids->>'savedSearchId' AND s.person_id = o.recipient_id AND NOT s.deleted
                LEFT JOIN events e
                    ON (o.category = 'saved_searches' OR (o.audience = 'shop' AND o.event = 'order_paid')) AND e.position = o.source_position
                """, limit, now - settings.staleAfter.inSeconds)
            var queue = QueueRows()
            var stale = 0
            var shopRows: [(shop: String, stream: MailStream, item: Item)] = []
            for row in rows {
                if try row.decode(Bool.self, "stale") {
                    stale += 1
                    continue
                }
                guard let category = NotificationCategory(rawValue: try row.decode(String.self, "category")),
                    let stream = MailStream.of(
                        audience: try row.decode(String.self, "audience"), category: category, event: try row.decode(String.self, "event"),
                        savedSearchId: try row.decode(String?.self, "search_id"), sellerId: try row.decode(String?.self, "seller_id"))
                else { continue }
                let item = Item(
                    outboxId: try row.decode(Int64.self, "id"), category: category.rawValue, event: try row.decode(String.self, "event"),
                    ids: try row.decode(String.self, "ids"), happenedAt: try row.decode(Date.self, "created_at"))
                let recipient = try row.decode(String.self, "recipient_id")
                switch stream {
                case .notifications:
                    guard PreferenceRules.isEnabled(category, .email, stored: try row.decode(Bool?.self, "enabled")) else { continue }
                    queue.add(recipient, stream, item, window: .zero)
                case .search:
                    guard let interval = try row.decode(String?.self, "interval").flatMap(SavedSearchInterval.init(rawValue:)),
                        let window = MailStream.window(of: interval)
                    else { continue }
                    queue.add(recipient, stream, item, window: window)
                case .shopDigest, .sold:
                    shopRows.append((recipient, stream, item))
                }
            }
            if !shopRows.isEmpty {
                // The people who work at the shop now, each per their own `shop` switch.
                var members: [String: [String]] = [:]
                for row in try connection.query(
                    """
                    SELECT m.shop_id, m.person_id, p.enabled FROM shop_members m
                    LEFT JOIN notification_preferences p ON p.person_id = m.person_id AND p.category = 'shop' AND p.channel = 'email'
                    WHERE m.shop_id = ANY($1::text[]) ORDER BY m.shop_id, m.person_id
                    """, Array(Set(shopRows.map(\.shop))))
                where PreferenceRules.isEnabled(.shop, .email, stored: try row.decode(Bool?.self, "enabled")) {
                    members[try row.decode(String.self, "shop_id"), default: []].append(try row.decode(String.self, "person_id"))
                }
                for (shop, stream, item) in shopRows {
                    for person in members[shop] ?? [] {
                        queue.add(person, stream, item, window: stream == .sold ? .zero : settings.shopDigest)
                    }
                }
            }
            if stale > 0 { try Self.count(["skipped.stale": stale], on: connection) }
            if queue.people.isEmpty { return Decided(entries: rows.count, queued: 0) }
            try connection.query(
                """
                INSERT INTO mail_queue (person_id, stream, outbox_id, category, event, ids, happened_at)
                SELECT p, s, o, c, e, i::jsonb, h
                FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::timestamptz[]) AS u(p, s, o, c, e, i, h)
                ON CONFLICT (person_id, stream, outbox_id) DO NOTHING
                """, queue.people, queue.streams, queue.items.map(\.outboxId), queue.items.map(\.category), queue.items.map(\.event),
                queue.items.map(\.ids), queue.items.map(\.happenedAt))
            // A new stream may be mailed once its window passed; one waiting keeps its due time; one
            // whose queue was empty waits for its next allowed time too (a gathering after the last mail).
            try connection.query(
                """
                INSERT INTO mail_people AS m (person_id, stream, due_at, next_allowed_at, window_ms)
                SELECT DISTINCT ON (p, s) p, s, $4::timestamptz + w * interval '1 millisecond', $4::timestamptz, w
                FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(p, s, w) ORDER BY p, s
                ON CONFLICT (person_id, stream) DO UPDATE SET window_ms = excluded.window_ms,
                    due_at = coalesce(m.due_at, greatest(m.next_allowed_at, excluded.due_at))
                """, queue.people, queue.streams, queue.windows, now)
            try Self.count(["queued": queue.people.count], on: connection)
            return Decided(entries: rows.count, queued: queue.people.count)
        }
    }

    /// What one `decide` queues, as the columns of its inserts.
    private struct QueueRows {
        var people: [String] = []
        var streams: [String] = []
        var items: [Item] = []
        var windows: [Int64] = []

        mutating func add(_ person: String, _ stream: MailStream, _ item: Item, window: Duration) {
            people.append(person)
            streams.append(stream.key)
            items.append(item)
            windows.append(window.wholeMilliseconds)
        }
    }

    /// Claims up to `limit` mails (a person's stream) that may go at `now` (window, gathering
    /// and any backoff passed, no live claim of another mailer), each with a new claim until
    /// `now + claimFor`, and reads what is queued for them. What is no longer wanted leaves the
    /// queue here, unsent: items whose category's `email` was turned off since they were decided,
    /// matches of a search deleted or set to `never`, a shop's news for somebody who no longer
    /// works there (`switched_off`), and buyers' messages the shop has read or answered by now
    /// (`already_read`: the digest is for what is still waiting).
    public func claim(now: Date, limit: Int, on connection: PostgresConnection) throws -> [Claimed] {
        try connection.transaction { connection in
            let people = try connection.query(
                """
                UPDATE mail_people m SET claim = gen_random_uuid(), claimed_until = $2::timestamptz + $3 * interval '1 millisecond'
                FROM (SELECT person_id, stream FROM mail_people
                      WHERE due_at <= $2::timestamptz AND (claimed_until IS NULL OR claimed_until <= $2::timestamptz)
                      ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED) AS due
                WHERE m.person_id = due.person_id AND m.stream = due.stream
                RETURNING m.person_id, m.stream, m.claim, m.attempts, m.message_id
                """, limit, now, settings.claimFor.wholeMilliseconds)
            if people.count == 0 { return [] }
            var claimed: [Key: Claimed] = [:]
            for row in people {
                let key = Key(person: try row.decode(String.self, "person_id"), stream: try row.decode(String.self, "stream"))
                guard let stream = MailStream(key: key.stream) else { continue }
                claimed[key] = Claimed(
                    personId: key.person, stream: stream, claim: try row.decode(UUID.self, "claim"), attempts: Int(try row.decode(Int32.self, "attempts")),
                    messageID: try row.decode(String?.self, "message_id"), items: [])
            }
            // Each item is checked again against what the person wants now (the previous mail's
            // unsubscribe link may have turned it off) and, in a digest, whether it still waits.
            var dropped: [String: (people: [String], streams: [String], outboxIds: [Int64])] = [:]
            let keys = Array(claimed.keys)
            for row in try connection.query(
                """
                SELECT q.person_id, q.stream, q.outbox_id, q.category, q.event, q.ids::text AS ids, q.happened_at, p.enabled,
                    CASE q.category
                        WHEN 'saved_searches' THEN s.saved_search_id IS NOT NULL AND s.interval <> 'never'
                        WHEN 'shop' THEN EXISTS (SELECT 1 FROM shop_members sm WHERE sm.shop_id = q.ids->>'sellerId' AND sm.person_id = q.person_id)
                        ELSE true END AS wanted,
                    s.name AS search_name, left(msg.body, $3::integer) AS excerpt, msg.offer_amount, msg.offer_currency,
                    coalesce(ts.read_through_seq >= msg.seq, false) AS read
                FROM (SELECT *, row_number() OVER (PARTITION BY person_id, stream ORDER BY happened_at, outbox_id) AS n
                      FROM mail_queue WHERE (person_id, stream) IN (SELECT * FROM unnest($1::text[], $2::text[]))) q
                LEFT JOIN notification_preferences p ON p.person_id = q.person_id AND p.category = q.category AND p.channel = 'email'
                LEFT JOIN saved_searches s
                    ON q.category = 'saved_searches' AND s.saved_search_id = q.ids->>'savedSearchId' AND s.person_id = q.person_id AND NOT s.deleted
                LEFT JOIN messages msg ON q.stream LIKE 'shop:%' AND msg.message_id = q.ids->>'messageId'
                LEFT JOIN thread_sides ts ON ts.conversation_id = msg.conversation_id AND ts.side = 'seller'
                WHERE q.n <= $4 ORDER BY q.person_id, q.stream, q.happened_at, q.outbox_id
                """, keys.map(\.person), keys.map(\.stream), Int64(Self.excerptLength), Int64(Self.itemsPerMail))
            {
                let key = Key(person: try row.decode(String.self, "person_id"), stream: try row.decode(String.self, "stream"))
                let outboxId = try row.decode(Int64.self, "outbox_id")
                let category = NotificationCategory(rawValue: try row.decode(String.self, "category"))
                let reason: String? =
                    if let category, !PreferenceRules.isManagedPerSearch(category),
                        !PreferenceRules.isEnabled(category, .email, stored: try row.decode(Bool?.self, "enabled"))
                    {
                        "switched_off"
                    } else if !(try row.decode(Bool.self, "wanted")) {
                        "switched_off"
                    } else if try row.decode(Bool.self, "read") {
                        "already_read"
                    } else {
                        nil
                    }
                if let reason {
                    dropped[reason, default: ([], [], [])].people.append(key.person)
                    dropped[reason]!.streams.append(key.stream)
                    dropped[reason]!.outboxIds.append(outboxId)
                    continue
                }
                if claimed[key]?.searchName == nil { claimed[key]?.searchName = try row.decode(String?.self, "search_name") }
                var offer: Money?
                if let amount = try row.decode(Int64?.self, "offer_amount"), let currency = try row.decode(String?.self, "offer_currency") {
                    offer = Money(amount: amount, currency: currency)
                }
                claimed[key]?.items.append(
                    Item(
                        outboxId: outboxId, category: try row.decode(String.self, "category"), event: try row.decode(String.self, "event"),
                        ids: try row.decode(String.self, "ids"), happenedAt: try row.decode(Date.self, "happened_at"),
                        excerpt: try row.decode(String?.self, "excerpt"), offer: offer))
            }
            for (reason, rows) in dropped.sorted(by: { $0.key < $1.key }) {
                try connection.query(
                    """
                    DELETE FROM mail_queue q USING unnest($1::text[], $2::text[], $3::bigint[]) AS u(p, s, o)
                    WHERE q.person_id = u.p AND q.stream = u.s AND q.outbox_id = u.o
                    """, rows.people, rows.streams, rows.outboxIds)
                try Self.count([reason: rows.people.count], on: connection)
            }
            // A mail with nothing left to send (all switched off or read) is let go at once. One of
            // a stream this version does not know (a newer mailer's, during an upgrade) keeps its
            // claim until it runs out, and is then due for any mailer again.
            let empty = claimed.values.filter { $0.items.isEmpty }
            if !empty.isEmpty {
                try connection.query(
                    """
                    UPDATE mail_people m SET claim = NULL, claimed_until = NULL,
                        due_at = CASE WHEN EXISTS (SELECT 1 FROM mail_queue q WHERE q.person_id = m.person_id AND q.stream = m.stream) THEN due_at END
                    FROM unnest($1::text[], $2::text[]) AS u(p, s) WHERE m.person_id = u.p AND m.stream = u.s
                    """, empty.map(\.personId), empty.map(\.stream.key))
            }
            return claimed.values.filter { !$0.items.isEmpty }.sorted { ($0.personId, $0.stream.key) < ($1.personId, $1.stream.key) }
        }
    }

    /// A claimed mail's row in `mail_people`.
    private struct Key: Hashable {
        var person: String
        var stream: String
    }

    /// Lets go of people claimed and not mailed (the round ran short of time): they are due as
    /// before, for any mailer, at once.
    public func release(_ claimed: [Claimed], on connection: PostgresConnection) throws {
        if claimed.isEmpty { return }
        try connection.query(
            """
            UPDATE mail_people m SET claim = NULL, claimed_until = NULL
            FROM unnest($1::text[], $2::text[], $3::uuid[]) AS u(p, s, c) WHERE m.person_id = u.p AND m.stream = u.s AND m.claim = u.c
            """, claimed.map(\.personId), claimed.map(\.stream.key), claimed.map(\.claim))
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
                    "SELECT attempts FROM mail_people WHERE person_id = $1 AND stream = $2 AND claim = $3 FOR UPDATE", claimed.personId,
                    claimed.stream.key, claimed.claim
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
                    UPDATE mail_people SET attempts = $3, due_at = $4, message_id = $5, last_reason = $6, claim = NULL, claimed_until = NULL
                    WHERE person_id = $1 AND stream = $2
                    """, claimed.personId, claimed.stream.key, Int32(attempts), at, messageID, String(text.prefix(500)))
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
            try connection.query(
                "DELETE FROM mail_queue WHERE person_id = $1 AND stream = $2 AND outbox_id = ANY($3::bigint[])", claimed.personId, claimed.stream.key, items)
            let sent = recorded == .sent
            // What was queued meanwhile goes at the next allowed time (after a sent mail of the
            // gathered notifications, one gathering later) or when its window ends, whichever is later.
            let gather = claimed.stream == .notifications ? settings.gather : .zero
            try connection.query(
                """
                UPDATE mail_people SET
                    next_allowed_at = CASE WHEN $3 THEN $4::timestamptz + $5 * interval '1 millisecond' ELSE next_allowed_at END,
                    mails_sent = mails_sent + CASE WHEN $3 THEN 1 ELSE 0 END,
                    last_sent_at = CASE WHEN $3 THEN $4::timestamptz ELSE last_sent_at END,
                    attempts = 0, message_id = NULL, claim = NULL, claimed_until = NULL, last_reason = $6
                WHERE person_id = $1 AND stream = $2
                """, claimed.personId, claimed.stream.key, sent, now, gather.wholeMilliseconds, reason.map { String($0.prefix(500)) })
            try connection.query(
                """
                UPDATE mail_people m SET due_at = CASE WHEN EXISTS (SELECT 1 FROM mail_queue q WHERE q.person_id = $1 AND q.stream = $2)
                    THEN greatest(next_allowed_at, $3::timestamptz + window_ms * interval '1 millisecond') END
                WHERE person_id = $1 AND stream = $2
                """, claimed.personId, claimed.stream.key, now)
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
                (SELECT count(DISTINCT person_id) FROM mail_people WHERE due_at IS NOT NULL) AS waiting,
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
