import Encodings
import Foundation
import InboxDomain
import Lifecycle
import PlantedSlowdown
import PostgresClient
import NotificationOutbox
import PushProtocol
import Threads

/// The push fan-out (`inbox fanout`, and part of `inbox run`): decides outbox entries into
/// deliveries, claims due deliveries, renders each in its registration's language, hands them to
/// the transport many at a time, and records every answer. Several `workers` loops run at once,
/// each on its own session, and several processes may too: claims (`FOR UPDATE SKIP LOCKED`, then
/// `claimFor`) keep them apart, and a process that dies leaves its claims to the others.
///
/// What each answer does (docs/fanout.md): delivered rows are deleted and counted; a dead
/// registration is deleted on the spot; 429, 5xx and unreachable platforms are retried after
/// `Retry-After` or a doubling backoff until the push's deadline, then dropped and counted; a
/// permanent refusal is dropped, counted and logged, and the registration kept.
public struct FanoutSender: Service {
    public struct Options: Sendable {
        /// Deliveries claimed (and outbox entries decided) per step of a worker.
        public var batchSize: Int
        /// Loops sending at once, each with its own session.
        public var workers: Int
        public var pollInterval: Duration
        /// Names this process in `push_provider_tokens`.
        public var node: String

        public init(batchSize: Int = 500, workers: Int = 4, pollInterval: Duration = .seconds(1), node: String = ProcessInfo.processInfo.hostName) {
            self.batchSize = max(1, batchSize)
            self.workers = max(1, workers)
            self.pollInterval = pollInterval
            self.node = node
        }
    }

    let configuration: PostgresConfiguration
    let store: FanoutStore
    let transport: any PushTransport
    let options: Options
    let now: @Sendable () -> Date
    let clock: any Clock<Duration>
    let logger: Logger

    /// `now` tells the time of decisions, deadlines and retries (the wall clock by default), `clock`
    /// paces the loops: tests move them instead of waiting.
    public init(
        configuration: PostgresConfiguration, store: FanoutStore, transport: any PushTransport, options: Options = Options(),
        now: @escaping @Sendable () -> Date = { Date() }, clock: any Clock<Duration> = ContinuousClock(), logger: Logger
    ) {
        self.configuration = configuration
        self.store = store
        self.transport = transport
        self.options = options
        self.now = now
        self.clock = clock
        self.logger = logger.with(["role": "fanout"])
    }

    /// Distinct statements each worker's session keeps prepared: a batch runs the same dozen or so,
    /// so PostgreSQL parses and plans each once per session rather than once per batch.
    public static let preparedStatements = 64

    /// Transient database errors, and a read model whose tables its projector has not made yet
    /// (a fan-out started before any projector on a new database): both pass.
    static func isRetryable(_ error: any Error) -> Bool {
        guard let error = error as? PostgresError else { return false }
        return error.isTransient || error.sqlState == .undefinedTable
    }

    public func run() async throws {
        defer { transport.shutdown() }
        logger.info("fan-out started", metadata: ["workers": .int(options.workers), "batch": .int(options.batchSize)])
        let loops = (1...options.workers).map { worker in
            LeasedLoop(
                name: "fanout-\(worker)",
                work: FanoutWork(store: store, transport: transport, batchSize: options.batchSize, node: options.node, now: now, logger: logger),
                configuration: configuration.withPreparedStatements(Self.preparedStatements), channels: [NotificationOutbox.channel],
                options: LeasedLoop<FanoutWork>.Options(pollInterval: options.pollInterval), clock: clock, logger: logger,
                isRetryable: Self.isRetryable, appendsEvents: false)
        }
        try await LeasedLoop.runSideBySide(loops, from: FanoutWork.State(), logger: logger, stopped: "the fan-out stopped")
    }
}

/// One worker's turn: decide a batch, claim a batch, send it, record the answers as they arrive.
struct FanoutWork: LoopWork {
    /// Answers recorded together without waiting for more.
    static let gathered = 512
    /// How long fewer answers wait for others before they are recorded.
    static let gathering: Duration = .milliseconds(10)

    struct State: Sendable {
        var recordedTokens: [String: Date] = [:]
    }

    let store: FanoutStore
    let transport: any PushTransport
    let batchSize: Int
    let node: String
    let now: @Sendable () -> Date
    let logger: Logger

    func begin(_ state: inout State, on session: LeasedSession) async throws {}

