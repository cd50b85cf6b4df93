import Foundation
import InboxDomain
import InboxTesting
import Lifecycle
import PostgresClient
import Projections
import Schedule
import Synchronization
import Testing

/// Nothing is reminded twice: not by two checks at once, two schedule nodes, a restart or a replay.
@Suite(.serialized) struct NeverTwiceTests {
    @Test func twoChecksAtOnceOnTwoConnectionsRemindOnce() async throws {
        try await withTestDatabase { db in
            let thread = ShopThread("race")
            try await db.appendAndProject([thread.start(), thread.buyerWrites(1)])
            let now = wholeSecond(after: try await db.sentAt(thread.message(1)))
            // Hold the checks' lock (a session's, as the session rolls back what a call leaves open) so
            // that both checks start, and both wait for it, before either runs.
            let holder = PostgresSession(configuration: db.configuration)
            try await holder.run { connection in
                _ = try connection.query("SELECT pg_advisory_lock($1, hashtext('shop_reminders'))", Int32(0x1B10))
            }
            let configuration = db.configuration
            let checks = (0..<2).map { _ in
                Task {
                    try await BlockingThread.run {
                        let connection = try PostgresConnection(configuration: configuration)
                        defer { connection.close() }
                        return try ShopReminders().check(now: now, on: connection)
                    }
                }
            }
            try await waitUntil("both checks wait for the lock") {
                try await db.scalar(
                    """
                    SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = \(0x1B10)
                        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    """, Int.self) == 2
            }
            try await holder.run { connection in _ = try connection.query("SELECT pg_advisory_unlock($1, hashtext('shop_reminders'))", Int32(0x1B10)) }
            await holder.end()
            var outcomes: [ShopReminders.Outcome] = []
            for check in checks { outcomes.append(try await check.value) }
            #expect(outcomes.map(\.reminders.count).sorted() == [0, 1], "one reminds, the other finds it done")
            #expect(try await db.reminderRows().count == 1)
        }
    }

    @Test func aNewInstanceAfterARestartRemindsNothingTwice() async throws {
        try await withTestDatabase { db in
            let thread = ShopThread("restart")
            try await db.appendAndProject([thread.start(), thread.buyerWrites(1)])
            let now = wholeSecond(after: try await db.sentAt(thread.message(1)))
            let log = RecordingLogHandler()
            try await runSchedule(db, now: now, log: log) { clock in
                try await waitUntil("the reminder is written") { try await db.reminderRows().count == 1 }
                try await clock.waitForSleepers()
            }
            let line = log.records.first { $0.message == "reminded shops of buyers waiting for an answer" }
            #expect(line?.metadata["shops"] == 1 && line?.metadata["messages"] == 1, "one line per check that reminded")
            // A new process: a new service, a new session, the same state.
            let again = RecordingLogHandler()
            try await runSchedule(db, now: now.addingTimeInterval(3 * hour), log: again) { clock in
                try await clock.waitForSleepers()
                clock.advance(by: .seconds(900))
                try await clock.waitForSleepers()
            }
            #expect(again.messages.contains("took the lease"))
            #expect(!again.messages.contains("reminded shops of buyers waiting for an answer"), "\(again.messages)")
            #expect(try await db.reminderRows().count == 1)
        }
    }

