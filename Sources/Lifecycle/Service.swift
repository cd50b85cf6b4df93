#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A long-running role of the tier (a projector, the API, the bell cache's listener, …), shaped like
/// swift-service-lifecycle's `Service`.
///
/// `run()` works until its task is cancelled, which is how a `ServiceGroup` tells it to stop: it
/// then stops taking work, finishes what is in flight, releases what it holds (a lease, a
/// session) and returns. Returning or throwing before it was told to stop ends the whole group.
public protocol Service: Sendable {
    func run() async throws
}

/// Suspends until the calling task is cancelled, without a timer: for a service whose work runs
/// elsewhere (an HTTP server's event loops) and which only needs to learn when to stop.
public func waitUntilCancelled() async {
    let (stream, continuation) = AsyncStream<Never>.makeStream()
    // An AsyncStream's iteration ends when the iterating task is cancelled.
    for await _ in stream {}
    continuation.finish()
}
