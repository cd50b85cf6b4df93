import Crypto
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

/// Installs the key-encryption key of the people's data keys for this process, and checks that
/// it opens the keys stored: a database sealed under another key, or with none given, is refused
/// here with a sentence, never read as garbage. The embedded PostgreSQL's is made on first use.
func installPersonalDataKeys(_ configuration: InboxConfiguration, client: PostgresClient, log: Logger) async throws {
    var path = configuration.personalDataKeyFile
    if path == nil && configuration.databaseURL == nil {
        let made = (configuration.dataDirectory as NSString).appendingPathComponent("personal-data.key")
        try FileManager.default.createDirectory(atPath: configuration.dataDirectory, withIntermediateDirectories: true)
        try FileLock.exclusive(made + ".lock") {
            if !FileManager.default.fileExists(atPath: made) {
                guard FileManager.default.createFile(atPath: made, contents: Data(SecureRandom.bytes(32)), attributes: [.posixPermissions: 0o600]) else {
                    throw UsageError(description: "Cannot write the personal data key to \(made).")
                }
                log.info("made the key-encryption key of the people's data keys", metadata: ["path": .string(made)])
            }
        }
        path = made
    }
    let keys: PersonalDataKeys?
    do {
        let previous = try configuration.personalDataPreviousKeyFile.map { try SecretsKey.load(path: $0) }
        keys = try path.map { PersonalDataKeys(kek: try SecretsKey.load(path: $0), previous: previous) }
    } catch {
        throw UsageError(description: "INBOX_PERSONAL_DATA_KEY_FILE: \(error)")
    }
    do {
        try await client.withConnection { connection in
            guard try connection.query("SELECT to_regclass('public.person_data_keys') IS NOT NULL").scalar(Bool.self) else { return }
            try PersonalDataKeys.check(keys, on: connection)
        }
        if let keys { try PersonalDataKeys.install(keys) }
    } catch let error as PersonalDataError {
        throw UsageError(description: "\(error)")
    }
    if keys == nil { log.notice("no INBOX_PERSONAL_DATA_KEY_FILE: personal data is stored unsealed and cannot be erased (docs/event-log.md)") }
}

/// Runs `body` with a database. SIGINT and SIGTERM cancel `body` (until it hands them over); the
/// pool is closed and the embedded cluster stopped afterwards (when this process started it)
/// whether `body` returned, threw or was interrupted.
///
/// `existingOnly`: for a command that only reads (`status`, `events tail`), a folder without an
/// embedded cluster is an error saying so (exit 2), not a new empty database.
func withDatabase(
    _ configuration: InboxConfiguration, log: Logger, migrate: Bool, existingOnly: Bool = false,
    _ body: @escaping @Sendable (Database) async throws -> Void
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
        if existingOnly && !cluster.exists {
            throw UsageError(
                description: "there is no database in \(directory.path): `inbox run` or `inbox migrate` makes one there "
                    + "(INBOX_DATA_DIR says where), or set DATABASE_URL.")
        }
        log.info("using the embedded PostgreSQL", metadata: ["directory": .string(directory.path)])
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
                log.info("applied migration", metadata: ["file": .string(applied.fileName)])
            }
        }
        try await installPersonalDataKeys(configuration, client: client, log: log)
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
