import Crypto
import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// A fresh database for one test, on the PostgreSQL that `make test` starts
/// (`INBOX_TEST_DATABASE_URL`), migrated with the repository's `sql/`. Each test gets its own
/// database, so tests can run in parallel and count events without seeing each other's.
/// The test process's key-encryption key of the people's data keys, installed once, when the
/// first database is made: every test seals personal fields as a node with
/// INBOX_PERSONAL_DATA_KEY_FILE does, and an `inbox` it starts reads the same key (`keyFile`).
public enum TestPersonalData {
    public static let kek: [UInt8] = Array("wristler-tests-personal-data-kek".utf8)

    /// A file holding `kek`, for `INBOX_PERSONAL_DATA_KEY_FILE`.
    public static let keyFile: String = {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-test-personal-data-\(getpid()).key").path
        _ = FileManager.default.createFile(atPath: path, contents: Data(kek), attributes: [.posixPermissions: 0o600])
        return path
    }()

    private static let installed: Void = {
        // A process installs one key; every test of the process shares it.
        try? PersonalDataKeys.install(PersonalDataKeys(kek: try! SecretsKey(bytes: kek)))
    }()

    public static func install() { installed }
}

public struct TestDatabase: Sendable {
    public let name: String
    public let configuration: PostgresConfiguration
    public let client: PostgresClient
    public let store: EventStore
    /// A `postgres://` URL of this database (for `DATABASE_URL` of an `inbox` process).
    public let url: String

    public struct Unreachable: Error, CustomStringConvertible {
        public var description: String
    }

    /// The admin URL; a missing variable is a failure, never a skip.
    public static func adminConfiguration() throws -> PostgresConfiguration {
        guard let url = ProcessInfo.processInfo.environment["INBOX_TEST_DATABASE_URL"], !url.isEmpty else {
            throw Unreachable(
                description: "INBOX_TEST_DATABASE_URL is not set: run the tests with `make test`, which starts a throwaway PostgreSQL.")
        }
        return try PostgresConfiguration(url: url)
    }

    /// A database that exists already (restored from a backup, say), as it is: not migrated, never dropped.
    public static func attach(url: String, name: String, poolSize: Int = 4) throws -> TestDatabase {
        TestPersonalData.install()
        let configuration = try PostgresConfiguration(url: url)
        let client = try PostgresClient(configuration: .init(connection: configuration, maximumConnections: poolSize))
        return TestDatabase(name: name, configuration: configuration, client: client, store: EventStore(client: client), url: url)
    }

    /// Creates and migrates a new database.
    public static func make(migrated: Bool = true, poolSize: Int = 8) async throws -> TestDatabase {
        TestPersonalData.install()
        let admin = try adminConfiguration()
        let name = "test_" + UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "").prefix(20)
        do {
            try await BlockingThread.run {
                let connection = try PostgresConnection(configuration: admin)
                try connection.execute("CREATE DATABASE \(name)")
                connection.close()
            }
        } catch {
            throw Unreachable(description: "The test PostgreSQL at \(admin.redactedDescription) cannot be reached: \(error)")
        }
        let configuration = admin.withDatabase(String(name))
        let client = try PostgresClient(configuration: .init(connection: configuration, maximumConnections: poolSize))
        if migrated {
            try await Migrator(directory: migrationsDirectory).migrate(client: client)
        }
        return TestDatabase(
            name: String(name), configuration: configuration, client: client, store: EventStore(client: client),
            url: try url(forDatabase: String(name)))
    }

    /// The admin URL with its database name replaced (`postgres:///postgres?host=...` → `postgres:///<name>?host=...`).
    static func url(forDatabase name: String) throws -> String {
        guard let admin = ProcessInfo.processInfo.environment["INBOX_TEST_DATABASE_URL"],
            var components = URLComponents(string: admin)
        else { throw Unreachable(description: "INBOX_TEST_DATABASE_URL is not a URL.") }
        components.path = "/" + name
        guard let url = components.string else { throw Unreachable(description: "Cannot build a URL for database \(name).") }
        return url
    }

    /// The repository's `sql/` folder.
    public static var migrationsDirectory: URL {
        if let explicit = ProcessInfo.processInfo.environment["INBOX_MIGRATIONS_DIR"] { return URL(fileURLWithPath: explicit) }
        return packageRoot.appendingPathComponent("sql")
    }

    /// The package's root folder (found from this file's path).
    public static var packageRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// A new connection of its own (outside the pool), for tests that hold transactions open.
    public func connect() throws -> PostgresConnection {
        try PostgresConnection(configuration: configuration)
    }

    /// Waits until every committed event of this database can be read: transaction ids are shared
    /// by every database of the cluster, so a write transaction of another test briefly holds
    /// readers back (never makes them skip). Tests that count what a reader sees call this first.
    public func waitUntilEventsAreReadable(timeout: Duration = .seconds(30)) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let readable = try await client.withConnection { connection in
                try connection.query(
                    """
                    SELECT coalesce(max(transaction_id) < pg_snapshot_xmin(pg_current_snapshot()), true) FROM events
                    """
                ).scalar(Bool.self)
            }
            if readable { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw Unreachable(description: "Events stayed unreadable for \(timeout): a transaction was left open.")
    }

    /// Closes the pool and drops the database.
    public func drop() async {
        client.close()
        guard let admin = try? Self.adminConfiguration() else { return }
        let name = self.name
        _ = try? await BlockingThread.run {
            let connection = try PostgresConnection(configuration: admin)
            defer { connection.close() }
            try connection.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")
        }
    }
}

