import EventLog
import Foundation
import InboxSimulation
import InboxTesting
import Projections
import Testing

/// A backup restored for real (docs/operations.md, "Backups"): `pg_dump` of a loaded, projected
/// database, `pg_restore` into a fresh cluster, the tier started on it. Every table (the log, the
/// read models, the state outside the log) is equal row for row, and the restored tier answers the
/// bell and the conversation list as the original does.
@Suite(.serialized) struct BackupRestoreTests {
    /// `count md5` of every base table of the schema `public`, by name.
    static func everyTable(_ db: TestDatabase) async throws -> [String: String] {
        let tables = try await db.client.withConnection { connection in
            try connection.query(
                "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1"
            ).map { try $0.decode(String.self, at: 0) }
        }
        return try await ProjectCommandTests.fingerprint(db, tables: tables)
    }

    static func tool(_ name: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = [name] + arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, output)
    }

    /// GET `path` as `person` from the tier at `port`: the body.
    static func get(_ path: String, port: String, token: String) throws -> String {
        let result = try tool("curl", ["-sS", "--globoff", "-H", "Authorization: Bearer \(token)", "-H", "X-Wristler-App: ios/2.4.0", "http://127.0.0.1:\(port)\(path)"])
        return result.output
    }

    static func port(of tier: RunningInbox) async throws -> String {
        let line = try await tier.waitForStdoutLine(timeout: .seconds(60)) { $0.contains("The API listens on") }
        return String(line.split(separator: ":").last?.prefix { $0.isNumber } ?? "")
    }

    @Test func aDumpRestoredIntoAFreshClusterHoldsEveryRowAndTheTierServesTheSame() async throws {
        try await withTestDatabase { db in
            var simulation = MarketplaceSimulation(configuration: .init(people: 200, shops: 15, watches: 300, seed: 31))
            try await ProjectCommandTests.appendSimulated(&simulation, count: 3000, to: db)
            try await ProjectCommandTests.projectUntilCaughtUp(db)
            let original = try await Self.everyTable(db)
            #expect(original["events"]?.hasPrefix("3") == true, "\(original["events"] ?? "-")")

            let dump = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-backup-\(UUID().uuidString.prefix(8)).dump")
            defer { try? FileManager.default.removeItem(at: dump) }
            let dumped = try Self.tool("pg_dump", ["--format=custom", "--file", dump.path, "--dbname", db.url])
            #expect(dumped.status == 0, "pg_dump: \(dumped.output)")

            let cluster = try await TestCluster.make()
            defer { cluster.tearDown() }
            let host = cluster.postgres.socketDirectory.path
            let maintenance = "postgres:///postgres?host=\(host)&user=\(cluster.postgres.configuration.user)"
            let restored = try Self.tool("pg_restore", ["--create", "--exit-on-error", "--dbname", maintenance, dump.path])
            #expect(restored.status == 0, "pg_restore: \(restored.output)")
            let restoredURL = "postgres:///\(db.name)?host=\(host)&user=\(cluster.postgres.configuration.user)"
            let copy = try TestDatabase.attach(url: restoredURL, name: db.name)
            defer { copy.client.close() }
            #expect(try await Self.everyTable(copy) == original)

            // The tier on each: the same bell and conversation list for the same people.
            let data = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-restore-\(UUID().uuidString.prefix(8))")
            defer { try? FileManager.default.removeItem(at: data) }
            func tier(_ url: String) throws -> RunningInbox {
                try InboxCLI.start(["run"], environment: InboxCLI.databaseEnvironment(url, ["INBOX_HTTP_PORT": "0", "INBOX_DATA_DIR": data.path]))
            }
            let before = try tier(db.url)
            defer { before.cleanUp() }
            let after = try tier(restoredURL)
            defer { after.cleanUp() }
            let (beforePort, afterPort) = (try await Self.port(of: before), try await Self.port(of: after))
            var compared = 0
            for person in simulation.people.prefix(12) {
                let token = try await InboxCLI.run(
                    ["token", "--person", person, "--scope", "account:read messages:read"], environment: ["INBOX_DATA_DIR": data.path]
                ).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
                for path in ["/v1/me/notifications?page[limit]=50", "/v1/conversations?filter[side]=buyer", "/v1/conversations?filter[side]=seller"] {
                    let (one, two) = (try Self.get(path, port: beforePort, token: token), try Self.get(path, port: afterPort, token: token))
                    #expect(one.hasPrefix(#"{"data":["#), "\(path) for \(person): \(one.prefix(300))")
                    #expect(one == two, "\(path) for \(person) differs after the restore")
                    compared += one.count
                }
            }
            #expect(compared > 10_000, "the pages compared hold little: \(compared) bytes")
            try await ProjectCommandTests.stop(before)
            try await ProjectCommandTests.stop(after)
            // Started on the restore, every projector found its checkpoint at the head: the log and
            // the read models did not move (the fan-out, the mailer and the schedule did their work
            // on the outbox, as on the original).
            let afterwards = try await Self.everyTable(copy)
            let logAndReadModels = InboxProjections.all.flatMap(\.tableNames) + ["events", "projection_checkpoints", "projection_dead_letters"]
            let changed = logAndReadModels.filter { afterwards[$0] != original[$0] }.sorted()
            #expect(changed.isEmpty, "changed by the tier on the restore: \(changed)")
        }
    }
}
