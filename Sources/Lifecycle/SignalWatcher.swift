import Dispatch

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Turns SIGINT/SIGTERM (or any signals) into a callback instead of the default immediate exit, so a
/// process can stop its work and clean up (stop the embedded PostgreSQL, say) before it exits.
public final class SignalWatcher: Sendable {
    // Immutable after init; a DispatchSource may be used from any thread.
    private nonisolated(unsafe) let sources: [any DispatchSourceSignal]

    public init(signals: [Int32], handler: @escaping @Sendable (Int32) -> Void) {
        sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { handler(number) }
            source.resume()
            return source
        }
    }

    /// Stops watching; the signals stay ignored until the process exits.
    public func cancel() {
        sources.forEach { $0.cancel() }
    }
}
