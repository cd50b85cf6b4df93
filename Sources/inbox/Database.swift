import EventLog
import Foundation
import InboxDomain
import Lifecycle
import PostgresClient

/// The database a command works on: the server of `DATABASE_URL`, or the embedded cluster,
/// started for the command and stopped after it if this process started it.
struct Database: Sendable {
    let client: PostgresClient
    let store: EventStore
    let migrator: Migrator
    let description: String
}

/// Runs `body` with a database. SIGINT and SIGTERM cancel `body`; the embedded cluster is stopped
/// afterwards (when this process started it) whether `body` returned, threw or was interrupted.
func withDatabase(
    _ configuration: InboxConfiguration, log: Log, migrate: Bool, _ body: @escaping @Sendable (Database) async throws -> Void
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
        log.info("using the embedded PostgreSQL", ["directory": directory.path])
        startedEmbedded = try await cluster.start()
        embedded = cluster
        connection = cluster.connection
    }
    let client = try PostgresClient(configuration: .init(connection: connection, maximumConnections: configuration.poolSize))
    let database = Database(
        client: client, store: EventStore(client: client, validator: EventValidator(registry: InboxCatalogue.registry)), migrator: migrator, description: connection.redactedDescription)

    let work = Task {
        if migrate {
            for applied in try await migrator.migrate(client: client) {
                log.info("applied migration", ["file": applied.fileName])
            }
        }
        try await body(database)
    }
    let signals = SignalWatcher(signals: [SIGINT, SIGTERM]) { signal in
        log.info("stopping", ["signal": signal == SIGINT ? "SIGINT" : "SIGTERM"])
        work.cancel()
    }
    let result = await work.result
    signals.cancel()
    client.close()
    if let embedded, startedEmbedded {
        log.info("stopping the embedded PostgreSQL", [:])
        do { try await embedded.stop() } catch { log.error("could not stop the embedded PostgreSQL", ["error": "\(error)"]) }
    }
    try result.get()
}
