import Foundation
import Lifecycle
import PostgresClient

/// The identity role's housekeeping, every `interval`: deletes challenges and handoffs past their
/// expiry, sessions over for a day (with their refresh tokens), and rate-limit buckets untouched
/// for a day. Idempotent deletes, so any number of nodes may run it; none of it is needed for
/// correctness (every lookup checks expiry itself), only to keep the tables small.
public struct IdentityMaintenance: Service {
    let client: PostgresClient
    let interval: Duration
    let log: Logger
    let now: @Sendable () -> Date

    public init(client: PostgresClient, interval: Duration = .seconds(600), log: Logger, now: @escaping @Sendable () -> Date = { Date() }) {
        self.client = client
        self.interval = interval
        self.log = log
        self.now = now
    }

    public func run() async throws {
        while !Task.isCancelled {
            do {
                try await sweep()
            } catch is CancellationError {
                return
            } catch {
                log.warning("the identity role's housekeeping failed; it runs again later", metadata: ["error": "\(error)"])
            }
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
        }
    }

    /// One sweep.
    public func sweep() async throws {
        let now = self.now()
        try await client.withConnection { connection in
            try Challenges.purge(before: now, on: connection)
            try Handoffs.purge(before: now, on: connection)
            try Sessions.purge(before: now.addingTimeInterval(-86_400), on: connection)
            try RateLimits.purge(before: now.addingTimeInterval(-86_400), on: connection)
            try TrustedSignIns.purge(before: now, on: connection)
            try UsedIDTokens.purge(before: now, on: connection)
            try FailedSignIns.purge(before: now, on: connection)
        }
    }
}
