import EventLog
import Foundation
import InboxDomain
import InboxSimulation
import InboxTesting
import PostgresClient
import Projections
import Testing

/// `inbox project`, `inbox replay` and the projection lines of `inbox status`, run as real
/// processes against a real database of the test's own: killed projectors, a second node waiting
/// for the lease, replays with and without a swap, usage errors and parked events.
@Suite struct ProjectCommandTests {
    static let projectionNames = InboxProjections.all.map(\.name).sorted()

    // MARK: Helpers

    /// Appends `count` events of `simulation` in batches of `batchSize`, one batch after another
    /// (so that the simulation's predicted positions hold).
    static func appendSimulated(_ simulation: inout MarketplaceSimulation, count: Int, to db: TestDatabase, batchSize: Int = 200)
        async throws
    {
        var appended = 0
        while appended < count {
            let batch = simulation.events(min(batchSize, count - appended))
            _ = try await db.store.append(batch)
            appended += batch.count
        }
    }

    static func scalar<T: PostgresDecodable & Sendable>(_ db: TestDatabase, _ sql: String, as type: T.Type = T.self) async throws -> T {
        try await db.client.withConnection { connection in try connection.query(sql).scalar(T.self) }
    }

    /// Where one projection's checkpoint stands against the head of the log.
    struct CheckpointState: CustomStringConvertible {
        var projection: String
        var position: Int64
        var headPosition: Int64
        /// The checkpoint is before the last committed event.
        var behind: Bool
        var eventsApplied: Int64

        var description: String { "\(projection) at \(position) of \(headPosition)\(behind ? " (behind)" : "")" }
    }

    static func checkpoints(_ db: TestDatabase) async throws -> [CheckpointState] {
        try await db.client.withConnection { connection in
            try connection.query(
                """
                SELECT c.projection, c.position, c.events_applied, coalesce(h.position, 0) AS head,
                    coalesce((c.transaction_id, c.position) < (h.transaction_id, h.position), false) AS behind
                FROM projection_checkpoints c
                LEFT JOIN (SELECT transaction_id, position FROM events ORDER BY transaction_id DESC, position DESC LIMIT 1) h ON true
                ORDER BY c.projection
                """
            ).map { row in
                CheckpointState(
                    projection: try row.decode(String.self, "projection"), position: try row.decode(Int64.self, "position"),
                    headPosition: try row.decode(Int64.self, "head"), behind: try row.decode(Bool.self, "behind"),
                    eventsApplied: try row.decode(Int64.self, "events_applied"))
            }
        }
    }

