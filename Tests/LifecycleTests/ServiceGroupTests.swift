import Lifecycle
import Testing
import Threads

#if canImport(Glibc)
    import Glibc
#endif

/// A service that records when it starts and stops, and can refuse to stop or fail.
private struct Recorder: Service {
    enum Behaviour: Sendable { case stopsWhenTold, ignoresCancellation(TestClock), fails }
    struct Failure: Error {}

    let name: String
    let journal: Locked<[String]>
    var behaviour = Behaviour.stopsWhenTold

    func run() async throws {
        journal.withLock { $0.append("start \(name)") }
        defer { journal.withLock { $0.append("stop \(name)") } }
        switch behaviour {
        case .stopsWhenTold:
            await waitUntilCancelled()
        case .ignoresCancellation(let clock):
            // Work that does not look at cancellation: it ends when the test's clock says so.
            await Task.detached { try? await clock.sleep(for: .seconds(3600)) }.value
        case .fails:
            throw Failure()
        }
    }
}

@Suite struct ServiceGroupTests {
    private func started(_ journal: Locked<[String]>, _ count: Int) async throws {
        for _ in 0..<5000 where journal.withLock({ $0.count }) < count { try await Task.sleep(for: .milliseconds(1)) }
    }

    @Test func membersStartInOrderAndStopInReverseOneAtATimeWithALogLineForEachStep() async throws {
        let journal = Locked<[String]>([])
        let log = RecordingLogHandler()
        let group = ServiceGroup(
            ["projector", "listener", "api"].map { ServiceGroup.Member($0, Recorder(name: $0, journal: journal)) }, signals: [],
            logger: Logger(label: "test", handler: log))
        let running = Task { try await group.run() }
        try await started(journal, 3)
        group.triggerShutdown()
        try await running.value
        let stops = journal.withLock { $0 }.filter { $0.hasPrefix("stop") }
        #expect(stops == ["stop api", "stop listener", "stop projector"])
        let messages = log.messages
        #expect(messages.contains("starting projector"))
        let steps = messages.drop { !$0.hasPrefix("stopping the roles") }
        #expect(Array(steps) == [
            "stopping the roles in order", "stopping api", "api stopped", "stopping listener", "listener stopped", "stopping projector",
            "projector stopped", "every role stopped",
        ])
    }

    @Test func aMemberThatOverrunsItsDeadlineIsLoggedAndTheOnesBeforeItStillStop() async throws {
        let journal = Locked<[String]>([])
        let log = RecordingLogHandler()
        let clock = TestClock()
        let group = ServiceGroup(
            [
                ServiceGroup.Member("projector", Recorder(name: "projector", journal: journal)),
                ServiceGroup.Member(
                    "stubborn", Recorder(name: "stubborn", journal: journal, behaviour: .ignoresCancellation(clock)), shutdownDeadline: .seconds(5)),
            ], signals: [], logger: Logger(label: "test", handler: log), clock: clock)
        let running = Task { try await group.run() }
        try await started(journal, 2)
        try await clock.waitForSleepers(1)  // the stubborn one's work
        group.triggerShutdown()
        try await clock.waitForSleepers(2)  // and now the group's deadline for it
        clock.advance(by: .seconds(5))
        try await running.value
        #expect(log.messages.contains("stubborn did not stop within 5.0 seconds; going on without it"))
        #expect(journal.withLock { $0 }.contains("stop projector"))
        clock.advance(by: .seconds(3600))
    }

    @Test func aMemberThatFailsStopsTheOthersAndTheGroupThrowsItsError() async throws {
        let journal = Locked<[String]>([])
        let group = ServiceGroup(
            [
                ServiceGroup.Member("projector", Recorder(name: "projector", journal: journal)),
                ServiceGroup.Member("broken", Recorder(name: "broken", journal: journal, behaviour: .fails)),
            ], signals: [], logger: .silent)
        await #expect(throws: Recorder.Failure.self) { try await group.run() }
        #expect(journal.withLock { $0 }.contains("stop projector"))
    }

    @Test func cancellingTheTaskThatRunsTheGroupStopsItInOrder() async throws {
        let journal = Locked<[String]>([])
        let group = ServiceGroup(
            ["first", "second"].map { ServiceGroup.Member($0, Recorder(name: $0, journal: journal)) }, signals: [], logger: .silent)
        let running = Task { try await group.run() }
        try await started(journal, 2)
        running.cancel()
        try await running.value
        #expect(journal.withLock { $0 }.filter { $0.hasPrefix("stop") } == ["stop second", "stop first"])
    }

    /// SIGUSR2 stands in for SIGTERM: the group takes the signal over, so the test process lives on.
    @Test func aShutdownSignalStopsTheGroup() async throws {
        let journal = Locked<[String]>([])
        let log = RecordingLogHandler()
        let group = ServiceGroup(
            [ServiceGroup.Member("api", Recorder(name: "api", journal: journal))], signals: [SIGUSR2], logger: Logger(label: "test", handler: log))
        let running = Task { try await group.run() }
        try await started(journal, 1)
        kill(getpid(), SIGUSR2)
        try await running.value
        #expect(log.messages.first { $0.hasPrefix("received") } == "received signal \(SIGUSR2): stopping the roles in order")
        #expect(journal.withLock { $0 } == ["start api", "stop api"])
    }
}
