import Threads

/// A clock that moves only when told to, for tests of anything timed: a service handed this clock
/// sleeps until the test calls `advance(by:)` past its deadline, so a test of a poll interval or a
/// backoff neither waits it out on the wall clock nor races it.
public final class TestClock: Clock, Sendable {
    public typealias Duration = Swift.Duration

    public struct Instant: InstantProtocol, Sendable {
        public var offset: Duration

        public init(offset: Duration) { self.offset = offset }

        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private struct Sleeper {
        let deadline: Instant
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var nextId = 0
        var sleepers: [Int: Sleeper] = [:]
    }

    private let state = Locked(State())

    public init() {}

    public var now: Instant { state.withLock { $0.now } }
    public var minimumResolution: Duration { .zero }

    /// How many sleeps are waiting for the clock to move.
    public var sleepers: Int { state.withLock { $0.sleepers.count } }

    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLock { state in
            state.nextId += 1
            return state.nextId
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resumeNow: Result<Void, any Error>? = state.withLock { state in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if deadline <= state.now { return .success(()) }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return nil
                }
                if let resumeNow { continuation.resume(with: resumeNow) }
            }
        } onCancel: {
            let cancelled = state.withLock { $0.sleepers.removeValue(forKey: id) }
            cancelled?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the clock on and wakes every sleep whose deadline it reached.
    public func advance(by duration: Duration) {
        let due = state.withLock { state -> [Sleeper] in
            state.now = state.now.advanced(by: duration)
            let now = state.now
            let due = state.sleepers.filter { $0.value.deadline <= now }
            for id in due.keys { state.sleepers[id] = nil }
            return due.sorted { $0.value.deadline < $1.value.deadline }.map(\.value)
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// Waits (on the wall clock, at most `timeout`) until at least `count` sleeps wait on this
    /// clock: the point at which a test knows the code under test has reached its wait.
    public func waitForSleepers(_ count: Int = 1, timeout: Duration = .seconds(30)) async throws {
        let deadline = ContinuousClock.now + timeout
        while sleepers < count {
            guard ContinuousClock.now < deadline else {
                throw TestClockTimeout(description: "no \(count) sleeper(s) on the test clock within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(2))
        }
    }
}

public struct TestClockTimeout: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}
