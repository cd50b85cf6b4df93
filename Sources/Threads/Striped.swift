import Foundation

/// State split into stripes, each under a lock of its own (`Locked`). The HTTP threads all touch
/// the same few tables on every request (remembered tokens, rate buckets, bell pages, metrics);
/// under one lock they queue for it. Split by key, threads working for different people rarely meet.
public final class Striped<State>: Sendable {
    private final class Stripe: Sendable {
        let state: Locked<State>
        init(_ state: State) { self.state = Locked(state) }
    }

    private let stripes: [Stripe]

    public init(count: Int = 32, _ make: () -> State) {
        var stripes: [Stripe] = []
        for _ in 0..<max(1, count) { stripes.append(Stripe(make())) }
        self.stripes = stripes
    }

    public var count: Int { stripes.count }

    /// Runs `body` on the stripe of `key`.
    public func withLock<Key: Hashable, Result>(for key: Key, _ body: (inout State) -> Result) -> Result {
        var hasher = Hasher()
        hasher.combine(key)
        return stripes[Int(UInt(bitPattern: hasher.finalize()) % UInt(stripes.count))].state.withLock(body)
    }

    /// Runs `body` on the calling thread's stripe: for state that every request adds to under the
    /// same key (counters), read by going over every stripe.
    public func withThreadLock<Result>(_ body: (inout State) -> Result) -> Result {
        withLock(for: pthread_self(), body)
    }

    /// Runs `body` on every stripe in turn, each under its lock.
    public func forEach(_ body: (inout State) -> Void) {
        for stripe in stripes { stripe.state.withLock(body) }
    }
}
