import EventLog
import Foundation
import PostgresClient

/// The database a benchmark runs on: the server of `DATABASE_URL`, or an embedded PostgreSQL in a
/// fresh folder under /tmp that is stopped and deleted afterwards, also when the benchmark fails.
struct BenchmarkDatabase: Sendable {
    let client: PostgresClient
    let store: EventStore
    /// `embedded PostgreSQL in /tmp/...` or the redacted `DATABASE_URL`.
    let description: String
    let isEmbedded: Bool
    /// The embedded cluster's folder (on the disk its WAL is flushed to); nil for `DATABASE_URL`.
    var directory: URL? = nil

    /// Enough connections for the concurrent configurations (4 appenders) and a spare.
    static let poolSize = 8

    /// Opens (or starts) the database, applies the migrations, runs `body` and cleans up.
    static func with<T: Sendable>(_ body: @escaping @Sendable (BenchmarkDatabase) async throws -> T) async throws -> T {
        let environment = ProcessInfo.processInfo.environment
        let migrator = try Migrator(directory: try Migrator.locateDirectory(explicit: environment["INBOX_MIGRATIONS_DIR"]))
        if let url = environment["DATABASE_URL"], !url.isEmpty {
            let configuration = try PostgresConfiguration(url: url)
            return try await run(
                configuration, description: configuration.redactedDescription, isEmbedded: false, directory: nil, migrator: migrator, body)
        }

        let directory = try makeTemporaryDirectory()
        var cluster: EmbeddedPostgres?
        defer { cleanUp(cluster, directory: directory) }
        let embedded = try EmbeddedPostgres(configuration: .init(directory: directory, database: "inbox_bench", user: "inbox"))
        cluster = embedded
        progress("starting an embedded PostgreSQL in \(directory.path)")
        try await embedded.start()
        return try await run(
            embedded.connection, description: "embedded PostgreSQL in \(directory.path)", isEmbedded: true, directory: directory,
            migrator: migrator, body)
    }

    private static func run<T: Sendable>(
        _ configuration: PostgresConfiguration, description: String, isEmbedded: Bool, directory: URL?, migrator: Migrator,
        _ body: @escaping @Sendable (BenchmarkDatabase) async throws -> T
    ) async throws -> T {
        let client = try PostgresClient(
            configuration: .init(connection: configuration, maximumConnections: poolSize, applicationName: "inbox-bench"))
        defer { client.close() }
        try await migrator.migrate(client: client)
        let database = BenchmarkDatabase(
            client: client, store: EventStore(client: client), description: description, isEmbedded: isEmbedded, directory: directory)
        return try await body(database)
    }

    /// `/tmp/ibench-XXXXXX`: short, so the socket path stays well under the 107 bytes a Unix socket
    /// allows. `INBOX_BENCH_CLUSTER_PARENT` names another folder for it (another disk, or `/dev/shm`
    /// to see the tier without its disk's flushes).
    private static func makeTemporaryDirectory() throws -> URL {
        let parent = ProcessInfo.processInfo.environment["INBOX_BENCH_CLUSTER_PARENT"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array("\(parent)/ibench-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buffer -> String? in
            guard let base = buffer.baseAddress, let path = mkdtemp(base) else { return nil }
            return String(cString: path)
        }
        guard let made else {
            throw BenchmarkFailure(description: "cannot create a temporary folder under \(parent): \(String(cString: strerror(errno)))")
        }
        return URL(fileURLWithPath: made, isDirectory: true)
    }

    /// Stops the cluster and deletes its folder. A cluster that will not stop is left in place (deleting
    /// the files of a running server would leave it orphaned), and its folder is named.
    private static func cleanUp(_ cluster: EmbeddedPostgres?, directory: URL) {
        if let cluster {
            do {
                try cluster.stop()
            } catch {
                progress("inbox-bench: could not stop the embedded PostgreSQL in \(directory.path); it is left there: \(error)")
                return
            }
        }
        do {
            try FileManager.default.removeItem(at: directory)
        } catch {
            progress("inbox-bench: could not delete \(directory.path): \(error)")
        }
    }
}
