import Foundation
import Synchronization

/// State split into stripes, each under a lock of its own. The HTTP workers all touch the same few
/// tables on every request (remembered tokens, rate buckets, bell pages, metrics); under one lock
/// they queue for it (and Swift's `Mutex` spins while it waits, which on two cores is time taken
/// from the thread holding it). Split by key, threads working for different people rarely meet.
final class Striped<State: Sendable>: Sendable {
    private final class Stripe: Sendable {
        let state: Mutex<State>
        init(_ state: State) { self.state = Mutex(state) }
    }

    private let stripes: [Stripe]

    init(count: Int = 32, _ make: () -> State) {
        var stripes: [Stripe] = []
        for _ in 0..<max(1, count) { stripes.append(Stripe(make())) }
        self.stripes = stripes
    }

    var count: Int { stripes.count }

    /// Runs `body` on the stripe of `key`.
    func withLock<Key: Hashable, Result: Sendable>(for key: Key, _ body: (inout State) -> Result) -> Result {
        var hasher = Hasher()
        hasher.combine(key)
        return stripes[Int(UInt(bitPattern: hasher.finalize()) % UInt(stripes.count))].state.withLock { body(&$0) }
    }

    /// Runs `body` on the calling thread's stripe: for state that every request adds to under the
    /// same key (counters), read by going over every stripe.
    func withThreadLock<Result: Sendable>(_ body: (inout State) -> Result) -> Result {
        withLock(for: UInt(bitPattern: Int(bitPattern: UInt(pthread_self()))), body)
    }

    /// Runs `body` on every stripe in turn, each under its lock.
    func forEach(_ body: (inout State) -> Void) {
        for stripe in stripes { stripe.state.withLock { body(&$0) } }
    }
}

/// A value every request reads and that seldom changes (the app version minimums), under a
/// readers-writer lock: readers do not wait for each other, only for a writer.
final class ReadMostly<Value: Sendable>: @unchecked Sendable {
    // The lock lives at a fixed address, as pthreads requires; `value` is touched only under it.
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>
    private var value: Value

    init(_ value: Value) {
        lock = .allocate(capacity: 1)
        pthread_rwlock_init(lock, nil)
        self.value = value
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    func read() -> Value {
        pthread_rwlock_rdlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        return value
    }

    func write(_ newValue: Value) {
        pthread_rwlock_wrlock(lock)
        defer { pthread_rwlock_unlock(lock) }
        value = newValue
    }
}
