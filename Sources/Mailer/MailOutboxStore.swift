import Crypto
import Encodings
import Foundation
import InboxDomain
import NotificationOutbox
import PostgresClient
import Projections

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
            gather: Duration = .seconds(3600), claimFor: Duration = .seconds(150),
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

    /// One notification waiting in a person's queue: an outbox entry as its mail needs it.
    public struct Item: Sendable, Hashable {
        public var outboxId: Int64
        public var kind: NotificationKind
        /// The outbox entry's ids as a JSON object, with a saved search match's `watchIds` and a
        /// paid order's `amount` added from the event.
        public var ids: String
        public var happenedAt: Date
        /// A buyer's message in a shop digest, read when the mail is claimed: its first
        /// `excerptLength` characters, and its offer.
        public var excerpt: String?
        public var offer: Money?

        public init(outboxId: Int64, kind: NotificationKind, ids: String, happenedAt: Date, excerpt: String? = nil, offer: Money? = nil) {
            self.outboxId = outboxId
            self.kind = kind
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
        public var items: [Item]
        /// A saved search's name, for its mail.
        public var searchName: String?

        public init(personId: String, stream: MailStream, claim: UUID, attempts: Int, items: [Item], searchName: String? = nil) {
            self.personId = personId
            self.stream = stream
            self.claim = claim
            self.attempts = attempts
            self.items = items
            self.searchName = searchName
        }

        /// The mail's Message-ID, derived from its person, stream and notifications: every attempt
        /// of the same mail, by any mailer (one taking over from a mailer that died after the relay
        /// took the mail), has the same, so a relay and a mail client see one message.
        public func messageID(domain: some StringProtocol) -> String {
            let name = "wristler-mail:\(personId):\(stream.key):" + items.map { String($0.outboxId) }.sorted().joined(separator: ",")
            return "<" + SHA256.hexDigest(name).prefix(32) + "@" + domain + ">"
        }
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
    /// Where this store's next take of the queue starts, shared by the loops that use it.
    let takeFloor = NotificationOutbox.TakeFloor()

    public init(settings: Settings = Settings()) {
        self.settings = settings
    }

    /// Takes up to `limit` pending entries off the mail queue (`NotificationOutbox.take`), in one
    /// transaction, and queues each for the mail it was decided to join, with the notification, as
    /// of its place in the log (`NotificationDelivery`): a person's gathered notifications, a saved
    /// search's mail (its matches' watches read from the event), a shop's digest or its sold mail
    /// (the amount read from the event). What was decided not to be mailed is counted by its reason
    /// (`skipped.<reason>`), and so is an entry older than `Settings.staleAfter` (`skipped.stale`).
    /// A saved search's mail waits its search's interval as the bell's facts hold it now (a search
    /// set to `never` since, or deleted, withdraws it: `switched_off`). Each (person, stream) gets
    /// a `mail_people` row; one whose queue was empty is due at the later of its next allowed time
    /// and now plus the stream's window.
    public func decide(limit: Int, now: Date, on connection: PostgresConnection) throws -> Decided {
        try connection.transaction { connection in
            let taken = try NotificationOutbox.take(.mail, limit: limit, floor: takeFloor, on: connection)
            var counts: [String: Int] = [:]
            if taken.unreadable > 0 { counts["skipped.unknown_kind"] = taken.unreadable }
            var mailed: [(entry: OutboxEntry, stream: MailStream)] = []
            for entry in taken.entries {
                guard let stream = entry.delivery.mail else { continue }
                if let reason = entry.delivery.mailSkipped {
                    counts["skipped." + reason.rawValue, default: 0] += 1
                } else if min(entry.happenedAt, entry.enqueuedAt) < now - settings.staleAfter.inSeconds {
                    counts["skipped.stale", default: 0] += 1
                } else {
                    mailed.append((entry, stream))
                }
            }
            var searches: [String] = []
            for (_, stream) in mailed { if case .search(let id) = stream { searches.append(id) } }
            let audience = try AudienceReader.read(people: [String](), shops: [String](), searches: searches, on: connection)
            // What the outbox's ids leave out, from the events: a match's watches, an order's amount.
            var details: [Int64: String] = [:]
            let positions = mailed.filter { $0.entry.kind == .savedSearchMatched || $0.entry.kind == .shopOrderPaid }.map(\.entry.sourcePosition)
            if !positions.isEmpty {
                for row in try connection.query(
                    """
                    SELECT position, jsonb_strip_nulls(jsonb_build_object('watchIds', payload->'watchIds', 'amount', payload->'amount'))::text
                    FROM events WHERE position = ANY($1::bigint[])
                    """, positions)
                {
                    details[try row.decode(Int64.self, at: 0)] = try row.decode(String.self, at: 1)
                }
            }
            var queue = QueueRows()
            for (entry, stream) in mailed {
                let window: Duration
                switch stream {
                case .notifications, .sold:
                    window = .zero
                case .shopDigest:
                    window = settings.shopDigest
                case .search(let id):
                    guard audience.searchExists(id, of: entry.recipientId), let interval = audience.searches[id]?.settings.interval,
                        let searchWindow = MailStream.window(of: interval)
                    else {
                        counts["switched_off", default: 0] += 1
                        continue
                    }
                    window = searchWindow
                }
                let item = Item(
                    outboxId: entry.id, kind: entry.kind, ids: OutboxNotification.json(entry.ids), happenedAt: entry.happenedAt)
                queue.add(entry.recipientId, stream, item, details: details[entry.sourcePosition], window: window)
            }
            try Self.count(counts, on: connection)
            if queue.people.isEmpty { return Decided(entries: taken.count, queued: 0) }
            try connection.query(
                """
                INSERT INTO mail_queue (person_id, stream, outbox_id, category, event, ids, happened_at)
                SELECT p, s, o, c, e, i::jsonb || coalesce(d::jsonb, '{}'::jsonb), h
                FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[])
                    AS u(p, s, o, c, e, i, d, h)
                ON CONFLICT (person_id, stream, outbox_id) DO NOTHING
                """, queue.people, queue.streams, queue.items.map(\.outboxId), queue.items.map(\.kind.category.rawValue),
                queue.items.map(\.kind.word), queue.items.map(\.ids), queue.details, queue.items.map(\.happenedAt))
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
            return Decided(entries: taken.count, queued: queue.people.count)
        }
    }

    /// What one `decide` queues, as the columns of its inserts.
    private struct QueueRows {
        var people: [String] = []
        var streams: [String] = []
        var items: [Item] = []
        var details: [String?] = []
        var windows: [Int64] = []

        mutating func add(_ person: String, _ stream: MailStream, _ item: Item, details: String?, window: Duration) {
            people.append(person)
            streams.append(stream.key)
            items.append(item)
            self.details.append(details)
            windows.append(window.wholeMilliseconds)
        }
    }

    /// Claims up to `limit` mails (a person's stream) that may go at `now` (window, gathering
    /// and any backoff passed, no live claim of another mailer), each with a new claim until
    /// `now + claimFor`, and reads what is queued for them. What a later change no longer wants
    /// leaves the queue here, unsent: each item is decided again (`NotificationDelivery`) on the
    /// bell's facts as they stand now (`AudienceReader`: never older than the item's place in the
    /// log), and one no longer mailed goes, counted: its category's `email` turned off since (an
    /// unsubscribe link), a search deleted or set to `never`, a shop somebody no longer works at
    /// (`switched_off`), an account Wristler blocked since (`blocked`); and so do buyers' messages
    /// the shop has read or answered by now (`already_read`: the digest is for what is still waiting).
    public func claim(now: Date, limit: Int, on connection: PostgresConnection) throws -> [Claimed] {
        try connection.transaction { connection in
            let people = try connection.query(
                """
                UPDATE mail_people m SET claim = gen_random_uuid(), claimed_until = $2::timestamptz + $3 * interval '1 millisecond'
                FROM (SELECT person_id, stream FROM mail_people
                      WHERE due_at <= $2::timestamptz AND (claimed_until IS NULL OR claimed_until <= $2::timestamptz)
                      ORDER BY due_at LIMIT $1 FOR UPDATE SKIP LOCKED) AS due
                WHERE m.person_id = due.person_id AND m.stream = due.stream
                RETURNING m.person_id, m.stream, m.claim, m.attempts
                """, limit, now, settings.claimFor.wholeMilliseconds)
            if people.count == 0 { return [] }
            var claimed: [Key: Claimed] = [:]
            for row in people {
                let key = Key(person: try row.decode(String.self, "person_id"), stream: try row.decode(String.self, "stream"))
                guard let stream = MailStream(key: key.stream) else { continue }
                claimed[key] = Claimed(
                    personId: key.person, stream: stream, claim: try row.decode(UUID.self, "claim"), attempts: Int(try row.decode(Int32.self, "attempts")),
                    items: [])
            }
            let keys = Array(claimed.keys)
            let queued = try connection.query(
                """
                SELECT q.person_id, q.stream, q.outbox_id, q.category, q.event, q.ids::text AS ids, q.happened_at,
                    q.ids->>'savedSearchId' AS search_id, q.ids->>'sellerId' AS seller_id,
                    s.name AS search_name, left(msg.body, $3::integer) AS excerpt, msg.offer_amount, msg.offer_currency,
                    coalesce(ts.read_through_seq >= msg.seq, false) AS read
                FROM (SELECT *, row_number() OVER (PARTITION BY person_id, stream ORDER BY happened_at, outbox_id) AS n
                      FROM mail_queue WHERE (person_id, stream) IN (SELECT * FROM unnest($1::text[], $2::text[]))) q
                LEFT JOIN saved_searches s ON q.stream LIKE 'search:%' AND s.saved_search_id = q.ids->>'savedSearchId'
                LEFT JOIN messages msg ON q.stream LIKE 'shop:%' AND msg.message_id = q.ids->>'messageId'
                LEFT JOIN thread_sides ts ON ts.conversation_id = msg.conversation_id AND ts.side = 'seller'
                WHERE q.n <= $4 ORDER BY q.person_id, q.stream, q.happened_at, q.outbox_id
                """, keys.map(\.person), keys.map(\.stream), Int64(Self.excerptLength), Int64(Self.itemsPerMail))
            // Each item is decided again against what its person wants now (the previous mail's
            // unsubscribe link may have turned it off) and, in a digest, whether it still waits.
            var shops: [String] = []
            var searches: [String] = []
            for row in queued {
                if let shop = try row.decode(String?.self, "seller_id") { shops.append(shop) }
                if let search = try row.decode(String?.self, "search_id") { searches.append(search) }
            }
            let audience = try AudienceReader.read(people: keys.map(\.person), shops: shops, searches: searches, on: connection)
            var dropped: [String: (people: [String], streams: [String], outboxIds: [Int64])] = [:]
            for row in queued {
                let key = Key(person: try row.decode(String.self, "person_id"), stream: try row.decode(String.self, "stream"))
                let outboxId = try row.decode(Int64.self, "outbox_id")
                let category = try row.decode(String.self, "category")
                let audienceOfKind: NotificationKind.Audience = category == NotificationCategory.shop.rawValue ? .shop : .person
                var ids: [String: String] = [:]
                if let search = try row.decode(String?.self, "search_id") { ids["savedSearchId"] = search }
                if let shop = try row.decode(String?.self, "seller_id") { ids["sellerId"] = shop }
                let reason: String?
                if let kind = NotificationKind(word: try row.decode(String.self, "event"), audience: audienceOfKind) {
                    let wanted = audience.delivery(kind, ids: ids, for: key.person)
                    reason =
                        if let skipped = wanted.mailSkipped {
                            skipped == .blocked ? "blocked" : "switched_off"
                        } else if kind.audience == .shop, let shop = ids["sellerId"], !audience.members(of: shop).contains(key.person) {
                            "switched_off"
                        } else if try row.decode(Bool.self, "read") {
                            "already_read"
                        } else {
                            nil
                        }
                    if reason == nil {
                        var offer: Money?
                        if let amount = try row.decode(Int64?.self, "offer_amount"), let currency = try row.decode(String?.self, "offer_currency") {
                            offer = Money(amount: amount, currency: currency)
                        }
                        if claimed[key]?.searchName == nil { claimed[key]?.searchName = try row.decode(String?.self, "search_name") }
                        claimed[key]?.items.append(
                            Item(
                                outboxId: outboxId, kind: kind, ids: try row.decode(String.self, "ids"), happenedAt: try row.decode(Date.self, "happened_at"),
                                excerpt: try row.decode(String?.self, "excerpt"), offer: offer))
                        continue
                    }
                } else {
                    reason = "unknown_kind"
                }
                if let reason {
                    dropped[reason, default: ([], [], [])].people.append(key.person)
                    dropped[reason]!.streams.append(key.stream)
                    dropped[reason]!.outboxIds.append(outboxId)
                }
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
        if case .temporary = resolution { return try recordAttempt(claimed, resolution, now: now, on: connection) }
        return try recordFinal(claimed, resolution, now: now, on: connection)
    }

    /// `record` of a mail that ends its items (sent, refused for good, nobody to send it to): the
    /// same transaction as `recordAttempt`'s in one round trip. Nothing of it waits on an answer
    /// before it, so every statement goes at once (BEGIN, the claim's row locked, the items
    /// deleted, the row and the counters updated, COMMIT), each after the lock guarded by the
    /// claim: when the claim is lost they change nothing.
    func recordFinal(_ claimed: Claimed, _ resolution: Resolution, now: Date, on connection: PostgresConnection) throws -> Recorded {
        let items = claimed.items.count
        let sent: Bool
        let counts: [String: Int]
        let reason: String?
        switch resolution {
        case .sent:
            (sent, counts, reason) = (true, ["sent": 1, "notifications_sent": items], nil)
        case .permanent(let text):
            (sent, counts, reason) = (false, ["dropped": 1, "dropped.permanent": 1, "notifications_dropped": items], text)
        case .noContact:
            (sent, counts, reason) = (false, ["no_contact": 1, "notifications_dropped": items], "no contact")
        case .temporary:
            preconditionFailure("a temporary failure is recorded by recordAttempt")
        }
        let statements =
            [
                PostgresStatement("BEGIN"),
                // Locked first, so that the statements after it see a decision that committed meanwhile.
                PostgresStatement(
                    "SELECT attempts FROM mail_people WHERE person_id = $1 AND stream = $2 AND claim = $3 FOR UPDATE", claimed.personId,
                    claimed.stream.key, claimed.claim),
            ] + ending(claimed, sent: sent, reason: reason, counts: counts, now: now) + [PostgresStatement("COMMIT")]
        let results: [PostgresRows]
        do {
            results = try connection.pipeline(statements)
        } catch {
            // A statement that failed left the transaction open and aborted, its COMMIT skipped.
            if connection.isOpen && connection.isInTransaction { _ = try? connection.execute("ROLLBACK") }
            throw error
        }
        guard let row = results[1].first, try results[3].scalar(Int64.self) == 1 else { return .claimLost }
        switch resolution {
        case .sent: return .sent
        case .noContact: return .noContact
        default: return .dropped(attempts: Int(try row.decode(Int32.self, "attempts")) + 1)
        }
    }

    /// The statements that end a claimed mail's items, each guarded by the claim (with it lost,
    /// they change nothing); the last answers one row, how many claims it ended (0 or 1). The
    /// items that were in the mail leave the queue; what was queued meanwhile goes at the next
    /// allowed time (after a sent mail of the gathered notifications, one gathering later) or when
    /// its window ends, whichever is later.
    private func ending(_ claimed: Claimed, sent: Bool, reason: String?, counts: [String: Int], now: Date) -> [PostgresStatement] {
        let names = counts.keys.sorted()
        let gather = claimed.stream == .notifications ? settings.gather : .zero
        return [
            PostgresStatement(
                """
                DELETE FROM mail_queue WHERE person_id = $1 AND stream = $2 AND outbox_id = ANY($3::bigint[])
                    AND EXISTS (SELECT 1 FROM mail_people m WHERE m.person_id = $1 AND m.stream = $2 AND m.claim = $4)
                """, claimed.personId, claimed.stream.key, claimed.items.map(\.outboxId), claimed.claim),
            PostgresStatement(
                """
                WITH recorded AS (
                    UPDATE mail_people m SET
                        next_allowed_at = CASE WHEN $3 THEN $4::timestamptz + $5 * interval '1 millisecond' ELSE next_allowed_at END,
                        mails_sent = mails_sent + CASE WHEN $3 THEN 1 ELSE 0 END,
                        last_sent_at = CASE WHEN $3 THEN $4::timestamptz ELSE last_sent_at END,
                        attempts = 0, message_id = NULL, claim = NULL, claimed_until = NULL, last_reason = $6,
                        due_at = CASE WHEN EXISTS (SELECT 1 FROM mail_queue q WHERE q.person_id = $1 AND q.stream = $2)
                            THEN greatest(CASE WHEN $3 THEN $4::timestamptz + $5 * interval '1 millisecond' ELSE next_allowed_at END,
                                $4::timestamptz + window_ms * interval '1 millisecond') END
                    WHERE person_id = $1 AND stream = $2 AND claim = $7
                    RETURNING 1
                ), counted AS (
                    INSERT INTO mail_counters (name, shard, count)
                    SELECT n, \(Self.shard), c FROM unnest($8::text[], $9::bigint[]) AS u(n, c) WHERE EXISTS (SELECT 1 FROM recorded)
                    ON CONFLICT (name, shard) DO UPDATE SET count = mail_counters.count + EXCLUDED.count
                )
                SELECT count(*) FROM recorded
                """, claimed.personId, claimed.stream.key, sent, now, gather.wholeMilliseconds, reason.map { String($0.prefix(500)) },
                claimed.claim, names, names.map { Int64(counts[$0]!) }),
        ]
    }

    /// `record` of a temporary failure: tried again after the backoff, or dropped after its last
    /// attempt, which the claim's row counts.
    func recordAttempt(_ claimed: Claimed, _ resolution: Resolution, now: Date, on connection: PostgresConnection) throws -> Recorded {
        try connection.transaction { connection in
            // Locked first, so that the statements after it see a decision that committed meanwhile.
            guard
                let row = try connection.query(
                    "SELECT attempts FROM mail_people WHERE person_id = $1 AND stream = $2 AND claim = $3 FOR UPDATE", claimed.personId,
                    claimed.stream.key, claimed.claim
                ).first
            else { return .claimLost }
            let attempts = Int(try row.decode(Int32.self, "attempts")) + 1
            guard case .temporary(let text, let messageID) = resolution else {
                preconditionFailure("only a temporary failure is recorded by recordAttempt")
            }
            if attempts < settings.maximumAttempts {
                let at = now.addingTimeInterval(settings.wait(afterAttempt: attempts).inSeconds)
                try connection.query(
                    """
                    UPDATE mail_people SET attempts = $3, due_at = $4, message_id = $5, last_reason = $6, claim = NULL, claimed_until = NULL
                    WHERE person_id = $1 AND stream = $2
                    """, claimed.personId, claimed.stream.key, Int32(attempts), at, messageID, String(text.prefix(500)))
                try Self.count(["retried": 1], on: connection)
                return .retry(at: at, attempts: attempts)
            }
            // The last attempt: the items are dropped. The row is locked, so the rest goes with the COMMIT.
            let counts = ["dropped": 1, "dropped.attempts": 1, "notifications_dropped": claimed.items.count]
            for statement in ending(claimed, sent: false, reason: text, counts: counts, now: now) { connection.executeWithNext(statement) }
            return .dropped(attempts: attempts)
        }
    }

    /// The counters of `mail_counters`, by name.
    public static func counters(on connection: PostgresConnection) throws -> [String: Int64] {
        var counters: [String: Int64] = [:]
        for row in try connection.query("SELECT name, sum(count)::bigint AS count FROM mail_counters GROUP BY name") {
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
            SELECT (SELECT count(DISTINCT person_id) FROM mail_people WHERE due_at IS NOT NULL) AS waiting,
                (SELECT count(*) FROM mail_queue) AS queued
            """)[0]
        return Status(
            undecided: Int64(try NotificationOutbox.waiting(.mail, on: connection).count), peopleWaiting: try row.decode(Int64.self, "waiting"),
            queued: try row.decode(Int64.self, "queued"), counters: try counters(on: connection))
    }

    /// Adds to `mail_counters`.
    static func count(_ counts: [String: Int], on connection: PostgresConnection) throws {
        guard let statement = counting(counts) else { return }
        try connection.query(statement.sql, binds: statement.binds)
    }

    /// `count`'s statement, to send with others; nil for no counts. It adds to this session's
    /// shard of each counter (sql/035), so that mailing loops recording at once do not wait on one
    /// another's rows.
    static func counting(_ counts: [String: Int]) -> PostgresStatement? {
        let names = counts.keys.sorted()
        if names.isEmpty { return nil }
        return PostgresStatement(
            """
            INSERT INTO mail_counters (name, shard, count) SELECT n, \(shard), c FROM unnest($1::text[], $2::bigint[]) AS u(n, c)
            ON CONFLICT (name, shard) DO UPDATE SET count = mail_counters.count + EXCLUDED.count
            """, names, names.map { Int64(counts[$0]!) })
    }

    /// The shard of `mail_counters` a session adds to.
    static let shard = "(pg_backend_pid() % 16)::smallint"
}