    func step(_ state: inout State, on session: LeasedSession) async throws -> LoopStep {
        let store = store
        let batchSize = batchSize
        let now = now()
        // A batch a dead fan-out left behind first, then new entries: two transactions, one hop.
        let (takenOver, decided) = try await session.run { connection in
            (try store.takeOver(now: now, on: connection), try store.decide(limit: batchSize, now: now, on: connection))
        }
        for skipped in takenOver.otherApps + decided.otherApps {
            logger.info(
                "skipped a registration of another app (this server is not production)",
                metadata: ["outbox": .int(skipped.outboxId), "device": .string(skipped.deviceId.uuidString), "appId": .string(skipped.appId ?? "(none)")])
        }
        // What was just decided is held by this fan-out; room left goes to retries.
        var claimed = takenOver.claimed + decided.claimed
        if claimed.count < batchSize {
            let room = batchSize - claimed.count
            claimed += try await session.run { try store.claim(limit: room, on: $0) }
        }
        let reclaimed = claimed.count { $0.reclaimed }
        if reclaimed > 0 {
            logger.warning(
                "took over pushes claimed by a fan-out that stopped before recording them: each may reach its phone twice",
                metadata: ["pushes": .int(reclaimed)])
        }
        if !claimed.isEmpty {
            let lost = try await sendAndRecord(claimed, on: session)
            if !lost.isEmpty {
                logger.warning(
                    "sent a batch after its claim ran out and another fan-out took it over: its pushes may reach their phones twice",
                    metadata: ["batches": .string(lost.map { "\($0.id)" }.joined(separator: ","))])
            }
        }
        let tokens = transport.providerTokenIssuedAt()
        if tokens != state.recordedTokens {
            let node = node
            try await session.run { try store.recordProviderTokens(tokens, node: node, on: $0) }
            state.recordedTokens = tokens
        }
        return decided.entries == batchSize || takenOver.batch != nil || claimed.count >= batchSize ? .more : .wait(nil)
    }

    /// Renders and sends `claimed`, and records each answer as it arrives: whatever has come in
    /// is recorded in one transaction while the rest is on its way, so that a fan-out that dies
    /// leaves to be sent again only what had not been answered yet. A batch row goes with its
    /// last answer. Returns the batches that were no longer this fan-out's when recorded.
    func sendAndRecord(_ claimed: [FanoutStore.Claimed], on session: LeasedSession) async throws -> [FanoutStore.Batch] {
        let store = store
        Planted.spend(.fanout, units: claimed.count)
        let prepared = prepare(claimed)
        var ready = prepared.ready
        let outgoing = prepared.outgoing, slots = prepared.slots
        // Answers still to come per batch (by id: a send holds one or two batches).
        var unanswered: [Int64: Int] = [:]
        for push in claimed { if let batch = push.batch { unanswered[batch.id, default: 0] += 1 } }
        let inbox = AnswerInbox()
        let transport = transport
        let sending = Task {
            let started = ContinuousClock.now
            if !outgoing.isEmpty {
                await transport.send(outgoing) { slot, result in
                    var timed = result
                    timed.latency = .now - started
                    inbox.add(slot, timed)
                }
            }
            inbox.finish()
        }
        var lost: [FanoutStore.Batch] = []
        while true {
            // A moment for the answers of the same wave to join (up to `gathered` of them, or the
            // send's end), so that recording costs a statement per wave rather than per answer; a
            // crash can send again this moment's answers besides what was in flight.
            let answers = await inbox.next(gathering: Self.gathering, upTo: Self.gathered)
            let answeredAt = now()
            // How long each provider took, counted with the answers' outcomes.
            var latencies: [String: Int] = [:]
            for (slot, result) in answers ?? [] {
                let push = claimed[slots[slot]]
                ready.append((push, resolution(push, result, at: answeredAt)))
                if !result.logged, let latency = result.latency {
                    PushLatency.count(latency.inSeconds, platform: outgoing[slot].platform, into: &latencies)
                }
            }
            var finishing: [FanoutStore.Batch] = []
            for (push, _) in ready {
                guard let batch = push.batch else { continue }
                unanswered[batch.id, default: 0] -= 1
                if unanswered[batch.id] == 0 { finishing.append(batch) }
            }
            if !ready.isEmpty || !finishing.isEmpty {
                let resolutions = ready, finished = finishing, counted = latencies
                lost += try await session.run { try store.record(resolutions, finishing: finished, counting: counted, on: $0) }
                ready = []
            }
            if answers == nil { break }
        }
        await sending.value
        return lost
    }

    /// The resolutions known before sending (a registration gone, a deadline passed) and the
    /// pushes to send, each with the index of its claimed push.
    func prepare(
        _ claimed: [FanoutStore.Claimed]
    ) -> (ready: [(claimed: FanoutStore.Claimed, resolution: FanoutStore.Resolution)], outgoing: [OutgoingPush], slots: [Int]) {
        let now = now()
        var ready: [(claimed: FanoutStore.Claimed, resolution: FanoutStore.Resolution)] = []
        var outgoing: [OutgoingPush] = []
        var slots: [Int] = []
        outgoing.reserveCapacity(claimed.count)
        for (index, push) in claimed.enumerated() {
            guard let device = push.device else {
                ready.append((push, .skip(reason: PushSkip.deviceGone.name)))
                continue
            }
            if now > push.deadline {
                ready.append((push, .drop(reason: "deadline")))
                continue
            }
            let content = PushRenderer.render(
                push.notification, language: Language(locale: device.locale), badge: device.platform == .ios ? push.unread : nil)
            outgoing.append(
                OutgoingPush(
                    id: push.pushId, platform: device.platform, token: device.token, appId: device.appId, apnsEnvironment: device.apnsEnvironment,
                    content: content))
            slots.append(index)
        }
        return (ready, outgoing, slots)
    }

