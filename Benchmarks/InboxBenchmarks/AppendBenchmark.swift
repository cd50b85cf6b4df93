import EventLog
import Foundation
import PostgresClient

/// How fast events get into the log: `EventStore.append` in batches of 1, 100 and 1,000, four appenders
/// at once, and beside them the rate at which the server inserts the same kind of rows by itself
/// (`INSERT ... SELECT ... FROM generate_series`, 1,000 rows a statement) — the ceiling for this
/// schema on this machine.
struct AppendBenchmark: Benchmark {
    var rounds: Int
    var scale: Double

    /// Events per round at scale 1.
    static let batch1Events = 2_000
    static let batch100Events = 50_000
    static let batch1000Events = 100_000
    static let concurrentEvents = 100_000
    static let serverSideEvents = 100_000
    static let concurrentAppenders = 4
    static let serverStatementRows = 1_000

    /// Whole batches making about `events × scale` events (at least one batch).
    func batches(_ events: Int, of size: Int) -> Int {
        max(1, Int((Double(events) * scale / Double(size)).rounded()))
    }

    func run(on database: BenchmarkDatabase) async throws -> BenchmarkResult {
        // Server-side stream ids carry this run's tag and the round, so they never meet the client's
        // `conversation-N` streams nor an earlier run's rows (DATABASE_URL may be reused).
        let runTag = String(UInt32.random(in: 0x1000_0000...UInt32.max), radix: 16)
        let store = database.store
        let client = database.client

        var notes = try await prepare(database, runTag: runTag)

        let batch1 = batches(Self.batch1Events, of: 1)
        let batch100 = batches(Self.batch100Events, of: 100)
        let batch1000 = batches(Self.batch1000Events, of: 1000)
        let concurrentPerAppender = max(1, Int((Double(Self.concurrentEvents) * scale / 1000 / Double(Self.concurrentAppenders)).rounded()))
        let statements = batches(Self.serverSideEvents, of: Self.serverStatementRows)

        let cases = [
            sequentialCase(id: "client-batch-1", title: "client append, batch 1", batchSize: 1, batches: batch1, store: store),
            sequentialCase(id: "client-batch-100", title: "client append, batch 100", batchSize: 100, batches: batch100, store: store),
            sequentialCase(id: "client-batch-1000", title: "client append, batch 1,000", batchSize: 1000, batches: batch1000, store: store),
            BenchmarkCase(
                id: "client-batch-1000-x\(Self.concurrentAppenders)",
                title: "client append, batch 1,000, \(Self.concurrentAppenders) appenders",
                description:
                    "\(Self.concurrentAppenders) tasks at once, each building and appending batches of 1,000 (pool of "
                    + "\(BenchmarkDatabase.poolSize) connections); the conversations are split between the appenders, so none races another for a stream version. Wall-clock rate of all of them.",
                kind: .client, batchSize: 1000, appenders: Self.concurrentAppenders,
                eventsPerRound: concurrentPerAppender * 1000 * Self.concurrentAppenders,
                run: { round in
                    try await Self.appendConcurrently(
                        store: store, appenders: Self.concurrentAppenders, batchesEach: concurrentPerAppender, round: round)
                }),
            BenchmarkCase(
                id: "server-side-insert-1000",
                title: "server-side INSERT ... SELECT, 1,000 rows",
                description:
                    "The same kind of rows made by the server itself (jsonb_build_object, gen_random_uuid) and inserted with "
                    + "INSERT INTO events ... SELECT ... FROM generate_series, 1,000 rows a statement, each statement its own transaction.",
                kind: .serverSide, batchSize: Self.serverStatementRows, appenders: 1, eventsPerRound: statements * Self.serverStatementRows,
                run: { round in
                    try await Self.insertServerSide(
                        client: client, prefix: Self.serverPrefix(runTag: runTag, round: round), statements: statements, sessions: 1,
                        round: round)
                }),
            BenchmarkCase(
                id: "server-side-insert-1000-x\(Self.concurrentAppenders)",
                title: "server-side INSERT ... SELECT, 1,000 rows, \(Self.concurrentAppenders) sessions",
                description:
                    "The same server-side insert from \(Self.concurrentAppenders) sessions at once, the like-for-like ceiling for the "
                    + "\(Self.concurrentAppenders)-appender row.",
                kind: .serverSide, batchSize: Self.serverStatementRows, appenders: Self.concurrentAppenders,
                eventsPerRound: statements * Self.serverStatementRows,
                run: { round in
                    try await Self.insertServerSide(
                        client: client, prefix: Self.serverPrefix(runTag: runTag + "c", round: round), statements: statements,
                        sessions: Self.concurrentAppenders, round: round)
                }),
        ]
        let results = try await runInterleaved(cases, rounds: rounds)
        notes["serverSideStreamPrefix"] = Self.serverPrefix(runTag: runTag, round: 0).replacingOccurrences(of: "r0-", with: "r<round>-")
        return BenchmarkResult(benchmark: BenchmarkName.append.rawValue, configurations: results, notes: notes)
    }

