import Foundation
import InboxTesting
import Testing

/// `inbox run` with a poll interval of a minute stops within two seconds of SIGTERM: every role is
/// woken from its wait rather than waiting it out (issue 10, defect 5: it was still running 5 s
/// after SIGTERM). Timed, so `make test` runs it on its own after the rest, as `PromptShutdownTests`.
@Suite(.serialized) struct PromptShutdownProcessTests {
    @Test func inboxRunWithAPollIntervalOfAMinuteStopsWithinTwoSecondsOfSIGTERM() async throws {
        try await withTestDatabase { db in
            var environment = InboxCLI.databaseEnvironment(db.url)
            environment["INBOX_HTTP_PORT"] = "0"
            environment["INBOX_POLL_INTERVAL_MS"] = "60000"
            environment["INBOX_LOG_FORMAT"] = "text"
            let tier = try InboxCLI.start(["run"], environment: environment)
            defer { tier.cleanUp() }
            _ = try await tier.waitForStdoutLine(timeout: .seconds(30)) { $0.contains("The API listens") }
            // Every projector has its lease and is caught up, waiting out its minute; the schedule has
            // its lease too and waits out its 15 minutes.
            for _ in 0..<400 where tier.stderrSoFar.components(separatedBy: "took the lease").count < 6 {
                try await Task.sleep(for: .milliseconds(25))
            }
            try await Task.sleep(for: .milliseconds(300))
            let stopping = ContinuousClock.now
            tier.send(SIGTERM)
            let result = try await tier.waitForExit(timeout: .seconds(30))
            let took = ContinuousClock.now - stopping
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(took < .seconds(2), "stopped in \(took)")
            #expect(result.stderr.contains("every role stopped"))
            #expect(result.stderr.components(separatedBy: "took the lease").count == 6, "four projectors and the schedule held their leases")
            #expect(result.stderr.contains("the schedule stopped"), "stderr: \(result.stderr)")
            #expect(result.stderr.contains("the mailer stopped"), "the mailer (no lease) is woken from its wait too")
        }
    }
}
