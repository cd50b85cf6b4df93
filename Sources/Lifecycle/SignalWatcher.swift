import Dispatch
import Threads

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Turns SIGINT/SIGTERM (or any signals) into a callback instead of the default immediate exit, so a
/// process can stop its work and clean up (stop the embedded PostgreSQL, say) before it exits.
///
/// Watchers stack: a signal goes to the newest watcher of it that is not cancelled, and once that
/// one is cancelled, to the one before. So a command can watch its signals while it sets up and
/// then hand them to a `ServiceGroup` by making the group, without a moment in which a signal
/// would end the process or go to both. (One dispatch source per signal for the whole process:
/// on Linux, libdispatch tells only one of two sources that watch the same signal.)
public final class SignalWatcher: Sendable {
    private let id: Int

    public init(signals: [Int32], handler: @escaping @Sendable (Int32) -> Void) {
        id = SignalRouter.shared.add(signals: Set(signals), handler: handler)
    }

    /// Stops watching; the signals stay ignored until the process exits.
    public func cancel() { SignalRouter.shared.remove(id) }

    deinit { cancel() }
}

/// The process's one dispatch source per watched signal, and the stack of watchers.
private final class SignalRouter: Sendable {
    static let shared = SignalRouter()

    private struct Watcher {
        let id: Int
        let signals: Set<Int32>
        let handler: @Sendable (Int32) -> Void
    }

    private struct State {
        var nextId = 0
        var watchers: [Watcher] = []
        var sources: [Int32: any DispatchSourceSignal] = [:]
    }

    private let state = Locked(State())

    func add(signals: Set<Int32>, handler: @escaping @Sendable (Int32) -> Void) -> Int {
        state.withLock { state in
            state.nextId += 1
            state.watchers.append(Watcher(id: state.nextId, signals: signals, handler: handler))
            for number in signals where state.sources[number] == nil {
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler { [self] in deliver(number) }
                source.resume()
                state.sources[number] = source
            }
            return state.nextId
        }
    }

    func remove(_ id: Int) {
        state.withLock { state in state.watchers.removeAll { $0.id == id } }
    }

    private func deliver(_ number: Int32) {
        let handler = state.withLock { state in state.watchers.last { $0.signals.contains(number) }?.handler }
        handler?(number)
    }
}
