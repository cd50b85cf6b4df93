import Encodings

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Runs the roles a command asks for, and stops them in order.
///
/// The group watches its signals from the moment it is made (the signals' default action, ending
/// the process at once, is off from then on), so a process hands its signals over by making it.
///
/// The members start in the order given, each on a task of its own. The group stops them all when
/// one of the shutdown signals arrives (SIGTERM and SIGINT by default), when `triggerShutdown()` is
/// called, when the task running `run()` is cancelled, or when a member returns or throws before
/// it was told to stop. They stop in reverse order, one at a time: the member is cancelled (it stops
/// taking work and finishes what is in flight) and the group waits for it up to its deadline before
/// it goes on to the one before it. So `inbox run`, which starts the projectors before the API,
/// stops the API first, then the projectors, and its caller closes the pools and the database last.
/// Every step is one log line.
///
/// `run()` returns once every member has stopped (or overrun its deadline, which is logged), and
/// throws the first error a member threw.
public final class ServiceGroup: Sendable {
    public struct Member: Sendable {
        public var name: String
        public var service: any Service
        /// How long the group waits for the member to return once told to stop.
        public var shutdownDeadline: Duration

        public init(_ name: String, _ service: any Service, shutdownDeadline: Duration = .seconds(15)) {
            self.name = name
            self.service = service
            self.shutdownDeadline = shutdownDeadline
        }
    }

    private enum Event: Sendable {
        case finished(Int, Result<Void, any Error>)
        case signal(Int32)
        case shutdownRequested
        case deadline(Int)
    }

    public let members: [Member]
    private let watcher: SignalWatcher?
    private let logger: Logger
    private let clock: any Clock<Duration>
    private let events: AsyncStream<Event>
    private let continuation: AsyncStream<Event>.Continuation

    public init(
        _ members: [Member], signals: [Int32] = [SIGTERM, SIGINT], logger: Logger, clock: any Clock<Duration> = ContinuousClock()
    ) {
        self.members = members
        self.logger = logger
        self.clock = clock
        let (events, continuation) = AsyncStream<Event>.makeStream(of: Event.self)
        (self.events, self.continuation) = (events, continuation)
        // Watched from here on, so that a signal between making the group and running it is kept.
        watcher = signals.isEmpty ? nil : SignalWatcher(signals: signals) { number in continuation.yield(.signal(number)) }
    }

    deinit { watcher?.cancel() }

    /// Stops the group as a shutdown signal would.
    public func triggerShutdown() { continuation.yield(.shutdownRequested) }

    public func run() async throws {
        // The driver is not a child task: cancelling the caller must start an orderly stop, not
        // cut the stop itself short.
        let driver = Task { try await self.drive() }
        try await withTaskCancellationHandler {
            try await driver.value
        } onCancel: {
            continuation.yield(.shutdownRequested)
        }
    }

    /// What the group knows of its members as it runs them.
    private struct Progress {
        var tasks: [Task<Void, Never>] = []
        var finished: [Int: Result<Void, any Error>] = [:]
        var firstError: (any Error)?
        var toldOfRepeatedSignal = false
    }

    private func drive() async throws {
        var progress = Progress()
        for (index, member) in members.enumerated() {
            logger.info("starting \(member.name)", metadata: ["role": .string(member.name)])
            progress.tasks.append(Task { [continuation] in
                let result = await Result { try await member.service.run() }
                continuation.yield(.finished(index, result))
            })
        }
        var iterator = events.makeAsyncIterator()
        await untilAskedToStop(&iterator, &progress)
        for index in members.indices.reversed() where progress.finished[index] == nil {
            await stop(index, &iterator, &progress)
        }
        logger.info("every role stopped")
        continuation.finish()
        if let error = progress.firstError { throw error }
    }

    /// Until a signal, a request, or a member that ends by itself.
    private func untilAskedToStop(_ iterator: inout AsyncStream<Event>.Iterator, _ progress: inout Progress) async {
        while let event = await iterator.next() {
            switch event {
            case .signal(let number):
                logger.info("received \(Self.signalName(number)): stopping the roles in order", metadata: ["signal": .string(Self.signalName(number))])
                return
            case .shutdownRequested:
                logger.info("stopping the roles in order")
                return
            case .finished(let index, let result):
                progress.finished[index] = result
                let name = members[index].name
                if case .failure(let error) = result {
                    progress.firstError = progress.firstError ?? error
                    logger.error("\(name) failed: stopping the other roles", metadata: ["role": .string(name), "error": "\(error)"])
                } else {
                    logger.error("\(name) ended on its own: stopping the other roles", metadata: ["role": .string(name)])
                }
                return
            case .deadline:
                continue
            }
        }
    }

    /// Tells one member to stop and waits for it, at most its deadline.
    private func stop(_ index: Int, _ iterator: inout AsyncStream<Event>.Iterator, _ progress: inout Progress) async {
        let member = members[index]
        let started = ContinuousClock.now
        logger.info("stopping \(member.name)", metadata: ["role": .string(member.name)])
        progress.tasks[index].cancel()
        let timer = Task { [clock, continuation] in
            try await clock.sleep(for: member.shutdownDeadline)
            continuation.yield(.deadline(index))
        }
        defer { timer.cancel() }
        while let event = await iterator.next() {
            switch event {
            case .finished(let other, let result):
                progress.finished[other] = result
                if case .failure(let error) = result, !(error is CancellationError) {
                    progress.firstError = progress.firstError ?? error
                    logger.error("\(members[other].name) failed while stopping", metadata: ["role": .string(members[other].name), "error": "\(error)"])
                }
                if other == index {
                    let elapsed = ContinuousClock.now - started
                    logger.info("\(member.name) stopped", metadata: ["role": .string(member.name), "milliseconds": .int(elapsed.wholeMilliseconds)])
                    return
                }
            case .deadline(let other) where other == index:
                logger.error("\(member.name) did not stop within \(member.shutdownDeadline); going on without it", metadata: ["role": .string(member.name)])
                return
            case .signal(let number):
                // Said once: a burst of signals must not become a burst of lines.
                if !progress.toldOfRepeatedSignal {
                    logger.info("received \(Self.signalName(number)) again: already stopping", metadata: ["role": .string(member.name)])
                    progress.toldOfRepeatedSignal = true
                }
            case .shutdownRequested, .deadline:
                continue
            }
        }
    }

    static func signalName(_ number: Int32) -> String {
        switch number {
        case SIGTERM: "SIGTERM"
        case SIGINT: "SIGINT"
        case SIGHUP: "SIGHUP"
        case SIGQUIT: "SIGQUIT"
        default: "signal \(number)"
        }
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
