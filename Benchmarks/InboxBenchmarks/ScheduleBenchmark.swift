import Foundation
import PostgresClient
import Projections
import Schedule

/// One `shop_unanswered` check (docs/schedule.md) over a long history: 100,000 threads of 2,000
/// shops whose last messages lie over 400 days, of which a fixed 3,500 are in the 14-day window
/// (the others are history the check must not read), half of all ending on the buyer's message,
/// one watch in 8 sold and one buyer in 50 blocked (each a quarter and a 25th of those waiting). The read models are written directly
/// (the projections are benchmarked by `projection`); before each round the reminders' state and
/// the outbox rows they wrote are cleared, untimed, so every round checks the same waiting threads.
///
/// With `--scale 10` the history is a million threads and the window still holds 3,500: a check
/// that costs in proportion to the waiting threads takes about as long.
struct ScheduleBenchmark: Benchmark {
    var rounds: Int
    var scale: Double

    static let threads = 100_000
    static let shops = 2_000
    /// Threads whose last message is within the 14-day window, whatever the scale.
    static let recent = 3_500

    func run(on database: BenchmarkDatabase) async throws -> BenchmarkResult {
        let threads = max(Self.recent * 2, Int(Double(Self.threads) * scale))
        let client = database.client
        try await InboxProjections.prepareLiveTables(client: client)
        progress("writing \(threads) threads of \(Self.shops) shops over 400 days, \(Self.recent) of them in the last 14 days")
        try await client.withConnection { connection in
            _ = try connection.execute(
                """
                INSERT INTO conversations (conversation_id, kind, buyer_id, shop_id, watch_id, started_at, last_message_id,
                    last_message_seq, last_message_at, last_message_side, message_count)
                SELECT 'c' || i, 'watch', 'b' || i, 's' || (i % \(Self.shops)), 'w' || i, now() - interval '401 days', 'm' || i, 2,
                    CASE WHEN i <= \(Self.recent) THEN now() - (i % 14) * interval '1 day' - interval '1 hour'
                         ELSE now() - interval '15 days' - (i % 385) * interval '1 day' END,
                    CASE WHEN i % 2 = 0 THEN 'buyer' ELSE 'seller' END, 2
                FROM generate_series(1, \(threads)) AS i;
                INSERT INTO thread_sides (conversation_id, side, owner_id, last_activity_at)
                SELECT 'c' || i, side, CASE side WHEN 'buyer' THEN 'b' || i ELSE 's' || (i % \(Self.shops)) END, now()
                FROM generate_series(1, \(threads)) AS i, unnest(ARRAY['buyer', 'seller']) AS side;
                INSERT INTO thread_watches (watch_id, shop_id, status)
                SELECT 'w' || i, 's' || (i % \(Self.shops)), CASE WHEN i % 8 = 0 THEN 'sold' ELSE 'for_sale' END FROM generate_series(1, \(threads)) AS i;
                INSERT INTO blocked_accounts (person_id, blocked_at) SELECT 'b' || i, now() FROM generate_series(2, \(threads), 50) AS i;
                INSERT INTO shop_members (shop_id, person_id) SELECT 's' || i, 's' || i || '-staff' FROM generate_series(0, \(Self.shops - 1)) AS i;
                """)
            // Each on its own: VACUUM cannot run in the implicit transaction of several statements.
            for table in ["conversations", "thread_sides", "thread_watches", "blocked_accounts", "shop_members"] {
                _ = try connection.execute("VACUUM ANALYZE \(table)")
            }
            _ = try connection.execute("CHECKPOINT")
        }
        let reminders = ShopReminders()
        let now = Date()
        // What the check reads, as EXPLAIN shows it: the waiting threads through their index, the
        // rest by key, nothing read whole.
        let plan = try await client.withConnection { connection in
            let query = ShopReminders.waitingQuery
                .replacingOccurrences(of: "$1", with: "'\(now.addingTimeInterval(-reminders.settings.window.seconds).postgresText!)'::timestamptz")
                .replacingOccurrences(of: "$2", with: "'\(now.addingTimeInterval(-reminders.settings.gap.seconds).postgresText!)'::timestamptz")
            return try connection.query("EXPLAIN " + query).map { try $0.decode(String.self, at: 0) }
        }
        let scans = plan.compactMap { line -> String? in
            let text = line.trimmingCharacters(in: .whitespaces).replacingOccurrences(of: "->  ", with: "")
            guard let range = text.range(of: #"^(Bitmap Index Scan|Index Only Scan|Index Scan|Seq Scan|Bitmap Heap Scan)( using \S+)? on \S+"#, options: .regularExpression)
            else { return nil }
            return String(text[range])
        }
        progress("the check's scans: \(scans.joined(separator: "; "))")
        if scans.contains(where: { $0.hasPrefix("Seq Scan") }) || plan.contains(where: { $0.contains("Hash") }) {
            throw BenchmarkFailure(description: "the check reads a table whole:\n\(plan.joined(separator: "\n"))")
        }
        let timings = CheckTimings()
        let check = BenchmarkCase(
            id: "shop-reminder-check", title: "shop_unanswered check, \(threads / 1000)k threads",
            description: "One reminder check (ShopReminders.check, one transaction) over \(threads) threads of \(Self.shops) shops, \(Self.recent) in the 14-day window; the figure is messages reminded per second of the check, and the notes give each check's milliseconds.",
            kind: .client, batchSize: 1, appenders: 1, eventsPerRound: 0,
            run: { round in
                try await client.withConnection { connection in
                    _ = try connection.execute(
                        """
                        DELETE FROM notification_outbox WHERE event = 'shop_unanswered';
                        TRUNCATE shop_reminded_messages, shop_reminders;
                        """)
                }
                let started = ContinuousClock.now
                let outcome = try await client.withConnection { connection in try reminders.check(now: now, on: connection) }
                let elapsed = ContinuousClock.now - started
                let milliseconds = elapsed.seconds * 1000
                timings.add(round: round, milliseconds: milliseconds, messages: outcome.messages, shops: outcome.reminders.count)
                progress(
                    "  one check: \(String(format: "%.1f", milliseconds)) ms, \(outcome.messages) waiting messages, \(outcome.reminders.count) shops reminded")
                return Measurement(round: round, events: outcome.messages, elapsed: elapsed)
            })
        let configurations = try await runInterleaved([check], rounds: rounds, unit: "messages")
        var notes = ["checks": timings.text]
        notes["threads"] = "\(threads) threads over 400 days, \(Self.recent) in the last 14 days, \(Self.shops) shops"
        notes["plan"] = scans.joined(separator: "; ")
        return BenchmarkResult(benchmark: "schedule", configurations: configurations, notes: notes)
    }
}

/// Each round's check, for the notes.
final class CheckTimings: @unchecked Sendable {
    private let lock = NSLock()
    private var rounds: [String] = []

    func add(round: Int, milliseconds: Double, messages: Int, shops: Int) {
        lock.withLock { rounds.append("round \(round): \(String(format: "%.1f", milliseconds)) ms, \(messages) messages, \(shops) shops") }
    }

    var text: String { lock.withLock { rounds.joined(separator: "; ") } }
}

extension Duration {
    fileprivate var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
