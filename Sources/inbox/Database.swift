import EventLog
import Foundation
import InboxDomain
import Lifecycle
import PostgresClient
import Synchronization

/// The database a command works on: the server of `DATABASE_URL`, or the embedded cluster,
/// started for the command and stopped after it if this process started it.
struct Database: Sendable {
    let client: PostgresClient
    let store: EventStore
    let migrator: Migrator
    let description: String
    /// Until a command hands them over, SIGINT and SIGTERM cancel it.
    let signals: SignalHandover
}

/// Whether SIGINT and SIGTERM still cancel the command, or were handed to a `ServiceGroup` that
/// stops the roles in order. The group's watcher, made with the group, takes the signals from the
/// command's (watchers stack); handing over then drops the command's for good.
final class SignalHandover: Sendable {
    private let watcher = Mutex<SignalWatcher?>(nil)

    func watch(with signals: SignalWatcher) { watcher.withLock { $0 = signals } }

    func handOver() {
        watcher.withLock { watcher in
            watcher?.cancel()
            watcher = nil
        }
    }
}

/// Runs `body` with a database. SIGINT and SIGTERM cancel `body` (until it hands them over); the
/// pool is closed and the embedded cluster stopped afterwards (when this process started it)
/// whether `body` returned, threw or was interrupted.
func withDatabase(
    _ configuration: InboxConfiguration, log: Logger, migrate: Bool, _ body: @escaping @Sendable (Database) async throws -> Void
) async throws {
    let migrator = try Migrator(directory: try Migrator.locateDirectory(explicit: configuration.migrationsDirectory))
    var embedded: EmbeddedPostgres?
    var startedEmbedded = false
    let connection: PostgresConfiguration
    if let url = configuration.databaseURL {
        connection = try PostgresConfiguration(url: url)
    } else {
        let directory = URL(fileURLWithPath: configuration.dataDirectory).appendingPathComponent("postgres")
        let cluster = try EmbeddedPostgres(configuration: .init(directory: directory))
        log.info("using the embedded PostgreSQL", metadata: ["directory": directory.path])
        startedEmbedded = try await cluster.start()
        embedded = cluster
        connection = cluster.connection
    }
    let client = try PostgresClient(configuration: .init(connection: connection, maximumConnections: configuration.poolSize))
    let handover = SignalHandover()
    let database = Database(
        client: client, store: EventStore(client: client, validator: EventValidator(registry: InboxCatalogue.registry)), migrator: migrator,
        description: connection.redactedDescription, signals: handover)

    let work = Task {
        if migrate {
            for applied in try await migrator.migrate(client: client) {
                log.info("applied migration", metadata: ["file": applied.fileName])
            }
        }
        try await body(database)
    }
    handover.watch(with: SignalWatcher(signals: [SIGINT, SIGTERM]) { signal in
        log.info("stopping", metadata: ["signal": signal == SIGINT ? "SIGINT" : "SIGTERM"])
        work.cancel()
    })
    let result = await work.result
    handover.handOver()
    client.close()
    log.info("closed the database pool")
    if let embedded, startedEmbedded {
        log.info("stopping the embedded PostgreSQL")
        do { try await embedded.stop() } catch { log.error("could not stop the embedded PostgreSQL", metadata: ["error": "\(error)"]) }
    }
    try result.get()
}
