import Foundation

/// Runs async work from a thread that may block (an HTTP worker thread) and waits for it. Never
/// call it from Swift's cooperative pool: it would hold a pool thread while the work needs one.
public enum Blocking {
    private final class Box<T>: @unchecked Sendable {
        var result: Result<T, any Error>?
    }

    public static func run<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
        let semaphore = DispatchSemaphore(value: 0)
        let box = Box<T>()
        Task {
            do { box.result = .success(try await body()) } catch { box.result = .failure(error) }
            semaphore.signal()
        }
        semaphore.wait()
        return try box.result!.get()
    }
}