    /// What to record for `push` after the platform's `result`.
    func resolution(_ push: FanoutStore.Claimed, _ result: PushResult, at answered: Date) -> FanoutStore.Resolution {
        let platform = push.device!.platform
        let resolution: FanoutStore.Resolution
        switch result.outcome {
        case .delivered:
            resolution = .delivered(platform, learned: result.learnedEnvironment, logged: result.logged)
        case .unregistered(let reason):
            resolution = .deleteRegistration(reason: reason)
        case .badDeviceToken:
            resolution = .deleteRegistration(reason: "BadDeviceToken")
        case .expiredProviderToken:
            resolution = Self.retry(push, reason: "ExpiredProviderToken", after: nil, now: answered)
        case .retry(let reason, let after):
            resolution = Self.retry(push, reason: reason, after: after, now: answered)
        case .permanent(let reason):
            resolution = .drop(reason: reason)
        }
        switch resolution {
        case .deleteRegistration(let reason):
            logger.info("deleted a dead registration", metadata: ["device": .string(push.deviceId.uuidString), "platform": .string(platform.rawValue), "reason": .string(reason)])
        case .drop(let reason):
            logger.warning(
                "gave up a push",
                metadata: ["device": .string(push.deviceId.uuidString), "platform": .string(platform.rawValue), "reason": .string(reason), "attempts": .int(push.attempts)])
        default:
            break
        }
        return resolution
    }

    /// Again after `after` (the platform's `Retry-After`) or a doubling backoff (1 s, 2 s, … 5 min),
    /// unless that is past the deadline: then the push is given up.
    static func retry(_ delivery: FanoutStore.Claimed, reason: String, after: Duration?, now: Date) -> FanoutStore.Resolution {
        let backoff = min(300.0, pow(2.0, Double(max(0, delivery.attempts - 1))))
        let wait = after.map { max($0.inSeconds, 0) } ?? backoff
        let at = now.addingTimeInterval(wait)
        if at > delivery.deadline { return .drop(reason: "deadline:" + reason) }
        return .retry(at: at, reason: reason)
    }
}

/// The answers of one send, handed from the transport's threads to the worker that records them.
final class AnswerInbox: Sendable {
    private struct State {
        var answers: [(Int, PushResult)] = []
        var finished = false
        /// The time to gather of the `gathering`-th call of `next` ran out.
        var poked = false
        var gathering = 0
        /// The worker waiting, and how many answers it waits for.
        var waiter: (continuation: CheckedContinuation<Void, Never>, answers: Int)?

        /// Takes the waiter if what it waits for is there.
        mutating func wakeable() -> CheckedContinuation<Void, Never>? {
            guard let waiter, finished || poked || answers.count >= waiter.answers else { return nil }
            self.waiter = nil
            return waiter.continuation
        }
    }

    private let state = Locked(State())

    func add(_ slot: Int, _ result: PushResult) {
        state.withLock { state in
            state.answers.append((slot, result))
            return state.wakeable()
        }?.resume()
    }

    /// Every answer has been added.
    func finish() {
        state.withLock { state in
            state.finished = true
            return state.wakeable()
        }?.resume()
    }

    private func poke(_ gathering: Int) {
        state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.gathering == gathering else { return nil }
            state.poked = true
            return state.wakeable()
        }?.resume()
    }

    /// Waits until `answers` answers are there, the send finished, or the time to gather ran out.
    private func wait(for answers: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            state.withLock { state in
                state.waiter = (continuation, answers)
                return state.wakeable()
            }?.resume()
        }
    }

    /// The answers added since the last call, once there is one and then for up to `window` more
    /// while fewer than `limit` are there and the send goes on; nil once every answer was taken
    /// and the send finished.
    func next(gathering window: Duration, upTo limit: Int) async -> [(Int, PushResult)]? {
        await wait(for: 1)
        let gathering: Int? = state.withLock { state in
            if state.finished || state.answers.count >= limit { return nil }
            state.gathering += 1
            state.poked = false
            return state.gathering
        }
        if let gathering {
            let timer = Task {
                guard (try? await Task.sleep(for: window)) != nil else { return }
                self.poke(gathering)
            }
            await wait(for: limit)
            timer.cancel()
        }
        return state.withLock { state in
            state.poked = false
            if state.answers.isEmpty { return state.finished ? nil : [] }
            defer { state.answers = [] }
            return state.answers
        }
    }
}