    @Test func twoScheduleNodesAtOnceRemindOnceAndOnlyTheLeaseHolderChecks() async throws {
        try await withTestDatabase { db in
            let thread = ShopThread("nodes")
            let later = ShopThread("nodes-later")
            try await db.appendAndProject([thread.start(), thread.buyerWrites(1)])
            let now = MovableNow(wholeSecond(after: try await db.sentAt(thread.message(1))))
            let logs = [RecordingLogHandler(), RecordingLogHandler()]
            let clocks = [TestClock(), TestClock()]
            let nodes = (0..<2).map { index in
                let service = ScheduleService(
                    configuration: db.configuration, now: { now.value }, clock: clocks[index],
                    logger: Logger(label: "node-\(index)", handler: logs[index]))
                return Task { try await service.run() }
            }
            defer { for node in nodes { node.cancel() } }
            try await waitUntil("one node took the lease") { logs.contains { $0.messages.contains("took the lease") } }
            let holder = logs[0].messages.contains("took the lease") ? 0 : 1
            let waiter = 1 - holder
            try await waitUntil("the other waits for it") { logs[waiter].messages.contains("waiting for the lease: another node holds it") }
            // Both sleep: the holder its interval, the other its lease retry.
            try await clocks[holder].waitForSleepers()
            try await clocks[waiter].waitForSleepers()
            #expect(try await db.reminderRows().count == 1)
            // The next interval: a new buyer message, and a shop reminded by the holder alone.
            try await db.appendAndProject([later.start(), later.buyerWrites(1)])
            now.move(by: 900)
            for _ in 0..<3 {
                clocks[waiter].advance(by: .milliseconds(500))
                try await clocks[waiter].waitForSleepers()
            }
            #expect(!logs[waiter].messages.contains("took the lease"))
            clocks[holder].advance(by: .seconds(900))
            try await waitUntil("the holder's next check reminds") { try await db.reminderRows().count == 2 }
            // The check logs after its transaction commits: the row can be seen a moment before the line.
            try await waitUntil("the holder's next check says so") {
                logs[holder].records.filter { $0.message == "reminded shops of buyers waiting for an answer" }.count >= 2
            }
            #expect(logs[holder].records.filter { $0.message == "reminded shops of buyers waiting for an answer" }.count == 2)
            #expect(!logs[waiter].messages.contains("reminded shops of buyers waiting for an answer"))
            for node in nodes { node.cancel() }
            for node in nodes { _ = await node.result }
        }
    }

    @Test func aStoppedScheduleStopsInTheMiddleOfItsWait() async throws {
        try await withTestDatabase { db in
            try await db.project()
            let clock = TestClock()
            let service = ScheduleService(configuration: db.configuration, clock: clock)
            let task = Task { try await service.run() }
            try await clock.waitForSleepers()
            let started = ContinuousClock.now
            task.cancel()
            _ = await task.result
            // Its wait is on the test clock, which never moves here: only the cancellation ends it.
            // (Generous: this suite is not timed on its own; PromptShutdownProcessTests is, for `inbox run`.)
            #expect(ContinuousClock.now - started < .seconds(5))
        }
    }

    @Test func aReplayRemindsNothingAgainAndKeepsTheIndex() async throws {
        try await withTestDatabase { db in
            let thread = ShopThread("replay")
            try await db.appendAndProject([thread.start(), thread.buyerWrites(1)])
            let now = wholeSecond(after: try await db.sentAt(thread.message(1)))
            #expect(try await db.check(at: now).reminders.count == 1)
            let replayer = Replayer(client: db.client, projections: InboxProjections.all)
            try await replayer.prepare()
            try await replayer.catchUp()
            try await replayer.buildIndexes()
            try await replayer.swap()
            #expect(try await db.scalar("SELECT to_regclass('public.conversations_waiting') IS NOT NULL", Bool.self), "the replay built the index")
            #expect(try await db.check(at: now.addingTimeInterval(3 * hour)).reminders.isEmpty)
            #expect(try await db.reminderRows().count == 1)
        }
    }

    /// Runs a schedule (test clock, `now` fixed) while `body` runs, then stops it.
    private func runSchedule(
        _ db: TestDatabase, now: Date, log: RecordingLogHandler, _ body: (TestClock) async throws -> Void
    ) async throws {
        let clock = TestClock()
        let service = ScheduleService(configuration: db.configuration, now: { now }, clock: clock, logger: Logger(label: "schedule", handler: log))
        let task = Task { try await service.run() }
        do {
            try await body(clock)
        } catch {
            task.cancel()
            _ = await task.result
            throw error
        }
        task.cancel()
        _ = await task.result
    }
}

/// The wall-clock time a test gives a schedule, moved by the test.
final class MovableNow: Sendable {
    private let date: Mutex<Date>

    init(_ date: Date) { self.date = Mutex(date) }

    var value: Date { date.withLock { $0 } }

    func move(by seconds: TimeInterval) { date.withLock { $0 = $0.addingTimeInterval(seconds) } }
}

/// Polls `condition` on the wall clock for at most `timeout`.
func waitUntil(_ what: String, timeout: Duration = .seconds(30), _ condition: () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(20))
    }
    throw TestClockTimeout(description: "not within \(timeout): \(what)")
}