/// Runs `body` with a fresh database and drops it afterwards, also when `body` throws.
/// `INBOX_KEEP_TEST_DATABASES=1` keeps the databases of passing tests to look into.
public func withTestDatabase(_ body: (TestDatabase) async throws -> Void) async throws {
    let db = try await TestDatabase.make()
    do {
        try await body(db)
    } catch {
        await db.drop()
        throw error
    }
    if ProcessInfo.processInfo.environment["INBOX_KEEP_TEST_DATABASES"] == nil { await db.drop() } else { print("kept database \(db.name)") }
}

/// Runs `body` with the database of a cluster of its own (`TestCluster`), for a test that keeps a
/// writing transaction open for long (a bulk load, a transaction held open on purpose): transaction
/// ids are cluster-wide, so on the shared cluster it would hold back every other test's readers of
/// the log (docs/event-log.md, gap-safe reads) for as long, and their waits would time out.
public func withTestDatabaseOnAClusterOfItsOwn(poolSize: Int = 8, _ body: (TestDatabase) async throws -> Void) async throws {
    let cluster = try await TestCluster.make()
    defer { cluster.tearDown() }
    let db = try await cluster.database(poolSize: poolSize)
    defer { db.client.close() }
    try await body(db)
}

/// A PostgreSQL cluster of a test's own in a temporary folder, for tests that restart or stop the
/// server (which would disturb every other test on the shared one).
public final class TestCluster: Sendable {
    public let postgres: EmbeddedPostgres
    public let directory: URL

    private init(directory: URL, postgres: EmbeddedPostgres) {
        self.directory = directory
        self.postgres = postgres
    }

    /// Makes and starts a cluster (initdb and pg_ctl run on a thread of their own).
    ///
    /// Without autovacuum: its ANALYZE of the tables a migration just made takes a transaction id,
    /// and while it runs no other transaction is next in the log, so a write the test expects to be
    /// projected inline (InlineProjections) is left to the async projector at random. A throwaway
    /// cluster of a few thousand rows needs no vacuum.
    public static func make() async throws -> TestCluster {
        let directory = URL(fileURLWithPath: "/tmp").appendingPathComponent("inbox-cluster-\(UUID().uuidString.prefix(8))")
        let postgres = try EmbeddedPostgres(configuration: .init(directory: directory, settings: ["autovacuum=off"]))
        try await postgres.start()
        return TestCluster(directory: directory, postgres: postgres)
    }

    /// The cluster's own database, migrated, as a `TestDatabase`.
    public func database(poolSize: Int = 8) async throws -> TestDatabase {
        TestPersonalData.install()
        let configuration = postgres.connection
        let client = try PostgresClient(configuration: .init(connection: configuration, maximumConnections: poolSize))
        try await Migrator(directory: TestDatabase.migrationsDirectory).migrate(client: client)
        return TestDatabase(
            name: postgres.configuration.database, configuration: configuration, client: client, store: EventStore(client: client),
            url: "postgres:///\(postgres.configuration.database)?host=\(postgres.socketDirectory.path)&user=\(postgres.configuration.user)")
    }

    /// Stops the server and removes the folder (blocking: it runs in a `defer`).
    public func tearDown() {
        try? postgres.stop()
        try? FileManager.default.removeItem(at: directory)
    }
}

extension TestDatabase {
    /// The writing transactions of the whole cluster that have been open for a second or more,
    /// oldest first, one line each: what holds back a reader of the log (for a failure's message).
    public func writersHoldingReadersBack() async -> String {
        let lines = try? await client.withConnection { connection in
            try connection.query(
                """
                SELECT coalesce(datname, '?') || ' pid ' || pid || ', open ' || round(extract(epoch FROM now() - xact_start)::numeric, 1) || ' s, '
                    || coalesce(wait_event_type || '/' || wait_event, 'running') || ': ' || left(regexp_replace(query, '\\s+', ' ', 'g'), 120)
                FROM pg_stat_activity
                WHERE backend_xid IS NOT NULL AND now() - xact_start > interval '1 second' ORDER BY xact_start
                """
            ).map { try $0.decode(String.self, at: 0) }
        }
        guard let lines else { return "(pg_stat_activity could not be read)" }
        return lines.isEmpty ? "no writing transaction of the cluster is open for a second or more" : lines.joined(separator: "\n")
    }

    /// The one value `sql` answers.
    public func scalar<T: PostgresDecodable & Sendable>(_ sql: String, _ type: T.Type = T.self) async throws -> T {
        try await client.withConnection { connection in try connection.query(sql).scalar(T.self) }
    }

    /// Appends catalogue events as one batch.
    /// The events `condition` picks, in position order, with the keys of their sealed fields: read
    /// whole, not gap-safe (other tests' transactions on the server would hold that back).
    public func events(where condition: String = "true") async throws -> [RecordedEvent] {
        try await client.withConnection { connection in
            try PersonalDataKeys.attachKeys(
                to: try connection.query("SELECT * FROM events WHERE \(condition) ORDER BY position").map(RecordedEvent.init(row:)), on: connection)
        }
    }

    public func append(_ events: any CatalogueEvent...) async throws {
        _ = try await store.append(try events.map { try NewEvent(catalogueEvent: $0) })
    }
}
