import EventLog
import Foundation
import PostgresClient
import Projections

extension TestDatabase {
    /// Runs the async projectors of `projections` (each on its own lease session, as `inbox project`
    /// does) while `body` runs, and stops them afterwards.
    public func withProjectors<T: Sendable>(
        _ projections: [any Projection] = InboxProjections.all, batchSize: Int = 1000, inMemoryEvents: Int = 2_000_000,
        readInterval: Duration = .milliseconds(20), report: @escaping @Sendable (Projector.Report) -> Void = { _ in },
        _ body: () async throws -> T
    ) async throws -> T {
        let configuration = self.configuration
        let tasks = projections.map { projection in
            Task {
                let projector = Projector(
                    projection: projection, configuration: configuration,
                    options: .init(batchSize: batchSize, inMemoryEvents: inMemoryEvents, pollInterval: .milliseconds(200), leaseRetry: .milliseconds(50),
                        readInterval: readInterval),
                    report: report)
                try await projector.run()
            }
        }
        do {
            let result = try await body()
            for task in tasks { task.cancel() }
            for task in tasks { _ = await task.result }
            return result
        } catch {
            for task in tasks { task.cancel() }
            for task in tasks { _ = await task.result }
            throw error
        }
    }

    /// Waits until the checkpoint of every one of `projections` is at the last committed event.
    public func waitUntilProjected(_ projections: [any Projection] = InboxProjections.all, timeout: Duration = .seconds(120)) async throws {
        let names = projections.map(\.name)
        let deadline = ContinuousClock.now + timeout
        var last = ""
        while ContinuousClock.now < deadline {
            let (done, state) = try await client.withConnection { connection -> (Bool, String) in
                let head = try connection.query(
                    "SELECT transaction_id::text AS x, position FROM events ORDER BY transaction_id DESC, position DESC LIMIT 1"
                ).first
                let rows = try connection.query(
                    "SELECT projection, transaction_id::text AS x, position FROM projection_checkpoints WHERE projection = ANY($1)", names)
                let headX = try head?.decode(String.self, "x") ?? "0"
                let headPosition = try head?.decode(Int64.self, "position") ?? 0
                var done = rows.count == names.count
                var state = "head \(headX)/\(headPosition)"
                for row in rows {
                    let x = try row.decode(String.self, "x")
                    let position = try row.decode(Int64.self, "position")
                    state += ", \(try row.decode(String.self, "projection")) \(x)/\(position)"
                    if x != headX || position != headPosition { done = false }
                }
                return (done, state)
            }
            if done { return }
            last = state
            try await Task.sleep(for: .milliseconds(50))
        }
        throw Unreachable(description: "The projections did not catch up within \(timeout): \(last)")
    }

    /// Rebuilds `projections` beside the live tables (without swapping) and returns, per table, the
    /// number of rows that differ between the two (both ways) and the number of live rows. With an
    /// `inMemoryEventLimit` below the log's length, the bell and the threads fold in slices of
    /// people of about that many events; with 0, every projection replays through SQL.
    public func compareWithReplay(
        _ projections: [any Projection] = InboxProjections.all, inMemoryEventLimit: Int64 = 2_000_000,
        progress: @escaping @Sendable (Replayer.Progress) -> Void = { _ in }
    ) async throws -> [(table: String, differing: Int, rows: Int, examples: [String])] {
        let replayer = Replayer(client: client, projections: projections, batchSize: 2000, inMemoryEventLimit: inMemoryEventLimit)
        try await replayer.prepare()
        try await replayer.catchUp(progress: progress)
        return try await client.withConnection { connection in
            var result: [(String, Int, Int, [String])] = []
            for projection in projections {
                let schema = Replayer.schemaName(for: projection)
                for table in projection.tableNames {
                    let live = "public.\(table)"
                    let rebuilt = "\"\(schema)\".\(table)"
                    let differing = try connection.query(
                        """
                        SELECT count(*)::int FROM (
                            (SELECT * FROM \(live) EXCEPT ALL SELECT * FROM \(rebuilt))
                            UNION ALL
                            (SELECT * FROM \(rebuilt) EXCEPT ALL SELECT * FROM \(live))) AS d
                        """
                    ).scalar(Int.self)
                    let rows = try connection.query("SELECT count(*)::int FROM \(live)").scalar(Int.self)
                    var examples: [String] = []
                    if differing > 0 {
                        examples = try connection.query(
                            """
                            (SELECT 'live: ' || row_to_json(l)::text AS e FROM (SELECT * FROM \(live) EXCEPT ALL SELECT * FROM \(rebuilt)) l LIMIT 3)
                            UNION ALL
                            (SELECT 'replay: ' || row_to_json(r)::text FROM (SELECT * FROM \(rebuilt) EXCEPT ALL SELECT * FROM \(live)) r LIMIT 3)
                            """
                        ).map { try $0.decode(String.self, "e") }
                    }
                    result.append((table, differing, rows, examples))
                }
            }
            return result
        }
    }

    /// Counters that differ from a recount of the rows they count: the bell's unread and total per
    /// person, and the conversations with unread messages per owner and side. Empty when all agree.
    public func countersThatDisagreeWithARecount() async throws -> [String] {
        try await client.withConnection { connection in
            var problems: [String] = []
            for row in try connection.query(
                """
                SELECT coalesce(c.person_id, r.person_id) AS person, coalesce(c.unread_count, 0) AS counted_unread,
                    coalesce(r.unread, 0) AS recounted_unread, coalesce(c.total_count, 0) AS counted_total, coalesce(r.total, 0) AS recounted_total
                FROM bell_counters c
                FULL JOIN (SELECT person_id, count(*) FILTER (WHERE read_at IS NULL)::int AS unread, count(*)::int AS total
                           FROM bell_entries GROUP BY person_id) r ON r.person_id = c.person_id
                WHERE coalesce(c.unread_count, 0) <> coalesce(r.unread, 0) OR coalesce(c.total_count, 0) <> coalesce(r.total, 0)
                """)
            {
                problems.append(
                    "bell of \(try row.decode(String.self, "person")): unread \(try row.decode(Int32.self, "counted_unread")) "
                        + "vs \(try row.decode(Int32.self, "recounted_unread")), total \(try row.decode(Int32.self, "counted_total")) "
                        + "vs \(try row.decode(Int32.self, "recounted_total"))")
            }
            for row in try connection.query(
                """
                SELECT coalesce(c.owner_id, r.owner_id) AS owner, coalesce(c.side, r.side) AS side,
                    coalesce(c.unread_count, 0) AS counted, coalesce(r.unread, 0) AS recounted
                FROM unread_conversations c
                FULL JOIN (SELECT owner_id, side, count(*)::int AS unread FROM thread_sides WHERE unread GROUP BY owner_id, side) r
                    ON r.owner_id = c.owner_id AND r.side = c.side
                WHERE coalesce(c.unread_count, 0) <> coalesce(r.unread, 0)
                """)
            {
                problems.append(
                    "unread conversations of \(try row.decode(String.self, "owner")) (\(try row.decode(String.self, "side"))): "
                        + "\(try row.decode(Int32.self, "counted")) vs \(try row.decode(Int32.self, "recounted"))")
            }
            return problems
        }
    }
}
