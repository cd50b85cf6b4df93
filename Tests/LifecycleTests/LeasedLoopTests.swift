import EventLog
import InboxTesting
import Lifecycle
import PostgresClient
import Testing
import Threads

/// A work that counts its turns and waits for a NOTIFY or the poll interval after each.
struct CountingWork: LoopWork {
    struct State: Sendable {
        var begins = 0
        var steps = 0
        var heard: [String] = []
    }

    let progress: Locked<State>
    var failures: Locked<Int>? = nil
    var beginsOnTheSession = true

    func begin(_ state: inout State, on session: LeasedSession) async throws {
        // On the session, so a lease taken on a session now gone fails here too.
        if beginsOnTheSession { _ = try await session.run { connection in connection.backendPID } }
        state.begins += 1
        progress.withLock { [state] in $0 = state }
    }

    func step(_ state: inout State, on session: LeasedSession) async throws -> LoopStep {
        if let failures, failures.withLock({ count in
            count -= 1
            return count >= 0
        }) {
            throw PostgresError(.connectionLost, "the server went away (a test's failure)")
        }
        state.steps += 1
        progress.withLock { [state] in $0 = state }
        return .wait(nil)
    }

    func received(_ notifications: [PostgresNotification], state: inout State) {
        state.heard += notifications.map(\.payload)
        progress.withLock { [state] in $0 = state }
    }
}

func eventually(_ what: String, timeout: Duration = .seconds(20), _ condition: () throws -> Bool) async throws {
    let deadline = ContinuousClock.now + timeout
    while try !condition() {
        guard ContinuousClock.now < deadline else { throw TestClockTimeout(description: "timed out waiting until \(what)") }
        try await Task.sleep(for: .milliseconds(5))
    }
}

@Suite struct LeasedLoopTests {
    @Test func aNotificationWakesTheLoopBeforeThePollIntervalOfItsClock() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let progress = Locked(CountingWork.State())
        let clock = TestClock()
        let loop = LeasedLoop(
            name: "woken", work: CountingWork(progress: progress), configuration: db.configuration, channels: ["loop_test"],
            options: .init(pollInterval: .seconds(5)), clock: clock)
        let running = Task { try await loop.run(from: .init()) }
        defer { running.cancel() }
        try await clock.waitForSleepers(1)
        #expect(progress.withLock { $0.steps } == 1)
        try await db.client.execute("NOTIFY loop_test, 'hello'")
        try await eventually("the notification is heard") { progress.withLock { $0.steps } == 2 }
        #expect(progress.withLock { $0.heard } == ["hello"])
        // Without a notification, only the clock moving on wakes it.
        try await clock.waitForSleepers(1)
        #expect(progress.withLock { $0.steps } == 2)
        clock.advance(by: .seconds(5))
        try await eventually("the poll interval passed") { progress.withLock { $0.steps } == 3 }
    }

    @Test func aSecondLoopWaitsForTheLeaseAndTakesItWhenTheHolderStops() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let clock = TestClock()
        let events = Locked<[String]>([])
        func loop(_ name: String, _ progress: Locked<CountingWork.State>) -> LeasedLoop<CountingWork> {
            LeasedLoop(
                name: name, work: CountingWork(progress: progress), configuration: db.configuration, lease: Lease(lockClass: 77, key: "turns"),
                options: .init(pollInterval: .seconds(60), leaseRetry: .seconds(1)), clock: clock,
                observe: { event in
                    switch event {
                    case .waitingForLease: events.withLock { $0.append("\(name) waits") }
                    case .tookLease: events.withLock { $0.append("\(name) took") }
                    default: break
                    }
                })
        }
        let (first, second) = (Locked(CountingWork.State()), Locked(CountingWork.State()))
        let holder = Task { try await loop("first", first).run(from: .init()) }
        try await eventually("the first takes the lease") { first.withLock { $0.steps } == 1 }
        let waiter = Task { try await loop("second", second).run(from: .init()) }
        defer { waiter.cancel() }
        try await eventually("the second waits") { events.withLock { $0 }.contains("second waits") }
        holder.cancel()
        _ = await holder.result
        // The lease is free once the holder's run() has returned: one retry takes it.
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        try await eventually("the second takes over") { second.withLock { $0.steps } == 1 }
        #expect(events.withLock { $0 } == ["first took", "second waits", "second took"])
    }

    /// Its sessions killed under it, the loop opens new ones, takes its lease again, and begins anew.
    @Test func aLostSessionIsOpenedAgainAndTheLeaseTakenAgain() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let progress = Locked(CountingWork.State())
        let holders = Locked<[Int32]>([])
        let loop = LeasedLoop(
            name: "lost", work: CountingWork(progress: progress), configuration: db.configuration, lease: Lease(lockClass: 77, key: "lost"),
            channels: ["loop_test"], options: .init(pollInterval: .seconds(60), backoff: Backoff(initial: .milliseconds(10))),
            observe: { event in if case .tookLease(let pid) = event { holders.withLock { $0.append(pid) } } })
        let running = Task { try await loop.run(from: .init()) }
        defer { running.cancel() }
        try await eventually("the loop waits") { progress.withLock { $0.steps } == 1 }
        let killer = try db.connect()
        defer { killer.close() }
        try killer.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE 'inbox-lost%'")
        try await eventually("the loop begins again") { progress.withLock { $0.begins } == 2 }
        let pids = holders.withLock { $0 }
        #expect(pids.count == 2 && pids[0] != pids[1])
        // And it listens again: a notification still wakes it.
        let steps = progress.withLock { $0.steps }
        try await eventually("the loop listens again") {
            try killer.query("NOTIFY loop_test, 'after'")
            return progress.withLock { $0.heard }.contains("after") && progress.withLock { $0.steps } > steps
        }
    }

    /// No database needed: without a lease or channels, the loop opens no session of its own.
    @Test func transientFailuresAreRetriedAfterDoublingWaitsOnTheInjectedClock() async throws {
        let clock = TestClock()
        let progress = Locked(CountingWork.State())
        let delays = Locked<[Duration]>([])
        let loop = LeasedLoop(
            name: "flaky", work: CountingWork(progress: progress, failures: Locked(3), beginsOnTheSession: false),
            configuration: PostgresConfiguration(unixSocketDirectory: "/nonexistent", user: "nobody", database: "nothing"),
            options: .init(pollInterval: .seconds(60), backoff: Backoff(initial: .milliseconds(100), maximum: .seconds(1))), clock: clock,
            observe: { event in if case .retrying(_, let after) = event { delays.withLock { $0.append(after) } } })
        let running = Task { try await loop.run(from: .init()) }
        defer { running.cancel() }
        for expected in [Duration.milliseconds(100), .milliseconds(200), .milliseconds(400)] {
            try await clock.waitForSleepers(1)
            #expect(delays.withLock { $0.last } == expected)
            clock.advance(by: expected)
        }
        try await eventually("the step succeeds") { progress.withLock { $0.steps } == 1 }
        #expect(delays.withLock { $0 }.count == 3)
    }
}
