import EventLog
import Foundation
import InboxTesting
import PostgresClient
import Testing

@Suite struct MigrationTests {
    /// A folder of migrations for one test.
    struct Folder {
        let url: URL
        init(_ files: [String: String]) throws {
            url = FileManager.default.temporaryDirectory.appendingPathComponent("migrations-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
            for (name, sql) in files { try write(name, sql) }
        }
        func write(_ name: String, _ sql: String) throws {
            try sql.write(to: url.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        func remove() { try? FileManager.default.removeItem(at: url) }
    }

    @Test func migrationsApplyInNumberOrderOnceEach() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let folder = try Folder([
            "002_add_unread.sql": "ALTER TABLE bell ADD COLUMN unread boolean NOT NULL DEFAULT true;",
            "001_bell.sql": "CREATE TABLE bell (id bigint PRIMARY KEY);",
            "010_index.sql": "CREATE INDEX bell_unread ON bell (unread);",
        ])
        defer { folder.remove() }
        let migrator = try Migrator(directory: folder.url)
        let applied = try await migrator.migrate(client: db.client)
        #expect(applied.map(\.fileName) == ["001_bell.sql", "002_add_unread.sql", "010_index.sql"])
        #expect(try await migrator.migrate(client: db.client).isEmpty)
        #expect(try await migrator.pending(client: db.client).isEmpty)
        let recorded = try await db.client.query("SELECT version, name FROM schema_migrations ORDER BY version") {
            "\(try $0.decode(Int32.self, "version")) \(try $0.decode(String.self, "name"))"
        }
        #expect(recorded == ["1 bell", "2 add_unread", "10 index"])
    }

    @Test func aMigrationThatFailsIsRolledBackAndNamed() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let folder = try Folder([
            "001_ok.sql": "CREATE TABLE a (id int);",
            "002_broken.sql": "CREATE TABLE b (id int); SELECT * FROM no_such_table;",
        ])
        defer { folder.remove() }
        let error = await #expect(throws: MigrationError.self) { try await Migrator(directory: folder.url).migrate(client: db.client) }
        #expect("\(error.map { "\($0)" } ?? "")".contains("002_broken.sql"))
        let tables = try await db.client.query("SELECT to_regclass('a') IS NOT NULL AS a, to_regclass('b') IS NOT NULL AS b") {
            [try $0.decode(Bool.self, "a"), try $0.decode(Bool.self, "b")]
        }
        #expect(tables == [[true, false]])
    }

    @Test func anAppliedMigrationWhoseFileChangedIsRefusedNamingTheFile() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let folder = try Folder(["001_bell.sql": "CREATE TABLE bell (id bigint PRIMARY KEY);"])
        defer { folder.remove() }
        try await Migrator(directory: folder.url).migrate(client: db.client)
        try folder.write("001_bell.sql", "CREATE TABLE bell (id bigint PRIMARY KEY, extra text);")
        try folder.write("002_more.sql", "CREATE TABLE more (id int);")
        let error = await #expect(throws: MigrationError.self) { try await Migrator(directory: folder.url).migrate(client: db.client) }
        guard case .changedAfterApplied(let fileName, _, _) = error else {
            Issue.record("expected changedAfterApplied, got \(String(describing: error))")
            return
        }
        #expect(fileName == "001_bell.sql")
        #expect(error?.description.contains("001_bell.sql") == true)
        // Nothing after the refusal was applied.
        let more = try await db.client.withConnection { try $0.query("SELECT to_regclass('more') IS NULL").scalar(Bool.self) }
        #expect(more)
    }

    @Test func twoMigrateRunsAtOnceApplyEachMigrationOnce() async throws {
        let db = try await TestDatabase.make(migrated: false, poolSize: 4)
        defer { Task { await db.drop() } }
        let folder = try Folder([
            "001_slow.sql": "CREATE TABLE slow (id int); SELECT pg_sleep(0.3);",
            "002_counter.sql": "CREATE TABLE counter (n int); INSERT INTO counter VALUES (1);",
        ])
        defer { folder.remove() }
        let migrator = try Migrator(directory: folder.url)
        let other = try PostgresClient(configuration: .init(connection: db.configuration, maximumConnections: 1))
        defer { other.close() }
        async let first = migrator.migrate(client: db.client)
        async let second = migrator.migrate(client: other)
        let (a, b) = try await (first, second)
        #expect(a.count + b.count == 2)
        let rows = try await db.client.withConnection { try $0.query("SELECT count(*) FROM counter").scalar(Int64.self) }
        #expect(rows == 1)
    }

    @Test func badFileNamesAndDuplicateNumbersAreRefused() throws {
        let badName = try Folder(["1_short.sql": "SELECT 1;"])
        defer { badName.remove() }
        #expect(throws: MigrationError.badFileName("1_short.sql")) { try Migrator(directory: badName.url) }
        let duplicate = try Folder(["003_a.sql": "SELECT 1;", "003_b.sql": "SELECT 2;"])
        defer { duplicate.remove() }
        #expect(throws: MigrationError.duplicateVersion(3, "003_a.sql", "003_b.sql")) { try Migrator(directory: duplicate.url) }
        #expect(throws: MigrationError.self) { try Migrator(directory: URL(fileURLWithPath: "/nonexistent/sql")) }
    }

    @Test func theRepositorysMigrationsApplyToAnEmptyDatabase() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let migrator = try Migrator(directory: TestDatabase.migrationsDirectory)
        let applied = try await migrator.migrate(client: db.client)
        #expect(applied.first?.fileName == "001_event_log.sql")
        #expect(try await migrator.pending(client: db.client).isEmpty)
    }
}

@Suite struct EmbeddedPostgresTests {
    @Test func theEmbeddedClusterStartsMigratesAndStopsCleanly() async throws {
        let directory = URL(fileURLWithPath: "/tmp/inbox-embedded-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let cluster = try EmbeddedPostgres(configuration: .init(directory: directory))
        #expect(!cluster.isRunning)
        try await cluster.start()
        #expect(cluster.isRunning)
        let client = try PostgresClient(configuration: .init(connection: cluster.connection, maximumConnections: 2))
        try await Migrator(directory: TestDatabase.migrationsDirectory).migrate(client: client)
        _ = try await EventStore(client: client).append(message("conversation-1", "kept across a restart"))
        client.close()
        try await cluster.stop()
        #expect(!cluster.isRunning)

        // A second start finds the same cluster and its data.
        try await cluster.start()
        let again = try PostgresClient(configuration: .init(connection: cluster.connection, maximumConnections: 1))
        let head = try await EventStore(client: again).headPosition()
        again.close()
        try await cluster.stop()
        #expect(head == 1)
    }

    /// Bug: a run with DATABASE_URL as root made the data folder 0700 (Foundation gives the folders
    /// above a private one that one's mode), and the embedded server's user could not reach its
    /// folder inside it afterwards: `make run` failed until the folder was removed by hand.
    @Test func theEmbeddedClusterStartsInADataFolderAnEarlierRunClosed() async throws {
        let data = URL(fileURLWithPath: "/tmp/inbox-closed-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: data) }
        try FileManager.default.createDirectory(at: data, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        let cluster = try EmbeddedPostgres(configuration: .init(directory: data.appendingPathComponent("postgres")))
        try await cluster.start()
        #expect(cluster.isRunning)
        try await cluster.stop()
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: data.path)[.posixPermissions] as? Int)
        #expect(mode == 0o711, "the folder's mode: \(String(mode, radix: 8))")
    }
}
