import Foundation

/// A value every request reads and that seldom changes (the app version minimums), under a
/// readers-writer lock: readers do not wait for each other, only for a writer.
public final class ReadMostly<Value>: @unchecked Sendable {
    // The lock lives at a fixed address, as pthreads requires; `value` is touched only under it.
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>
    private var value: Value

    public init(_ value: Value) {
        lock = .allocate(capacity: 1)
        pthread_rwlock_init(lock, nil)
        self.value = value
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    public func read() -> Value {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return value
    }

    public func write(_ newValue: Value) {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        value = newValue
    }
}
