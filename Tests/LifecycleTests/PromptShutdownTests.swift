import EventLog
import InboxDomain
import InboxTesting
import Lifecycle
import PostgresClient
@testable import Projections
import Testing
import Threads

/// A role told to stop in the middle of its wait (a poll interval of a minute) stops within a
/// second, having freed its lease. Timed, so `make test` runs the `PromptShutdown` suites on their
/// own after the rest: with the whole suite on two cores, a thread hop can wait longer than the
/// role does.
@Suite(.serialized) struct PromptShutdownTests {
    /// Stopping must not wait out the poll interval (a minute here) nor the lease's session.
    @Test func aLeasedLoopStoppedInTheMiddleOfItsWaitStopsWithinASecond() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let progress = Locked(CountingWork.State())
        let loop = LeasedLoop(
            name: "waiting", work: CountingWork(progress: progress), configuration: db.configuration,
            lease: Lease(lockClass: 77, key: "waiting"), channels: ["loop_test"], options: .init(pollInterval: .seconds(60)))
        let running = Task { try await loop.run(from: .init()) }
        try await eventually("the loop waits") { progress.withLock { $0.steps } == 1 }
        try await Task.sleep(for: .milliseconds(50))
        let stopping = ContinuousClock.now
        running.cancel()
        _ = await running.result
        #expect(ContinuousClock.now - stopping < .seconds(1))
        // Its lease went with its session.
        let other = try db.connect()
        defer { other.close() }
        #expect(try other.query("SELECT pg_try_advisory_lock(77, hashtext('waiting'))").scalar(Bool.self))
    }

    /// With a poll interval of a minute, only an interruptible wait lets it stop at once.
    @Test func aProjectorToldToStopInTheMiddleOfItsWaitStopsWithinASecondAndFreesItsLease() async throws {
        try await withTestDatabase { db in
            let projector = Task {
                try await Projector(projection: PeopleProjection(), configuration: db.configuration, options: .init(pollInterval: .seconds(60))).run()
            }
            _ = try await db.store.append([try NewEvent(ShopMemberAdded(shopId: "s1", personId: "p1"))])
            try await db.waitUntilProjected([PeopleProjection()])
            try await Task.sleep(for: .milliseconds(100))
            let stopping = ContinuousClock.now
            projector.cancel()
            _ = await projector.result
            #expect(ContinuousClock.now - stopping < .seconds(1))
            let other = try db.connect()
            defer { other.close() }
            #expect(try other.query("SELECT pg_try_advisory_lock($1, hashtext('people'))", ProjectionLease.leaseLockClass).scalar(Bool.self))
        }
    }

    @Test func aSubscriptionStoppedInTheMiddleOfItsWaitStopsWithinASecond() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        let caughtUp = Locked(false)
        let following = Task {
            try await db.store.follow(after: .start, options: .init(pollInterval: .seconds(60))) { _ in caughtUp.withLock { $0 = true } }
        }
        _ = try await db.store.append([try NewEvent(ShopMemberAdded(shopId: "s1", personId: "p1"))])
        try await eventually("the subscriber read the event") { caughtUp.withLock { $0 } }
        try await Task.sleep(for: .milliseconds(100))
        let stopping = ContinuousClock.now
        following.cancel()
        _ = await following.result
        #expect(ContinuousClock.now - stopping < .seconds(1))
    }
}
