import Foundation

/// A value under a lock that makes a waiting thread sleep at once (a plain pthread mutex, through
/// `NSLock`). Swift's `Mutex` spins before it sleeps, which on a machine with fewer cores than
/// busy threads burns the time the holder needs to finish: the connection pool's lock, taken by
/// every request twice, was a tenth of the machine that way.
public final class Locked<Value>: @unchecked Sendable {
    // `value` is touched only under `lock`.
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) { self.value = value }

    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
