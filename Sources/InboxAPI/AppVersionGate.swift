import Foundation
import PostgresClient
import Synchronization
import Threads

/// The oldest release of each platform the API still serves, and where to get a newer one:
/// `app_minimum_versions`, re-read every `refreshInterval`, so raising a minimum needs no restart.
/// A request from an older app gets `426 app_update_required` on every API route.
public final class AppVersionGate: Sendable {
    public struct Minimum: Sendable, Hashable {
        public var version: AppVersion
        public var storeURL: String
    }

    private struct Cache {
        var minimums: [AppIdentity.Platform: Minimum] = [:]
        var loadedAt: ContinuousClock.Instant?
    }

    private let client: PostgresClient
    private let refreshInterval: Duration
    private let cache = ReadMostly(Cache())
    /// Whether a request is re-reading the table: the others go on with the copy meanwhile.
    private let refreshing = Atomic<Bool>(false)

    public init(client: PostgresClient, refreshInterval: Duration = .seconds(5)) {
        self.client = client
        self.refreshInterval = refreshInterval
    }

    /// Throws the 426 for an app below its platform's minimum, by the copy of the table (see
    /// `minimums`); when the database cannot be read, the last copy stands.
    public func check(_ identity: AppIdentity) throws(APIError) {
        guard let platform = identity.platform, let version = identity.version else { return }
        guard let minimum = minimums()[platform], version < minimum.version else { return }
        throw APIError(
            status: 426, code: .appUpdateRequired,
            detail: "This version of the app is no longer supported; please update it.",
            meta: [
                "platform": .string(platform.rawValue), "installed_version": .string(version.description),
                "minimum_version": .string(minimum.version.description), "store_url": .string(minimum.storeURL),
            ])
    }

    /// The minimums: the copy while it is fresh. A stale copy is re-read in the background by
    /// the first request to notice (the others, and that one, go on with the copy meanwhile), so no
    /// request waits for it; only the very first requests wait for the first read.
    func minimums() -> [AppIdentity.Platform: Minimum] {
        let now = ContinuousClock.now
        let current = cache.read()
        guard current.loadedAt != nil else {
            // The first read. When the database cannot be read, nothing is gated for now and the
            // next read is the background one, so requests do not each wait for the database.
            guard let loaded = try? load(at: now) else { return store([], at: now) }
            return loaded
        }
        if now - current.loadedAt! >= refreshInterval,
            refreshing.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged
        {
            Task { [self] in
                // When the database cannot be read, the last copy stands.
                _ = try? await self.loadInBackground()
                refreshing.store(false, ordering: .releasing)
            }
        }
        return current.minimums
    }

    static let query = "SELECT platform, minimum_version, store_url FROM app_minimum_versions"

    private func load(at now: ContinuousClock.Instant) throws -> [AppIdentity.Platform: Minimum] {
        store(try client.queryBlocking(Self.query, retryIfFoundDead: true, Self.decode), at: now)
    }

    private func loadInBackground() async throws {
        let rows = try await client.query(Self.query, Self.decode)
        store(rows, at: .now)
    }

    @Sendable private static func decode(_ row: PostgresRow) throws -> (String, String, String) {
        (try row.decode(String.self, "platform"), try row.decode(String.self, "minimum_version"), try row.decode(String.self, "store_url"))
    }

    @discardableResult
    private func store(_ rows: [(String, String, String)], at now: ContinuousClock.Instant) -> [AppIdentity.Platform: Minimum] {
        var loaded: [AppIdentity.Platform: Minimum] = [:]
        for (platform, version, url) in rows {
            guard let platform = AppIdentity.Platform(rawValue: platform), let version = AppVersion(version) else { continue }
            loaded[platform] = Minimum(version: version, storeURL: url)
        }
        cache.write(Cache(minimums: loaded, loadedAt: now))
        return loaded
    }
}
