import Crypto
import Foundation
import PostgresClient

/// One schema change: `sql/NNN_name.sql`.
public struct Migration: Sendable, Hashable {
    public var version: Int
    public var name: String
    public var fileName: String
    public var sql: String
    /// SHA-256 of the file, recorded when it is applied; a later change to the file is refused.
    public var checksum: String

    public init(version: Int, name: String, fileName: String, sql: String) {
        self.version = version
        self.name = name
        self.fileName = fileName
        self.sql = sql
        self.checksum = SHA256.hexDigest(sql)
    }
}

public enum MigrationError: Error, Sendable, Hashable, CustomStringConvertible {
    case directoryNotFound(String)
    case badFileName(String)
    case duplicateVersion(Int, String, String)
    case changedAfterApplied(fileName: String, recorded: String, onDisk: String)
    case unknownAppliedVersion(version: Int, name: String)
    case failed(fileName: String, reason: String)

    public var description: String {
        switch self {
        case .directoryNotFound(let path):
            "No migrations folder at \(path); set INBOX_MIGRATIONS_DIR to the folder holding NNN_name.sql files."
        case .badFileName(let name):
            "Migration file \(name) is not named NNN_name.sql (three digits, an underscore, a lower-case name)."
        case .duplicateVersion(let version, let first, let second):
            "Migrations \(first) and \(second) both have number \(version)."
        case .changedAfterApplied(let fileName, let recorded, let onDisk):
            "Migration \(fileName) was changed after it was applied (checksum \(recorded.prefix(12))… recorded, "
                + "\(onDisk.prefix(12))… on disk). Put the file back as it was and add a new migration instead."
        case .unknownAppliedVersion(let version, let name):
            "The database has migration \(String(format: "%03d", version))_\(name) applied, which this release does not have."
        case .failed(let fileName, let reason):
            "Migration \(fileName) failed and was rolled back: \(reason)"
        }
    }
}

/// Applies `sql/NNN_name.sql` files in order, each in its own transaction, under an advisory lock
/// (two `inbox migrate` at once are safe: the second waits, then finds nothing to do).
public struct Migrator: Sendable {
    public let migrations: [Migration]
    /// The advisory lock key (`hashtext('inbox.migrations')` would do; a constant is clearer).
    static let lockKey: Int64 = 0x1_6b0c_0001

    public init(migrations: [Migration]) {
        self.migrations = migrations.sorted { $0.version < $1.version }
    }

    /// Loads every `NNN_name.sql` in `directory`.
    public init(directory: URL) throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory.path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw MigrationError.directoryNotFound(directory.path)
        }
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".sql") }.sorted()
        var migrations: [Migration] = []
        var seen: [Int: String] = [:]
        for fileName in names {
            let stem = fileName.dropLast(4)
            let parts = stem.split(separator: "_", maxSplits: 1)
            guard parts.count == 2, parts[0].count == 3, let version = Int(parts[0]),
                parts[1].allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "_" })
            else { throw MigrationError.badFileName(fileName) }
            if let other = seen[version] { throw MigrationError.duplicateVersion(version, other, fileName) }
            seen[version] = fileName
            let sql = try String(contentsOf: directory.appendingPathComponent(fileName), encoding: .utf8)
            migrations.append(Migration(version: version, name: String(parts[1]), fileName: fileName, sql: sql))
        }
        self.init(migrations: migrations)
    }

    /// The migrations folder: `explicit` if given; otherwise `sql/` in the working directory, beside
    /// or above the executable (a checkout), or `/usr/share/inbox/sql` (an installed package).
    public static func locateDirectory(explicit: String?) throws -> URL {
        if let explicit { return URL(fileURLWithPath: explicit) }
        var candidates = [URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent("sql")]
        if let executable = Bundle.main.executableURL?.resolvingSymlinksInPath() {
            var folder = executable.deletingLastPathComponent()
            for _ in 0..<6 {
                candidates.append(folder.appendingPathComponent("sql"))
                folder = folder.deletingLastPathComponent()
            }
        }
        candidates.append(URL(fileURLWithPath: "/usr/share/inbox/sql"))
        for candidate in candidates
        where FileManager.default.fileExists(atPath: candidate.appendingPathComponent("001_event_log.sql").path) {
            return candidate
        }
        throw MigrationError.directoryNotFound(candidates[0].path)
    }

    /// Applies what is missing and returns what it applied. Refuses (before applying anything) when
    /// an applied migration's file changed.
    @discardableResult
    public func migrate(client: PostgresClient) async throws -> [Migration] {
        let migrations = self.migrations
        return try await client.withConnection { connection in try Self.migrate(migrations, on: connection) }
    }

    /// Versions already applied, with their checksums.
    public func applied(client: PostgresClient) async throws -> [Int: String] {
        try await client.withConnection { connection in try Self.appliedIfAny(on: connection) }
    }

    /// Migrations not yet applied (for readiness checks and `inbox status`).
    public func pending(client: PostgresClient) async throws -> [Migration] {
        try await client.withConnection { connection in try pending(on: connection) }
    }

    /// Migrations not yet applied, read on a connection the caller holds.
    public func pending(on connection: PostgresConnection) throws -> [Migration] {
        let applied = try Self.appliedIfAny(on: connection)
        return migrations.filter { applied[$0.version] == nil }
    }

    /// The applied migrations, none when the table is not there yet.
    static func appliedIfAny(on connection: PostgresConnection) throws -> [Int: String] {
        let exists = try connection.query("SELECT to_regclass('schema_migrations') IS NOT NULL").scalar(Bool.self)
        return exists ? try applied(on: connection) : [:]
    }

    static func migrate(_ migrations: [Migration], on connection: PostgresConnection) throws -> [Migration] {
        try connection.query("SELECT pg_advisory_lock($1)", lockKey)
        defer { _ = try? connection.query("SELECT pg_advisory_unlock($1)", lockKey) }
        try ensureTable(on: connection)
        let applied = try applied(on: connection)
        let known = Dictionary(uniqueKeysWithValues: migrations.map { ($0.version, $0) })
        for (version, checksum) in applied.sorted(by: { $0.key < $1.key }) {
            guard let migration = known[version] else {
                let name = try connection.query("SELECT name FROM schema_migrations WHERE version = $1", Int32(version)).scalar(String.self)
                throw MigrationError.unknownAppliedVersion(version: version, name: name)
            }
            if migration.checksum != checksum {
                throw MigrationError.changedAfterApplied(fileName: migration.fileName, recorded: checksum, onDisk: migration.checksum)
            }
        }
        var done: [Migration] = []
        for migration in migrations where applied[migration.version] == nil {
            do {
                try connection.transaction { connection in
                    try connection.execute(migration.sql)
                    try connection.query(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        Int32(migration.version), migration.name, migration.checksum)
                }
            } catch let error as PostgresError where !error.isConnectionError {
                throw MigrationError.failed(fileName: migration.fileName, reason: error.description)
            }
            done.append(migration)
        }
        return done
    }

    static func ensureTable(on connection: PostgresConnection) throws {
        // Called under the advisory lock: two first runs at once would race on CREATE TABLE IF NOT EXISTS.
        try connection.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version    integer     PRIMARY KEY,
                name       text        NOT NULL,
                checksum   text        NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """)
    }

    static func applied(on connection: PostgresConnection) throws -> [Int: String] {
        var result: [Int: String] = [:]
        for row in try connection.query("SELECT version, checksum FROM schema_migrations") {
            result[Int(try row.decode(Int32.self, "version"))] = try row.decode(String.self, "checksum")
        }
        return result
    }
}
