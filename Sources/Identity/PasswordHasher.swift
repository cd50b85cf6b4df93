import Foundation
import PasswordHashing

/// Hashes and checks passwords with Argon2id at the configured cost, a few at a time.
///
/// Guarantees:
/// - at most `concurrency` hashes run at once, so memory stays under `concurrency × memoryKiB`
///   whatever the number of requests; a request that cannot start its hash within `queueTimeout`
///   is answered `503 temporarily_unavailable` rather than waiting without end;
/// - checking a password against no account (an unknown address, an account without a password)
///   costs one hash all the same, against a hash of a random password made at start with the
///   current cost: the answer takes as long as for a wrong password of a real account.
public final class PasswordHasher: Sendable {
    public let cost: Argon2Cost
    public let concurrency: Int
    public let queueTimeout: Duration
    private let slots: DispatchSemaphore
    /// The hash a password is checked against when there is no account to check it against.
    private let dummyHash: String

    public init(cost: Argon2Cost, concurrency: Int, queueTimeout: Duration = .seconds(10)) throws {
        self.cost = cost
        self.concurrency = max(1, concurrency)
        self.queueTimeout = queueTimeout
        slots = DispatchSemaphore(value: max(1, concurrency))
        dummyHash = try Argon2id.hash(OpaqueSecret.generate().text, cost: cost)
    }

    /// The PHC string of `password` at the current cost.
    public func hash(_ password: String) throws(OAuthError) -> String {
        try withSlot { () throws(OAuthError) -> String in
            do {
                return try Argon2id.hash(password, cost: cost)
            } catch {
                throw OAuthError(500, .serverError, "The password could not be hashed.", cause: "\(error)")
            }
        }
    }

    /// Whether `password` is the one `stored` was made from; with no `stored` hash, a check against
    /// the dummy that takes as long and is always false.
    public func verify(_ password: String, against stored: String?) throws(OAuthError) -> Bool {
        try withSlot { () throws(OAuthError) -> Bool in
            let matches = Argon2id.verify(password, against: stored ?? dummyHash)
            return stored != nil && matches
        }
    }

    /// Whether `stored` was made at another cost than the current one (it is rehashed at the next
    /// sign-in, when the password is at hand).
    public func needsRehash(_ stored: String) -> Bool { Argon2id.cost(of: stored) != cost }

    private func withSlot<T>(_ body: () throws(OAuthError) -> T) throws(OAuthError) -> T {
        let nanoseconds = queueTimeout.components.seconds * 1_000_000_000 + queueTimeout.components.attoseconds / 1_000_000_000
        guard slots.wait(timeout: .now() + .nanoseconds(Int(nanoseconds))) == .success else {
            throw OAuthError(
                503, .temporarilyUnavailable, "Too many sign-ins at once; try again in a moment.", headers: [("Retry-After", "1")],
                cause: "no password hashing slot within \(queueTimeout)")
        }
        defer { slots.signal() }
        return try body()
    }
}
