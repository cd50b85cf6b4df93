import Foundation
import PostgresClient

/// A PostgreSQL cluster in a local folder, made with the installed server's `initdb` and run with
/// `pg_ctl`, listening only on a Unix socket inside that folder. It is what `inbox` uses when no
/// `DATABASE_URL` is set, and what the tests use for the cases that restart the server.
///
/// Started as root, the server runs as an unprivileged user (`postgres` if it exists, else
/// `nobody`), since PostgreSQL refuses to run as root.
public final class EmbeddedPostgres: Sendable {
    public struct Configuration: Sendable {
        /// The cluster's folder (`.inbox/postgres` by default). It holds `data/`, the socket and `postgres.log`.
        public var directory: URL
        /// The database the tier uses; created on first start.
        public var database: String = "inbox"
        public var user: String = "inbox"
        /// Only names the socket file (`.s.PGSQL.<port>`); nothing listens on TCP.
        public var port: Int = 5432
        /// The folder with `initdb`, `pg_ctl` and `postgres`; found under /usr/lib/postgresql when nil.
        public var binDirectory: URL?
        /// Server settings beyond the tier's own (`name=value` without spaces, each passed as `-c`), for a start
        /// of this call's; a running server keeps the settings it was started with.
        public var settings: [String]

        public init(
            directory: URL, database: String = "inbox", user: String = "inbox", port: Int = 5432, binDirectory: URL? = nil,
            settings: [String] = []
        ) {
            self.directory = directory
            self.database = database
            self.user = user
            self.port = port
            self.binDirectory = binDirectory
            self.settings = settings
        }
    }

    public struct Failure: Error, Sendable, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    public let configuration: Configuration
    private let binDirectory: URL
    private let runAs: String?

    public var dataDirectory: URL { configuration.directory.appendingPathComponent("data") }
    public var socketDirectory: URL { configuration.directory }
    public var logFile: URL { configuration.directory.appendingPathComponent("postgres.log") }

    /// How a client reaches the cluster.
    public var connection: PostgresConfiguration {
        PostgresConfiguration(
            unixSocketDirectory: socketDirectory.path, port: configuration.port, user: configuration.user,
            database: configuration.database)
    }

    public init(configuration: Configuration) throws {
        var configuration = configuration
        configuration.directory = configuration.directory.standardizedFileURL
        self.configuration = configuration
        binDirectory = try configuration.binDirectory ?? Self.findBinDirectory()
        runAs = geteuid() == 0 ? Self.unprivilegedUser() : nil
        // sockaddr_un holds 107 bytes of path.
        let socketPath = configuration.directory.appendingPathComponent(".s.PGSQL.\(configuration.port)").path
        guard socketPath.utf8.count < 100 else {
            throw Failure(
                "The embedded PostgreSQL's socket path \(socketPath) is longer than a Unix socket allows; set INBOX_DATA_DIR to a shorter folder.")
        }
    }

    /// The data folder (`.inbox`), when it is ours and closed to other users (made 0700 by an
    /// earlier version beside a private subfolder), gets their search bit, so the server's user can
    /// reach its own folder inside; nothing in it becomes readable.
    static func openForTraversal(_ folder: URL) throws {
        var info = stat()
        guard stat(folder.path, &info) == 0, info.st_uid == geteuid() else { return }
        let mode = info.st_mode & 0o7777
        guard mode & 0o011 != 0o011 else { return }
        guard chmod(folder.path, mode | 0o011) == 0 else {
            throw Failure("Cannot open \(folder.path) for the embedded PostgreSQL's user to reach its folder inside (chmod: errno \(errno)).")
        }
    }

