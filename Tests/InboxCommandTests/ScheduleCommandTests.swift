import EventLog
import Foundation
import InboxDomain
import InboxTesting
import Testing

/// `inbox schedule` as processes: two at once remind once, the one holding the lease; when it stops,
/// the other takes over and reminds only of what came since; `inbox status` counts what was sent.
@Suite struct ScheduleCommandTests {
    @Test func twoScheduleProcessesAtOnceRemindOnceAndATakeoverRemindsOnlyOfWhatCameSince() async throws {
        try await withTestDatabase { db in
            _ = try await db.store.append([
                try NewEvent(ConversationStarted(conversationId: "c1", buyerId: "b1", shopId: "s1", watchId: "w1")),
                try NewEvent(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .buyer, authorId: "b1", body: "Still for sale?")),
            ])
            try await db.withProjectors { try await db.waitUntilProjected() }
            let environment = InboxCLI.databaseEnvironment(db.url, ["INBOX_LOG_FORMAT": "text"])
            let first = try InboxCLI.start(["schedule"], environment: environment)
            defer { first.cleanUp() }
            let second = try InboxCLI.start(["schedule"], environment: environment)
            defer { second.cleanUp() }
            let reminded = "reminded shops of buyers waiting for an answer"
            // One takes the lease and reminds; the other waits for it.
            let holderFirst = try await Self.waitForEither(first, second) { $0.contains(reminded) }
            let (holder, waiter) = holderFirst ? (first, second) : (second, first)
            _ = try await waiter.waitForStderrLine(timeout: .seconds(30)) { $0.contains("waiting for the lease") }
            #expect(try await db.scalar("SELECT count(*)::int FROM notification_outbox WHERE event = 'shop_unanswered'", Int.self) == 1)
            let line = holder.stderrSoFar.split(separator: "\n").first { $0.contains(reminded) }.map(String.init) ?? ""
            #expect(line.contains("shops=1") && line.contains("messages=1"), "\(line)")

            // A buyer writes to another shop; the holder would check again only in 15 minutes.
            _ = try await db.store.append([
                try NewEvent(ConversationStarted(conversationId: "c2", buyerId: "b2", shopId: "s2", watchId: "w2")),
                try NewEvent(MessageSent(conversationId: "c2", messageId: "m2", authorSide: .buyer, authorId: "b2", body: "Any scratches?")),
            ])
            try await db.withProjectors { try await db.waitUntilProjected() }
            holder.send(SIGTERM)
            let stopped = try await holder.waitForExit(timeout: .seconds(30))
            #expect(stopped.status == 0 && stopped.stderr.contains("the schedule stopped"), "stderr: \(stopped.stderr)")
            // The other takes the lease over and checks at once: the new message only.
            let takeover = try await waiter.waitForStderrLine(timeout: .seconds(30)) { $0.contains(reminded) }
            #expect(takeover.contains("shops=1") && takeover.contains("messages=1"), "\(takeover)")
            waiter.send(SIGTERM)
            let after = try await waiter.waitForExit(timeout: .seconds(30))
            #expect(after.status == 0, "stderr: \(after.stderr)")
            #expect(after.stderr.components(separatedBy: reminded).count == 2, "one reminding check: \(after.stderr)")
            let recipients = try await db.client.query(
                "SELECT ids->>'sellerId' FROM notification_outbox WHERE event = 'shop_unanswered' ORDER BY id") { try $0.decode(String.self, at: 0) }
            #expect(recipients == ["s1", "s2"], "s1 once, by the first holder; s2 by the second")

            let status = try await InboxCLI.run(["status"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(status.stdoutLines.contains("shop reminders: 2 sent to 2 shops, covering 2 waiting messages"), "stdout: \(status.stdout)")
        }
    }

    /// Whether `first` (true) or `second` (false) writes a stderr line matching `matches` first.
    private static func waitForEither(
        _ first: RunningInbox, _ second: RunningInbox, timeout: Duration = .seconds(60), _ matches: (String) -> Bool
    ) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if first.stderrSoFar.split(separator: "\n").contains(where: { matches(String($0)) }) { return true }
            if second.stderrSoFar.split(separator: "\n").contains(where: { matches(String($0)) }) { return false }
            try await Task.sleep(for: .milliseconds(25))
        }
        throw InboxCLI.Failure(description: "neither schedule wrote the line; stderr: \(first.stderrSoFar)\n---\n\(second.stderrSoFar)")
    }
}
