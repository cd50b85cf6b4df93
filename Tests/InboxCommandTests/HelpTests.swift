import Foundation
import Testing

/// `inbox COMMAND --help` (and `-h`) prints that command's usage and exits 0, touching no database,
/// as every command-line tool does; `inbox help` lists every command with its usage.
@Suite struct HelpTests {
    @Test(arguments: ["run", "serve", "identity", "project", "fanout", "schedule", "migrate", "replay", "events", "status", "health", "token", "account", "version", "help"])
    func everyCommandPrintsItsUsageForHelpAndExitsZero(command: String) async throws {
        for flag in ["--help", "-h"] {
            // The database is unreachable: the usage must come before any connection.
            let result = try await InboxCLI.run([command, flag])
            #expect(result.exitedNormally && result.status == 0, "\(command) \(flag): \(result.stderrHead)")
            #expect(result.stdout.hasPrefix("usage: inbox \(command)"), "\(command) \(flag): \(result.stdout)")
            #expect(result.stderr.isEmpty, "\(command) \(flag): \(result.stderrHead)")
        }
    }

    @Test func helpAfterOtherArgumentsStillPrintsTheUsage() async throws {
        let result = try await InboxCLI.run(["replay", "--projection", "bell", "--help"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("usage: inbox replay [--projection NAME]... [--no-swap]"))
    }

    @Test func helpListsEveryCommandAndEverySetting() async throws {
        let result = try await InboxCLI.run(["help"])
        #expect(result.status == 0)
        for synopsis in ["run", "serve", "mail", "project [--projection NAME]...", "events append [JSON|-]", "token --person ID"] {
            #expect(result.stdout.contains("  \(synopsis)"), "\(synopsis)")
        }
        #expect(result.stdout.contains("INBOX_POLL_INTERVAL_MS (--poll-interval-ms), default 1000"))
        #expect(result.stdout.contains("INBOX_MAIL_GATHER_SECONDS (--mail-gather-seconds), default 3600"))
        #expect(result.stdout.contains("INBOX_SMTP_URL (--smtp-url)") && result.stdout.contains("INBOX_PUBLIC_URL (--public-url)"))
        let one = try await InboxCLI.run(["help", "project"])
        #expect(one.status == 0 && one.stdout.hasPrefix("usage: inbox project [--projection NAME]..."))
    }

    @Test func helpForACommandThatDoesNotExistIsAUsageError() async throws {
        let result = try await InboxCLI.run(["help", "frobnicate"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("frobnicate"))
    }
}