    static func serverPrefix(runTag: String, round: Int) -> String { "srv\(runTag)r\(round)-conversation-" }

    // MARK: Preparation

    /// Gives every conversation its first event, warms up both paths (not measured), and notes the
    /// sizes of what they wrote.
    private func prepare(_ database: BenchmarkDatabase, runTag: String) async throws -> [String: String] {
        progress("seeding \(EventFactory.conversationCount) conversations and warming up")
        for start in stride(from: 0, to: EventFactory.conversationCount, by: 1000) {
            let events = try EventFactory.seedEvents(batch: start..<min(start + 1000, EventFactory.conversationCount))
            _ = try await database.store.append(events)
        }
        var factory = EventFactory(seed: 0xC0FFEE)
        var sentBytes = 0
        var sentEvents = 0
        for size in [1, 1, 1, 100, 1000] {
            let events = try factory.batch(size: size)
            sentBytes += events.reduce(0) { $0 + $1.payloadJSON.utf8.count }
            sentEvents += events.count
            _ = try await database.store.append(events)
        }
        _ = try await Self.insertServerSide(client: database.client, prefix: Self.serverPrefix(runTag: runTag, round: 0), statements: 1, sessions: 1, round: 0)

        var notes: [String: String] = [
            "runTag": runTag,
            "clientPayloadBytesAsSent": String(format: "%.0f", Double(sentBytes) / Double(max(1, sentEvents))),
            "conversations": String(EventFactory.conversationCount),
            "eventMix": "19 of 20 message_sent (1 in 10 with an attachment handle), 1 of 20 conversation_read; unique idempotency key per event",
        ]
        let sizes = try await database.client.withConnection { connection in
            try connection.query(
                """
                SELECT stream_id LIKE 'srv%' AS server_side, count(*)::bigint AS events,
                       avg(pg_column_size(payload))::float8 AS payload, avg(pg_column_size(metadata))::float8 AS metadata,
                       avg(octet_length(payload::text))::float8 AS payload_text
                FROM events WHERE type IN ('message_sent', 'conversation_read') GROUP BY 1
                """
            ).map { row in
                (
                    try row.decode(Bool.self, "server_side"), try row.decode(Double.self, "payload"),
                    try row.decode(Double.self, "metadata"), try row.decode(Double.self, "payload_text")
                )
            }
        }
        for (serverSide, payload, metadata, payloadText) in sizes {
            let side = serverSide ? "serverSide" : "client"
            notes["\(side)StoredPayloadBytes"] = String(format: "%.0f", payload)
            notes["\(side)StoredMetadataBytes"] = String(format: "%.0f", metadata)
            notes["\(side)PayloadTextBytes"] = String(format: "%.0f", payloadText)
        }
        return notes
    }

    // MARK: Client

    private func sequentialCase(id: String, title: String, batchSize: Int, batches: Int, store: EventStore) -> BenchmarkCase {
        BenchmarkCase(
            id: id, title: title,
            description:
                "One appender: build \(formatGrouped(Double(batchSize))) NewEvent value(s) (the payload encoded as the API's are, metadata, "
                + "a random idempotency key), then EventStore.append them as one batch; repeated \(formatGrouped(Double(batches))) times.",
            kind: .client, batchSize: batchSize, appenders: 1, eventsPerRound: batchSize * batches,
            run: { round in
                var factory = EventFactory(seed: UInt64(round) << 32 | UInt64(batchSize))
                let clock = ContinuousClock()
                var build = Duration.zero
                var append = Duration.zero
                let start = clock.now
                for _ in 0..<batches {
                    try Task.checkCancellation()
                    let (built, appended) = try await Self.buildAndAppend(&factory, size: batchSize, store: store, clock: clock)
                    build += built
                    append += appended
                }
                return Measurement(round: round, events: batchSize * batches, elapsed: clock.now - start, build: build, append: append)
            })
    }

