import Foundation
import InboxTesting
import Testing

/// The command as a Unix user expects it: a closed pipe ends it cleanly, and a command that only
/// reads never makes a database where there is none.
@Suite struct CommandMannersTests {
    /// `inbox events tail | head -n 1` on the embedded PostgreSQL: the write into the closed pipe
    /// ends the command with 0 (not SIGPIPE's 141), and the cluster it started is stopped.
    @Test func tailIntoAClosedPipeEndsCleanlyAndStopsItsCluster() async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-pipe-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: data) }
        let environment = ["INBOX_DATA_DIR": data.path, "INBOX_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path]
        let events = (0..<3_000).map { EventsCommandTests.event(person: "p\($0 % 7)", payload: "{}") }
        let appended = try await InboxCLI.run(
            ["events", "append", "-"], environment: environment, stdin: "[" + events.joined(separator: ",") + "]", timeout: .seconds(120))
        try #require(appended.status == 0, "\(appended.stderr)")

        // The pipe is made by bash, as a user's shell makes it (one made here would be inherited by
        // the other tests' children, and a reader left open elsewhere never closes it), and inbox
        // starts with SIGPIPE's default action, as from a user's shell (this test runner ignores it).
        let piped = try await InboxCLI.run(
            ["-c", #"env --default-signal=PIPE "$0" events tail --from 1 | head -n 1; echo "status=${PIPESTATUS[0]}""#, try InboxCLI.binary().path],
            environment: environment, timeout: .seconds(60), executable: URL(fileURLWithPath: "/bin/bash"))
        let lines = piped.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 2 && lines[0].contains("\"position\":1"), "\(piped.stdout)")
        #expect(lines.last == "status=0", "inbox's own exit status in the pipeline: \(piped.stdout) \(piped.stderr)")
        let pid = data.appendingPathComponent("postgres/data/postmaster.pid")
        #expect(!FileManager.default.fileExists(atPath: pid.path), "the embedded PostgreSQL it started is stopped")
    }

    /// `status` and `events tail` in a folder without a cluster say so and exit 2, making nothing.
    @Test(arguments: [["status"], ["events", "tail"]])
    func aReadingCommandWhereThereIsNoDatabaseSaysSo(arguments: [String]) async throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-none-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: data) }
        let result = try await InboxCLI.run(
            arguments, environment: ["INBOX_DATA_DIR": data.path, "INBOX_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path])
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("there is no database in"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: data.appendingPathComponent("postgres/data").path), "no cluster was made")
    }

    /// `inbox version` names the commit it was built from (`make` writes it in before building).
    @Test func versionNamesTheCommitItWasBuiltFrom() async throws {
        let result = try await InboxCLI.run(["version"])
        let first = result.stdout.split(separator: "\n").first.map(String.init) ?? ""
        #expect(first.range(of: #"^inbox \S+ \(commit [0-9a-f]{7,40}(-dirty)?\)$"#, options: .regularExpression) != nil, "\(first)")
    }

    /// A misspelt `INBOX_*` variable is ignored, and said so at start with the setting it is closest to.
    @Test func aMisspeltSettingIsNamedWithTheClosestOne() async throws {
        let result = try await InboxCLI.run(
            ["version"], environment: ["INBOX_HTTP_PROT": "8080", "INBOX_NOTHING_LIKE_IT": "1", "INBOX_TEST_DATABASE_URL": "x", "INBOX_LOG_FORMAT": "text"])
        #expect(result.status == 0)
        #expect(result.stderr.contains("INBOX_HTTP_PROT is not a setting of inbox and is ignored; did you mean INBOX_HTTP_PORT?"), "\(result.stderr)")
        #expect(result.stderr.contains("INBOX_NOTHING_LIKE_IT is not a setting of inbox and is ignored (`inbox help` lists the settings)"), "\(result.stderr)")
        #expect(!result.stderr.contains("INBOX_TEST_DATABASE_URL") && !result.stderr.contains("INBOX_LOG_FORMAT"), "\(result.stderr)")
    }

    /// `inbox schedule --once` checks the reminders once and exits, for a timer to drive.
    @Test func scheduleOnceChecksOnceAndExits() async throws {
        try await withTestDatabase { db in
            let once = try await InboxCLI.run(["schedule", "--once"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(once.status == 0, "\(once.stderr)")
            #expect(once.stdout == "reminded 0 shops of 0 messages waiting for an answer\n", "\(once.stdout)")
            let wrong = try await InboxCLI.run(["schedule", "--twice"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(wrong.status == 2 && wrong.stderr.contains("takes only --once"), "\(wrong.stderr)")
        }
    }

    /// INBOX_LOG_LEVEL says the least severe line written; a level it does not know is refused.
    @Test func theLogLevelSettingFiltersTheLines() async throws {
        let warned = try await InboxCLI.run(["version"], environment: ["INBOX_HTTP_PROT": "1", "INBOX_LOG_LEVEL": "warning"])
        #expect(warned.stderr.contains("INBOX_HTTP_PROT"), "a warning passes warning: \(warned.stderr)")
        let quiet = try await InboxCLI.run(["version"], environment: ["INBOX_HTTP_PROT": "1", "INBOX_LOG_LEVEL": "error"])
        #expect(quiet.status == 0 && quiet.stderr.isEmpty, "a warning does not pass error: \(quiet.stderr)")
        let wrong = try await InboxCLI.run(["version"], environment: ["INBOX_LOG_LEVEL": "loud"])
        #expect(wrong.status == 2 && wrong.stderr.contains("INBOX_LOG_LEVEL (--log-level) must be one of trace, debug, info"), "\(wrong.stderr)")
    }
}
