/// A moment several parts of a process wait for together: each part says when it has arrived (a
/// server listening, say), and whoever waits goes on once every one of them has. For telling a
/// supervisor the process is ready (`sd_notify`'s `READY=1`) only when it can serve.
public final class Readiness: Sendable {
    public let parts: Int
    private let arrivals: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation

    public init(parts: Int) {
        self.parts = max(0, parts)
        (arrivals, continuation) = AsyncStream<Void>.makeStream(of: Void.self)
    }

    /// One part is ready.
    public func arrived() { continuation.yield(()) }

    /// Returns once every part has arrived (at once with none); for one waiter. Throws when cancelled first.
    public func wait() async throws {
        var count = 0
        var iterator = arrivals.makeAsyncIterator()
        while count < parts {
            guard await iterator.next() != nil else { break }
            try Task.checkCancellation()
            count += 1
        }
        try Task.checkCancellation()
    }
}
