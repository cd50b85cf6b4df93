import Foundation

/// Runs blocking work (a process that must finish, a libpq call outside the pool) on a thread of its
/// own and awaits it, so it never occupies a thread of Swift's cooperative pool.
public enum BlockingThread {
    public static func run<T: Sendable>(
        name: String = "inbox-blocking", _ body: @escaping @Sendable () throws -> T
    ) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                Thread.current.name = name
                continuation.resume(with: Result { try body() })
            }
            thread.start()
        }
    }
}
