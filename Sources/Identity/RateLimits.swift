import Crypto
import Foundation
import PostgresClient
import Threads

/// The sign-in's rate limits: token buckets in PostgreSQL (`identity_rate_limits`), so that every
/// identity node counts against the same limit (an attacker spreading guesses over nodes gains
/// nothing). One statement per bucket, on the request's connection.
///
/// A refused attempt takes nothing from its bucket: an attacker who keeps hammering is told to
/// wait until the bucket refills (`Retry-After`), no longer. Buckets are keyed by a digest of what
/// they count (`address:203.0.113.7`, `account:anna@example.com`), so the table holds no client
/// address nor any e-mail address that was typed.
public struct RateLimits: Sendable {
    public enum Counted: Sendable {
        case address(String)
        case account(String)
        /// An account's attempts from an installation or address that signed in to it before
        /// (`TrustedSignIns`): a budget of their own.
        case trusted(String)

        var text: String {
            switch self {
            case .address(let address): "address:\(address)"
            case .account(let account): "account:\(account)"
            case .trusted(let key): "trusted:\(key)"
            }
        }
    }

    public init() {}

    /// Takes one attempt of `kind` for `counted` within `limit`, or throws `429 too_many_requests`
    /// with the whole seconds until the next attempt would be let through.
    public func take(_ kind: String, _ counted: Counted, limit: AttemptLimit, now: Date, on connection: PostgresConnection) throws {
        let key = Self.digest("\(kind)|\(counted.text)")
        // The bucket as refilled since it was last touched; one taken when there is one.
        let refill = "least($2::float8, bucket.tokens + greatest(0, extract(epoch FROM ($4::timestamptz - bucket.updated_at))::float8) * $3::float8)"
        let row = try connection.query(
            """
            INSERT INTO identity_rate_limits AS bucket (key, tokens, updated_at) VALUES ($1, $2::float8 - 1, $4::timestamptz)
            ON CONFLICT (key) DO UPDATE SET
                tokens = \(refill) - CASE WHEN \(refill) >= 1 THEN 1 ELSE 0 END,
                refused = \(refill) < 1,
                updated_at = greatest(bucket.updated_at, $4::timestamptz)
            RETURNING tokens, refused
            """, key, limit.count, limit.perSecond, now
        ).first
        guard let row, try row.decode(Bool.self, "refused") else { return }
        let tokens = try row.decode(Double.self, "tokens")
        let wait = (1 - tokens) / limit.perSecond
        throw OAuthError.tooManyRequests(retryAfter: max(1, Int(wait.rounded(.up))))
    }

    /// What the identity role's tables keep instead of an address, an e-mail address or a token:
    /// its SHA-256 in base64.
    static func digest(_ text: String) -> String {
        Data(SHA256.digest(Array(text.utf8))).base64EncodedString()
    }

    /// Forgets buckets untouched for a day: every limit has refilled long before.
    public static func purge(before: Date, on connection: PostgresConnection) throws {
        _ = try connection.query("DELETE FROM identity_rate_limits WHERE updated_at < $1::timestamptz", before)
    }
}

/// The limits that only bound load (guest tokens, refreshes): token buckets in this process's
/// memory, as the API's own rate limiter keeps them, so that a guest token costs no write to the
/// database. Per node: behind a balancer of N identity nodes, one address may get up to N times
/// the limit, which for these two is no risk (a guest token opens only what everybody may read; a
/// refresh token cannot be guessed). The sign-in's attempts, which guard accounts, are counted in
/// PostgreSQL by `RateLimits` instead.
///
/// Bounded memory: each of 32 stripes forgets its buckets idle for longer than a day every 1,000
/// takes, and all of them when it holds more than 20,000 (about 2 MB each at most).
public final class LocalRateLimits: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: Date
    }

    private struct Stripe {
        var buckets: [String: Bucket] = [:]
        var takes = 0
    }

    static let maximumPerStripe = 20_000
    private let stripes = Striped<Stripe>(count: 32) { Stripe() }

    public init() {}

    /// Takes one request of `kind` for `address` within `limit`, or throws `429 too_many_requests`.
    public func take(_ kind: String, address: String, limit: AttemptLimit, now: Date) throws(OAuthError) {
        let key = "\(kind)|\(address)"
        let wait = stripes.withLock(for: key) { stripe -> Double? in
            stripe.takes += 1
            if stripe.takes % 1_000 == 0 { stripe.buckets = stripe.buckets.filter { now.timeIntervalSince($0.value.updated) < 86_400 } }
            if stripe.buckets.count >= Self.maximumPerStripe { stripe.buckets.removeAll(keepingCapacity: true) }
            var bucket = stripe.buckets[key] ?? Bucket(tokens: limit.count, updated: now)
            bucket.tokens = min(limit.count, bucket.tokens + max(0, now.timeIntervalSince(bucket.updated)) * limit.perSecond)
            bucket.updated = max(bucket.updated, now)
            defer { stripe.buckets[key] = bucket }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return (1 - bucket.tokens) / limit.perSecond
        }
        if let wait { throw OAuthError.tooManyRequests(retryAfter: max(1, Int(wait.rounded(.up)))) }
    }
}

