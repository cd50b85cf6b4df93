import Devices
import EventLog
import Fanout
import Foundation
import InboxDomain
import InboxTesting
import Lifecycle
import PostgresClient
import Projections
import PushProtocol

extension TestDatabase {
    /// Runs a fan-out (as `inbox fanout` does, woken by NOTIFY and a short poll) while `body` runs.
    func withFanout<T: Sendable>(
        transport: any PushTransport, settings: FanoutStore.Settings = FanoutStore.Settings(), workers: Int = 2, batchSize: Int = 100,
        logger: Logger = .silent, _ body: () async throws -> T
    ) async throws -> T {
        // As `inbox fanout` does: the read models' tables exist before the first decision.
        try await InboxProjections.prepareLiveTables(client: client)
        let sender = FanoutSender(
            configuration: configuration, store: FanoutStore(settings: settings), transport: transport,
            options: FanoutSender.Options(batchSize: batchSize, workers: workers, pollInterval: .milliseconds(100), node: "test"), logger: logger)
        let task = Task { try await sender.run() }
        do {
            let result = try await body()
            task.cancel()
            _ = await task.result
            return result
        } catch {
            task.cancel()
            _ = await task.result
            throw error
        }
    }

    func register(_ person: String, _ platform: String, token: String, locale: String?, appId: String? = "eu.wristler.app", apns: String? = nil)
        throws -> Device
    {
        try DeviceRegistry(client: client).register(
            person: person, pushToken: token,
            details: Device.Details(platform: platform, appId: appId, locale: locale, apnsEnvironment: apns)
        ).device
    }

    /// The fan-out's state now.
    func fanoutStatus() async throws -> FanoutStore.Status {
        try await client.withConnection { try FanoutStore.status(on: $0) }
    }

    /// Waits until every outbox entry is decided and every delivery sent or given up.
    func waitUntilFannedOut(timeout: Duration = .seconds(60)) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let status = try await fanoutStatus()
            if status.undecided == 0 && status.sending == 0 && status.pending == 0 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        let status = try await fanoutStatus()
        let reasons = try await client.withConnection { connection in
            try connection.query("SELECT attempts, coalesce(last_reason, '') FROM push_deliveries ORDER BY id LIMIT 5").map {
                "\(try $0.decode(Int.self, at: 0)) attempts, last: \(try $0.decode(String.self, at: 1))"
            }
        }
        throw PushMock.Failure(
            description: "the fan-out did not finish within \(timeout): \(status.undecided) undecided, \(status.sending) being sent, \(status.pending) pending (\(reasons))")
    }

    func counter(_ name: String) async throws -> Int64 {
        try await fanoutStatus().counters.first { $0.name == name }?.count ?? 0
    }
}

/// An APNs device token (64 hex digits) that starts with `prefix` (a mock marker, or not).
func apnsToken(_ prefix: String, _ number: Int) -> String {
    let suffix = String(number, radix: 16)
    return prefix + String(repeating: "0", count: 64 - prefix.count - suffix.count) + suffix
}