    /// The message and projection of a JSON log line of stderr (nil for any other line).
    static func logEntry(_ line: String) -> (message: String, projection: String?, fields: [String: Any])? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
            let message = object["message"] as? String
        else { return nil }
        return (message, object["projection"] as? String, object)
    }

    static func messages(_ stderr: String) -> [String] {
        InboxResult.lines(stderr).compactMap { logEntry($0)?.message }
    }

    /// Waits until `process` has logged a message starting with `prefix` for every projection, and
    /// returns those lines' fields by projection.
    @discardableResult
    static func waitForEveryProjection(
        _ process: RunningInbox, toLog prefix: String, timeout: Duration = .seconds(60)
    ) async throws -> [String: [String: Any]] {
        var fields: [String: [String: Any]] = [:]
        for name in projectionNames {
            let line = try await process.waitForStderrLine(timeout: timeout) { line in
                guard let entry = logEntry(line) else { return false }
                return entry.message.hasPrefix(prefix) && entry.projection == name
            }
            fields[name] = logEntry(line)?.fields
        }
        return fields
    }

    /// Polls until `person` has `expected` bell entries, returning the last count seen.
    static func waitForBellEntries(of person: String, count expected: Int, in db: TestDatabase, timeout: Duration) async throws -> Int {
        let deadline = ContinuousClock.now + timeout
        var count = 0
        while true {
            count = try await db.client.withConnection { connection in
                guard try connection.query("SELECT to_regclass('public.bell_entries') IS NOT NULL").scalar(Bool.self) else { return 0 }
                return try connection.query("SELECT count(*) FROM bell_entries WHERE person_id = $1", person).scalar(Int.self)
            }
            if count >= expected || ContinuousClock.now >= deadline { return count }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Stops `process` with SIGTERM and requires a clean exit with status 0.
    static func stop(_ process: RunningInbox, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        process.send(SIGTERM)
        let result = try await process.waitForExit(timeout: .seconds(60))
        #expect(result.exitedNormally, "\(process.commandLine) was killed by signal \(result.status)", sourceLocation: sourceLocation)
        #expect(result.status == 0, "\(process.commandLine) stderr: \(result.stderr)", sourceLocation: sourceLocation)
    }

    /// Runs `inbox project` until every projection has caught up with the log, then stops it.
    static func projectUntilCaughtUp(_ db: TestDatabase, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let projector = try InboxCLI.start(["project"], environment: InboxCLI.databaseEnvironment(db.url))
        defer { projector.cleanUp() }
        try await db.waitUntilProjected(timeout: .seconds(300))
        try await stop(projector, sourceLocation: sourceLocation)
    }

    /// A fingerprint of every live read-model table and of the checkpoints, to tell whether any changed.
    static func liveFingerprint(_ db: TestDatabase) async throws -> [String: String] {
        try await fingerprint(db, tables: InboxProjections.all.flatMap(\.tableNames) + ["projection_checkpoints", "projection_dead_letters"])
    }

    /// `count md5` of each table of `public`, every row in a stable order.
    static func fingerprint(_ db: TestDatabase, tables: [String]) async throws -> [String: String] {
        try await db.client.withConnection { connection in
            var result: [String: String] = [:]
            for table in tables {
                result[table] = try connection.query(
                    "SELECT count(*)::text || ' ' || md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM public.\"\(table)\" t"
                ).scalar(String.self)
            }
            return result
        }
    }

    static func rowCounts(_ db: TestDatabase, schema: String = "public") async throws -> [String: Int] {
        let tables = InboxProjections.all.flatMap(\.tableNames)
        return try await db.client.withConnection { connection in
            var result: [String: Int] = [:]
            for table in tables {
                result[table] = try connection.query("SELECT count(*) FROM \"\(schema)\".\(table)").scalar(Int.self)
            }
            return result
        }
    }

    // MARK: Tests

    /// A projector killed with SIGKILL while batches are in flight, then a new one: every batch is
    /// applied exactly once, so the live tables equal a replay row for row and the counters a recount.
    @Test func killingAProjectorWithSIGKILLMidStreamLosesAndDoublesNothing() async throws {
        try await withTestDatabase { db in
            var simulation = MarketplaceSimulation(configuration: .init(people: 400, shops: 30, watches: 800, seed: 23))
            // More than the projector's largest batch (10,000) past the first two batches: with
            // 6,000, a quiet machine's projector sometimes had all of it done between the look below
            // and the kill.
            try await Self.appendSimulated(&simulation, count: 16_000, to: db)
            let environment = InboxCLI.databaseEnvironment(db.url)

            let first = try InboxCLI.start(["project"], environment: environment)
            defer { first.cleanUp() }
            // Kill it once some projection has committed at least two batches (of 1000 events),
            // while some projection is still behind and a projector session is in the middle of a
            // statement or transaction. The log keeps growing meanwhile, so there is always work.
            let deadline = ContinuousClock.now + .seconds(300)
            var appendedWhileRunning = 0
            var lastSeen: [CheckpointState] = []
            while true {
                guard first.process.isRunning else {
                    Issue.record("inbox project ended before it was killed; stderr: \(first.stderrSoFar)")
                    return
                }
                let states = try await Self.checkpoints(db)
                lastSeen = states
                let twoBatchesIn = states.contains { $0.position > 1500 }
                // Far enough behind that the projector cannot catch up between this look and the
                // kill (a projection a few events behind sometimes did, and then died with nothing
                // left to do).
                let backlog = (states.map(\.headPosition).max() ?? 0) - (states.map(\.position).min() ?? 0)
                // 3,000: a projector does a batch of 1,000 in tens of milliseconds, about the time
                // of the look below on a loaded machine.
                let unfinished = states.count < Self.projectionNames.count || backlog >= 3000
                if twoBatchesIn && unfinished {
                    let busy = try await Self.scalar(
                        db,
                        """
                        SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
                            AND application_name LIKE 'inbox-project-%' AND application_name <> 'inbox-project-listener'
                            AND state <> 'idle' AND xact_start IS NOT NULL
                        """, as: Int.self)
                    if busy > 0 {
                        first.send(SIGKILL)
                        break
                    }
                }
                if states.count == Self.projectionNames.count && backlog < 6000 && appendedWhileRunning < 30_000 {
                    try await Self.appendSimulated(&simulation, count: 500, to: db)
                    appendedWhileRunning += 500
                } else {
                    try await Task.sleep(for: .milliseconds(5))
                }
                if ContinuousClock.now >= deadline {
                    Issue.record("never caught the projector mid-stream: \(lastSeen); stderr: \(first.stderrSoFar)")
                    return
                }
            }
            let killed = try await first.waitForExit(timeout: .seconds(30))
            #expect(killed.reason == .uncaughtSignal && killed.status == SIGKILL, "stderr: \(killed.stderrHead)")

            // It died with work left: some projection had committed batches, some had not caught up.
            let afterKill = try await Self.checkpoints(db)
            #expect(afterKill.contains { $0.position > 0 }, "\(afterKill)")
            #expect(afterKill.count < Self.projectionNames.count || afterKill.contains { $0.behind }, "\(afterKill)")

            try await Self.appendSimulated(&simulation, count: 1000, to: db)
            let second = try InboxCLI.start(["project"], environment: environment)
            defer { second.cleanUp() }
            try await Self.waitForEveryProjection(second, toLog: "took the lease")
            try await db.waitUntilProjected(timeout: .seconds(300))
            try await Self.stop(second)

            let finalStates = try await Self.checkpoints(db)
            #expect(finalStates.map(\.projection) == Self.projectionNames)
            #expect(!finalStates.contains { $0.behind }, "\(finalStates)")
            let deadLetters = try await Self.scalar(db, "SELECT count(*) FROM projection_dead_letters", as: Int.self)
            #expect(deadLetters == 0)

            let problems = try await db.countersThatDisagreeWithARecount()
            #expect(problems.isEmpty, "\(problems.prefix(10))")
            let comparison = try await db.compareWithReplay()
            for table in comparison {
                #expect(table.differing == 0, "\(table.table): \(table.differing) of \(table.rows) rows differ; \(table.examples)")
            }
            // The stream reached the read models (the comparison is not of empty tables).
            let rows = Dictionary(uniqueKeysWithValues: comparison.map { ($0.table, $0.rows) })
            #expect((rows["bell_entries"] ?? 0) > 100 && (rows["messages"] ?? 0) > 100, "\(rows)")
            // Each event was counted once: the live checkpoints applied as many events as the replay.
            let applied = try await db.client.withConnection { connection in
                try connection.query(
                    """
                    SELECT c.projection || ': live ' || c.events_applied || ', replay ' || r.events_applied AS line,
                        c.events_applied = r.events_applied AS same
                    FROM projection_checkpoints c JOIN projection_replays r USING (projection) ORDER BY c.projection
                    """
                ).map { (try $0.decode(String.self, "line"), try $0.decode(Bool.self, "same")) }
            }
            #expect(applied.count == Self.projectionNames.count)
            #expect(applied.allSatisfy { $0.1 }, "\(applied.map(\.0))")
        }
    }

    /// Two `inbox project` processes: the second waits for the first's leases, projects nothing
    /// meanwhile, and takes every lease over when the first is killed.
    @Test func aSecondProjectProcessWaitsForTheLeaseAndTakesOverWhenTheHolderDies() async throws {
        try await withTestDatabase { db in
            let environment = InboxCLI.databaseEnvironment(db.url, ["INBOX_POLL_INTERVAL_MS": "200"])
            let holder = try InboxCLI.start(["project"], environment: environment)
            defer { holder.cleanUp() }
            let holderLeases = try await Self.waitForEveryProjection(holder, toLog: "took the lease")

            let waiter = try InboxCLI.start(["project"], environment: environment)
            defer { waiter.cleanUp() }
            try await Self.waitForEveryProjection(waiter, toLog: "waiting for the lease")

            _ = try await db.store.append(try NewEvent(PasswordChanged(personId: "p1")))
            let p1 = try await Self.waitForBellEntries(of: "p1", count: 1, in: db, timeout: .seconds(30))
            #expect(p1 == 1)
            #expect(!Self.messages(waiter.stderrSoFar).contains("took the lease"), "stderr: \(waiter.stderrSoFar)")

            // The leases are held by the backends the holder logged.
            let holderBackends = Set(holderLeases.values.compactMap { $0["backend"] as? String })
            let heldBy = try await Self.leaseHolders(db)
            #expect(heldBy.count == Self.projectionNames.count && heldBy == holderBackends, "held by \(heldBy), holder logged \(holderBackends)")

            holder.send(SIGKILL)
            let killed = try await holder.waitForExit(timeout: .seconds(30))
            #expect(killed.reason == .uncaughtSignal)

            let waiterLeases = try await Self.waitForEveryProjection(waiter, toLog: "took the lease", timeout: .seconds(30))
            let waiterBackends = Set(waiterLeases.values.compactMap { $0["backend"] as? String })
            #expect(waiterBackends.count == Self.projectionNames.count && waiterBackends.isDisjoint(with: holderBackends))

            _ = try await db.store.append(try NewEvent(PasswordChanged(personId: "p2")))
            let p2 = try await Self.waitForBellEntries(of: "p2", count: 1, in: db, timeout: .seconds(30))
            #expect(p2 == 1, "stderr of the new holder: \(waiter.stderrSoFar)")
            let heldAfter = try await Self.leaseHolders(db)
            #expect(heldAfter == waiterBackends, "held by \(heldAfter), new holder logged \(waiterBackends)")
            // Nothing was applied twice by the new holder.
            #expect(try await Self.waitForBellEntries(of: "p1", count: 1, in: db, timeout: .zero) == 1)

            try await Self.stop(waiter)
        }
    }

    /// The backend pids holding a projection lease in `db`'s database.
    static func leaseHolders(_ db: TestDatabase) async throws -> Set<String> {
        Set(
            try await db.client.query(
                """
                SELECT pid::text AS pid FROM pg_locks
                WHERE locktype = 'advisory' AND granted AND classid = 6924
                    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                """
            ) { try $0.decode(String.self, "pid") })
    }

    @Test func replayRebuildsEveryProjectionAndSwapsThemIn() async throws {
        try await withTestDatabase { db in
            var simulation = MarketplaceSimulation(configuration: .init(people: 300, shops: 20, watches: 500, seed: 5))
            try await Self.appendSimulated(&simulation, count: 3000, to: db)
            try await Self.projectUntilCaughtUp(db)
            let before = try await Self.rowCounts(db)
            #expect((before["bell_entries"] ?? 0) > 100, "\(before)")

            let result = try await InboxCLI.run(["replay"], environment: InboxCLI.databaseEnvironment(db.url), timeout: .seconds(300))
            #expect(result.exitedNormally && result.status == 0, "stderr: \(result.stderr)")
            let messages = Self.messages(result.stderr)
            #expect(messages.contains("replayed the log"), "stderr: \(result.stderr)")
            #expect(messages.contains("swapped the new tables in"), "stderr: \(result.stderr)")
            // Not on a terminal: progress as plain lines (the first at once, then one every 5 s).
            let progress = result.stderr.split(separator: "\n").filter { $0.hasPrefix("replay: ") }
            #expect(!progress.isEmpty && progress.allSatisfy { $0.contains(" events/s") && !$0.contains("\r") }, "stderr: \(result.stderr)")

            let leftovers = try await db.client.query(
                #"SELECT nspname FROM pg_namespace WHERE nspname LIKE 'replay\_%' OR nspname LIKE 'retired\_%'"#
            ) { try $0.decode(String.self, "nspname") }
            #expect(leftovers.isEmpty, "schemas left behind: \(leftovers)")
            let replays = try await Self.scalar(db, "SELECT count(*) FROM projection_replays", as: Int.self)
            #expect(replays == 0)

            let states = try await Self.checkpoints(db)
            #expect(states.map(\.projection) == Self.projectionNames)
            #expect(states.allSatisfy { !$0.behind && $0.position == $0.headPosition && $0.position > 0 }, "\(states)")
            #expect(try await Self.rowCounts(db) == before)
            let problems = try await db.countersThatDisagreeWithARecount()
            #expect(problems.isEmpty, "\(problems.prefix(10))")

            let status = try await InboxCLI.run(["status"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(status.status == 0, "stderr: \(status.stderr)")
            for name in Self.projectionNames {
                let lines = status.stdoutLines.filter { $0.hasPrefix("projection \(name):") }
                #expect(lines.count == 1, "stdout: \(status.stdout)")
                #expect(lines.first?.contains(", 0 events behind") == true, "stdout: \(status.stdout)")
            }
        }
    }

    @Test func replayWithoutSwapLeavesTheLiveTablesAndBuildsTheNewOnesBeside() async throws {
        try await withTestDatabase { db in
            var simulation = MarketplaceSimulation(configuration: .init(people: 200, shops: 15, watches: 300, seed: 9))
            try await Self.appendSimulated(&simulation, count: 1500, to: db)
            try await Self.projectUntilCaughtUp(db)
            let before = try await Self.liveFingerprint(db)

            let result = try await InboxCLI.run(
                ["replay", "--projection", "bell", "--no-swap"], environment: InboxCLI.databaseEnvironment(db.url), timeout: .seconds(300))
            #expect(result.exitedNormally && result.status == 0, "stderr: \(result.stderr)")
            let messages = Self.messages(result.stderr)
            #expect(messages.contains("built the new tables without swapping them in"), "stderr: \(result.stderr)")
            #expect(!messages.contains("swapped the new tables in"), "stderr: \(result.stderr)")

            let schemas = try await db.client.query(
                #"SELECT nspname FROM pg_namespace WHERE nspname LIKE 'replay\_%' OR nspname LIKE 'retired\_%' ORDER BY 1"#
            ) { try $0.decode(String.self, "nspname") }
            #expect(schemas == ["replay_bell"])
            let rebuilt = try await Self.scalar(db, "SELECT to_regclass('replay_bell.bell_entries') IS NOT NULL", as: Bool.self)
            try #require(rebuilt, "replay_bell.bell_entries was not built")

            #expect(try await Self.liveFingerprint(db) == before, "the live tables or checkpoints changed")
            // The new table holds what the live one does, row for row.
            let differing = try await Self.scalar(
                db,
                """
                SELECT count(*) FROM (
                    (SELECT * FROM public.bell_entries EXCEPT ALL SELECT * FROM replay_bell.bell_entries)
                    UNION ALL
                    (SELECT * FROM replay_bell.bell_entries EXCEPT ALL SELECT * FROM public.bell_entries)) d
                """, as: Int.self)
            let rows = try await Self.scalar(db, "SELECT count(*) FROM replay_bell.bell_entries", as: Int.self)
            #expect(differing == 0)
            #expect(rows > 50)
        }
    }

    @Test func anUnknownProjectionIsAUsageErrorNamingTheKnownOnes() async throws {
        for command in ["replay", "project"] {
            let result = try await InboxCLI.run([command, "--projection", "nope"])
            #expect(result.exitedNormally)
            #expect(result.status == 2, "inbox \(command) stderr: \(result.stderr)")
            #expect(result.stdout.isEmpty, "inbox \(command) stdout: \(result.stdout)")
            #expect(result.stderrLines.count == 1, "inbox \(command) stderr: \(result.stderr)")
            let line = result.stderrLines.first ?? ""
            #expect(line.contains("nope") && line.contains("bell"), "inbox \(command) stderr: \(result.stderr)")
            for name in Self.projectionNames {
                #expect(line.contains(name), "inbox \(command) stderr does not name \(name): \(line)")
            }
        }
    }

    @Test func statusCountsParkedEvents() async throws {
        try await withTestDatabase { db in
            // Valid for the catalogue, but the conversation was never started: threads parks it.
            _ = try await db.store.append(
                try NewEvent(ConversationRead(conversationId: "nowhere", side: .buyer, personId: "p1", upToMessageId: "m0")))
            let projector = try InboxCLI.start(["project"], environment: InboxCLI.databaseEnvironment(db.url))
            defer { projector.cleanUp() }
            try await db.waitUntilProjected(timeout: .seconds(120))
            let parkedLine = try await projector.waitForStderrLine(timeout: .seconds(30)) { line in
                Self.logEntry(line).map { $0.message == "parked events that could not be applied" } ?? false
            }
            #expect(Self.logEntry(parkedLine)?.projection == "threads", "\(parkedLine)")
            try await Self.stop(projector)

            let parked = try await db.client.query("SELECT projection || ' ' || type AS p FROM projection_dead_letters") {
                try $0.decode(String.self, "p")
            }
            #expect(parked == ["threads conversation_read"])

            let status = try await InboxCLI.run(["status"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(status.status == 0, "stderr: \(status.stderr)")
            for name in Self.projectionNames {
                let line = status.stdoutLines.first { $0.hasPrefix("projection \(name):") }
                let expected = name == "threads" ? ", 1 parked" : ", 0 parked"
                #expect(line?.contains(expected) == true, "expected \(expected); stdout: \(status.stdout)")
                #expect(line?.contains(", 0 events behind") == true, "stdout: \(status.stdout)")
            }
        }
    }
}
