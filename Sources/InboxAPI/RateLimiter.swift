import Encodings
import Foundation
import Threads

/// Requests per token, as token buckets: a person's token may burst to `personBurst` requests and
/// refills at `personPerSecond`; a guest's, more tightly. Over it: `429 too_many_requests` with
/// `Retry-After` (whole seconds until the next request would be let through).
public final class RateLimiter: Sendable {
    public struct Limits: Sendable {
        public var personPerSecond: Double
        public var personBurst: Double
        public var guestPerSecond: Double
        public var guestBurst: Double

        public init(personPerSecond: Double = 20, personBurst: Double = 100, guestPerSecond: Double = 2, guestBurst: Double = 20) {
            self.personPerSecond = personPerSecond
            self.personBurst = personBurst
            self.guestPerSecond = guestPerSecond
            self.guestBurst = guestBurst
        }
    }

    private struct Bucket {
        var tokens: Double
        var updated: ContinuousClock.Instant
    }

    private struct State {
        var buckets: [String: Bucket] = [:]
        var takes = 0
    }

    public let limits: Limits
    /// Buckets by key, in stripes so that requests of different people do not wait for each other.
    private let state = Striped<State>(count: 32) { State() }

    public init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Takes one request from the token's bucket, or throws the 429.
    func take(for token: AccessToken, now: ContinuousClock.Instant = .now) throws(APIError) {
        let (rate, burst) = token.isGuest ? (limits.guestPerSecond, limits.guestBurst) : (limits.personPerSecond, limits.personBurst)
        // A guest token belongs to nobody: its own id is its key.
        let key = token.isGuest ? "guest:\(token.id)" : "person:\(token.subject)"
        let wait = state.withLock(for: key) { state -> Double? in
            state.takes += 1
            if state.takes % 1_000 == 0 {
                // Forget buckets that have been full for a while, so the table stays small.
                state.buckets = state.buckets.filter { now - $0.value.updated < .seconds(600) }
            }
            var bucket = state.buckets[key] ?? Bucket(tokens: burst, updated: now)
            let elapsed = now - bucket.updated
            bucket.tokens = min(burst, bucket.tokens + elapsed.inSeconds * rate)
            bucket.updated = now
            defer { state.buckets[key] = bucket }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return (1 - bucket.tokens) / rate
        }
        if let wait {
            let seconds = max(1, Int(wait.rounded(.up)))
            throw APIError(
                status: 429, code: .tooManyRequests, detail: "Too many requests with this token; try again in \(seconds) s.",
                headers: [("Retry-After", String(seconds))])
        }
    }
}