extension RateLimits {
    /// One attempt of `kind` against `personId`'s account limit, on a connection of `client`'s: past
    /// it the API's `429` with `Retry-After`, `tooMany` saying what was tried too often.
    func takeForAccount(_ kind: String, _ personId: String, limit: AttemptLimit, now: Date, client: PostgresClient, tooMany: String) throws {
        try SecondFactorRoutes.limited(tooMany) {
            try client.withConnectionBlocking { connection in try take(kind, .account(personId), limit: limit, now: now, on: connection) }
        }
    }
}

/// Wrong passwords per account and hour (`identity_failed_sign_ins`): at the fifth within an hour
/// the person is told (`SignInAttemptsFailed`), at most once an hour. Counted by a digest of the
/// address typed, whether or not it has an account, so a wrong password costs the same work either
/// way.
public enum FailedSignIns {
    static let threshold = 5
    static let window: TimeInterval = 3600

    /// Counts a wrong password for `email`; the failures of this hour when the person is to be told
    /// now (the fifth or later, nobody told within the hour), else nil.
    static func count(email: String, now: Date, on connection: PostgresConnection) throws -> Int? {
        let key = RateLimits.digest("failed|\(email.lowercased())")
        let hourAgo = now.addingTimeInterval(-window)
        guard let row = try connection.query(
            """
            INSERT INTO identity_failed_sign_ins AS f (key, window_started_at, failures) VALUES ($1, $2::timestamptz, 1)
            ON CONFLICT (key) DO UPDATE SET
                failures = CASE WHEN f.window_started_at <= $3::timestamptz THEN 1 ELSE f.failures + 1 END,
                window_started_at = CASE WHEN f.window_started_at <= $3::timestamptz THEN $2::timestamptz ELSE f.window_started_at END
            RETURNING failures, notified_at
            """, key, now, hourAgo
        ).first else { return nil }
        let failures = try row.decode(Int32.self, "failures")
        guard failures >= threshold else { return nil }
        if let notified = try row.decode(Date?.self, "notified_at"), notified > hourAgo { return nil }
        _ = try connection.query("UPDATE identity_failed_sign_ins SET notified_at = $2::timestamptz WHERE key = $1", key, now)
        return Int(failures)
    }

    /// Forgets the counts of hours long past.
    public static func purge(before now: Date, on connection: PostgresConnection) throws {
        _ = try connection.query("DELETE FROM identity_failed_sign_ins WHERE window_started_at < $1::timestamptz", now.addingTimeInterval(-86_400))
    }
}

/// Where an account was signed in to before (`identity_trusted_sign_ins`): an app installation (the
/// password grant's `installation_id`) or an address, for 90 days after its last sign-in. An
/// attempt on the account from one of them takes from a bucket of its own, at the account's limit,
/// not from the account's shared one: a guesser elsewhere who spends the account's budget does not
/// lock its owner out (OWASP's "device cookies"). Keyed by a digest of the account's e-mail address
/// and the installation or address, so the table holds neither.
public enum TrustedSignIns {
    static let lifetime: TimeInterval = 90 * 86_400

    /// The keys an attempt on `email` could be trusted by: its installation's first, then its address's.
    static func keys(email: String, installation: String?, address: String) -> [String] {
        ((installation.map { ["installation:\($0)"] } ?? []) + ["address:\(address)"]).map { what in
            RateLimits.digest("trusted|\(email.lowercased())|\(what)")
        }
    }

    /// The first of `keys` that signed in within the lifetime, or nil.
    static func trusted(_ keys: [String], now: Date, on connection: PostgresConnection) throws -> String? {
        let found = Set(
            try connection.query(
                "SELECT key FROM identity_trusted_sign_ins WHERE key = ANY($1::text[]) AND last_used > $2::timestamptz", keys,
                now.addingTimeInterval(-lifetime)
            ).map { try $0.decode(String.self, "key") })
        return keys.first(where: found.contains)
    }

    /// Remembers a sign-in from `keys`.
    static func remember(_ keys: [String], now: Date, on connection: PostgresConnection) throws {
        _ = try connection.query(
            """
            INSERT INTO identity_trusted_sign_ins (key, last_used) SELECT k, $2::timestamptz FROM unnest($1::text[]) AS k
            ON CONFLICT (key) DO UPDATE SET last_used = greatest(identity_trusted_sign_ins.last_used, excluded.last_used)
            """, keys, now)
    }

    /// Forgets sign-ins past the lifetime.
    public static func purge(before: Date, on connection: PostgresConnection) throws {
        _ = try connection.query("DELETE FROM identity_trusted_sign_ins WHERE last_used < $1::timestamptz", before.addingTimeInterval(-lifetime))
    }
}