    /// Creates the cluster if it does not exist, starts it if it is not running, and creates the
    /// database. Returns once the server accepts connections: true if this call started the
    /// server (and so its caller should stop it), false if it was already running.
    @discardableResult
    public func start() throws -> Bool {
        let fileManager = FileManager.default
        try fileManager.createDirectory(at: configuration.directory, withIntermediateDirectories: true)
        if let runAs {
            try Self.openForTraversal(configuration.directory.deletingLastPathComponent())
            try run("/bin/chown", [runAs, configuration.directory.path], asUser: nil)
            do {
                try run("/usr/bin/test", ["-w", configuration.directory.path], asUser: runAs)
            } catch {
                throw Failure(
                    "The embedded PostgreSQL runs as the user \(runAs), who cannot write to \(configuration.directory.path) "
                        + "(a folder above it is closed to other users); set INBOX_DATA_DIR to a folder it can reach, such as /var/tmp/inbox.")
            }
        }
        if !fileManager.fileExists(atPath: dataDirectory.appendingPathComponent("PG_VERSION").path) {
            try? fileManager.removeItem(at: dataDirectory)
            try run(
                binDirectory.appendingPathComponent("initdb").path,
                ["-D", dataDirectory.path, "-U", configuration.user, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                asUser: runAs)
        }
        let wasRunning = isRunning
        if !wasRunning {
            try? fileManager.removeItem(at: dataDirectory.appendingPathComponent("postmaster.pid"))
            let options = [
                "-k \(socketDirectory.path)", "-c listen_addresses=''", "-p \(configuration.port)",
                "-c max_connections=200", "-c shared_buffers=256MB",
            ].joined(separator: " ") + configuration.settings.map { " -c \($0)" }.joined()
            try run(
                binDirectory.appendingPathComponent("pg_ctl").path,
                ["-D", dataDirectory.path, "-l", logFile.path, "-o", options, "-w", "-t", "60", "start"], asUser: runAs)
        }
        try createDatabaseIfMissing()
        return !wasRunning
    }

    /// Stops the server (fast shutdown: open sessions are ended, nothing committed is lost).
    public func stop() throws {
        guard isRunning else { return }
        try run(
            binDirectory.appendingPathComponent("pg_ctl").path, ["-D", dataDirectory.path, "-m", "fast", "-w", "stop"],
            asUser: runAs)
    }

    /// Restarts the server; every open session is cut.
    public func restart() throws {
        try run(
            binDirectory.appendingPathComponent("pg_ctl").path,
            ["-D", dataDirectory.path, "-m", "fast", "-w", "-t", "60", "restart"], asUser: runAs)
    }

    /// `start()` on a thread of its own: initdb and pg_ctl take seconds.
    @discardableResult
    public func start() async throws -> Bool {
        try await BlockingThread.run(name: "embedded-postgres") { try self.start() }
    }

    /// `stop()` on a thread of its own.
    public func stop() async throws {
        try await BlockingThread.run(name: "embedded-postgres") { try self.stop() }
    }

    /// `restart()` on a thread of its own.
    public func restart() async throws {
        try await BlockingThread.run(name: "embedded-postgres") { try self.restart() }
    }

    /// Whether a server is running on this cluster.
    /// Whether the cluster has been made (by `start`) in its folder.
    public var exists: Bool { FileManager.default.fileExists(atPath: dataDirectory.appendingPathComponent("PG_VERSION").path) }

    public var isRunning: Bool {
        (try? run(binDirectory.appendingPathComponent("pg_ctl").path, ["-D", dataDirectory.path, "status"], asUser: runAs)) != nil
    }

    /// Creates the database if the cluster does not have it yet.
    func createDatabaseIfMissing() throws {
        let admin = PostgresConfiguration(
            unixSocketDirectory: socketDirectory.path, port: configuration.port, user: configuration.user, database: "postgres")
        let connection = try PostgresConnection(configuration: admin)
        defer { connection.close() }
        let exists = try connection.query("SELECT count(*) FROM pg_database WHERE datname = $1", configuration.database).scalar(Int64.self)
        if exists == 0 {
            // An identifier cannot be a parameter; it is checked to be a plain name first.
            try connection.execute("CREATE DATABASE \(try Self.plainIdentifier(configuration.database))")
        }
    }

    static func plainIdentifier(_ name: String) throws -> String {
        guard !name.isEmpty, name.utf8.count < 64,
            name.utf8.allSatisfy({ (97...122).contains($0) || (48...57).contains($0) || $0 == UInt8(ascii: "_") })
        else { throw Failure("\"\(name)\" is not a plain lower-case database name.") }
        return name
    }

    /// The newest installed server's bin folder (`/usr/lib/postgresql/<major>/bin`).
    public static func findBinDirectory() throws -> URL {
        let root = URL(fileURLWithPath: "/usr/lib/postgresql")
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []).compactMap(Int.init).sorted()
        for version in versions.reversed() {
            let bin = root.appendingPathComponent("\(version)/bin")
            if FileManager.default.isExecutableFile(atPath: bin.appendingPathComponent("initdb").path) { return bin }
        }
        throw Failure(
            "No PostgreSQL server is installed (no initdb under /usr/lib/postgresql/*/bin): install the postgresql package, or set DATABASE_URL.")
    }

    static func unprivilegedUser() -> String {
        getpwnam("postgres") != nil ? "postgres" : "nobody"
    }

    /// Runs a command (as `user` when given, through runuser) and returns its output; throws with
    /// the command's own words when it fails.
    @discardableResult
    func run(_ executable: String, _ arguments: [String], asUser user: String?) throws -> String {
        let (status, text) =
            if let user {
                try Subprocess.run("/usr/sbin/runuser", ["-u", user, "--", executable] + arguments)
            } else {
                try Subprocess.run(executable, arguments)
            }
        guard status == 0 else {
            let name = URL(fileURLWithPath: executable).lastPathComponent
            throw Failure("\(name) failed (exit \(status)): \(text.trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        return text
    }
}