    /// Builds one batch and appends it; returns the time of each step.
    private static func buildAndAppend(
        _ factory: inout EventFactory, size: Int, store: EventStore, clock: ContinuousClock
    ) async throws -> (build: Duration, append: Duration) {
        let started = clock.now
        let events = try factory.batch(size: size)
        let built = clock.now
        let appended = try await store.append(events)
        let done = clock.now
        guard appended.count == events.count, appended.allSatisfy(\.wasAppended) else {
            throw BenchmarkFailure(
                description: "append returned \(appended.count) events for \(events.count), "
                    + "\(appended.filter { !$0.wasAppended }.count) of them not newly appended")
        }
        return (built - started, done - built)
    }

    private static func appendConcurrently(store: EventStore, appenders: Int, batchesEach: Int, round: Int) async throws -> Measurement {
        let clock = ContinuousClock()
        let start = clock.now
        let (build, append) = try await withThrowingTaskGroup(of: (Duration, Duration).self) { group in
            for appender in 0..<appenders {
                group.addTask {
                    var factory = EventFactory(seed: UInt64(round) << 32 | UInt64(appender) << 16 | 0xA, appender: appender, appenders: appenders)
                    var build = Duration.zero
                    var append = Duration.zero
                    for _ in 0..<batchesEach {
                        try Task.checkCancellation()
                        let (built, appended) = try await buildAndAppend(&factory, size: 1000, store: store, clock: clock)
                        build += built
                        append += appended
                    }
                    return (build, append)
                }
            }
            var build = Duration.zero
            var append = Duration.zero
            for try await (built, appended) in group {
                build += built
                append += appended
            }
            return (build, append)
        }
        return Measurement(round: round, events: appenders * batchesEach * 1000, elapsed: clock.now - start, build: build, append: append)
    }

    // MARK: Server side

    /// The rows the client appends, made by the server: the same bodies, types and mix, app metadata, a
    /// fresh idempotency key per row, one correlation id per statement. Only the stream id differs: it
    /// carries the run's and round's prefix (the payload's conversationId does not). Stream versions are computed
    /// (not looked up): `g * 7919 mod 10000` scatters consecutive rows over 10,000 streams like the
    /// client's random choice, and is a bijection on each block of 10,000, so (stream, version) is unique.
    static let serverSideInsert = """
        INSERT INTO events (stream_id, stream_version, type, payload, metadata, idempotency_key)
        SELECT s.stream_id, s.stream_version,
               CASE WHEN s.g % 20 = 19 THEN 'conversation_read' ELSE 'message_sent' END,
               CASE WHEN s.g % 20 = 19 THEN
                   jsonb_build_object('conversationId', s.conversation, 'readerId', s.author, 'side', 'seller', 'readUpTo', s.g)
               ELSE
                   jsonb_build_object(
                       'conversationId', s.conversation, 'authorId', s.author, 'side', 'buyer',
                       'body', ($4::text[])[1 + (s.g * 31) % cardinality($4::text[])],
                       'attachmentHandles', CASE WHEN s.g % 10 = 3 THEN jsonb_build_array('att_' || left(md5(s.g::text), 22))
                                                 ELSE '[]'::jsonb END)
               END,
               jsonb_build_object('origin', 'app:ios', 'appVersion', '2.4.0', 'actor', s.author,
                                  'correlationId', $5::text, 'service', 'inbox'),
               gen_random_uuid()::text
        FROM (
            SELECT g, $1::text || ((g * 7919) % 10000) AS stream_id, 'conversation-' || ((g * 7919) % 10000) AS conversation,
                   g / 10000 + 1 AS stream_version,
                   'user-' || (100000 + (g * 104729) % 900000) AS author
            FROM generate_series($2::bigint, $3::bigint) AS g
        ) s
        """

    private static func insertServerSide(
        client: PostgresClient, prefix: String, statements: Int, sessions: Int, round: Int
    ) async throws -> Measurement {
        let clock = ContinuousClock()
        let start = clock.now
        let rows = serverStatementRows
        try await withThrowingTaskGroup(of: Void.self) { group in
            for session in 0..<sessions {
                // Each session its own streams, so no two sessions race for a stream version.
                let sessionPrefix = sessions == 1 ? prefix : "\(prefix)s\(session)-"
                group.addTask {
                    for statement in stride(from: session, to: statements, by: sessions) {
                        try Task.checkCancellation()
                        let first = Int64(statement * rows)
                        let last = first + Int64(rows) - 1
                        let correlationId = UUID().uuidString.lowercased()
                        let inserted = try await client.withConnection { connection in
                            try connection.query(serverSideInsert, sessionPrefix, first, last, EventFactory.bodies, correlationId).affectedRows
                        }
                        guard inserted == rows else {
                            throw BenchmarkFailure(description: "the server-side INSERT wrote \(inserted ?? 0) rows, not \(rows)")
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        return Measurement(round: round, events: statements * rows, elapsed: clock.now - start)
    }
}
