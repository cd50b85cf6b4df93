import Foundation
import InboxTesting
import Testing

/// `inbox events append` and `inbox events tail` against a real database of the test's own.
@Suite struct EventsCommandTests {
    /// One event document for `events append`: an event of the catalogue (`password_changed` by
    /// default, whose payload needs only `personId`; the validation lets other fields through) of
    /// person `person`, on that person's security stream, with `payload`'s fields added.
    static func event(
        person: String, type: String = "password_changed", payload: String = #"{"body":"Is it still for sale?"}"#,
        extra: String = ""
    ) -> String {
        let fields = payload == "{}" ? #"{"personId":"\#(person)"}"# : #"{"personId":"\#(person)","# + payload.dropFirst()
        return #"{"stream":"\#(stream(person))","type":"\#(type)","payload":\#(fields)\#(extra.isEmpty ? "" : "," + extra)}"#
    }

    /// The stream of a person's security events.
    static func stream(_ person: String) -> String { "person-\(person)-security" }

    /// Runs `events append document` against `db` and requires it to succeed.
    static func append(_ document: String, to db: TestDatabase, sourceLocation: SourceLocation = #_sourceLocation)
        async throws -> [[String: Any]]
    {
        let result = try await InboxCLI.run(
            ["events", "append", document], environment: InboxCLI.databaseEnvironment(db.url))
        try #require(result.exitedNormally && result.status == 0, "stderr: \(result.stderr)", sourceLocation: sourceLocation)
        return try result.stdoutObjects(sourceLocation: sourceLocation)
    }

    /// Runs `events append document` against `db` and expects a refused append: exit status 1,
    /// nothing on stdout, one error line saying nothing was appended and naming `name`.
    static func expectRefusal(
        of document: String, by db: TestDatabase, naming name: String, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        let result = try await InboxCLI.run(["events", "append", document], environment: InboxCLI.databaseEnvironment(db.url))
        #expect(result.exitedNormally, sourceLocation: sourceLocation)
        #expect(result.status == 1, "stderr: \(result.stderr)", sourceLocation: sourceLocation)
        #expect(result.stdout.isEmpty, "stdout: \(result.stdout)", sourceLocation: sourceLocation)
        let errors = result.stderrLines.filter { $0.hasPrefix("inbox: ") }
        #expect(errors.count == 1, "stderr: \(result.stderr)", sourceLocation: sourceLocation)
        #expect(errors.first?.contains("nothing was appended") == true, "stderr: \(result.stderr)", sourceLocation: sourceLocation)
        #expect(errors.first?.contains(name) == true, "stderr: \(result.stderr)", sourceLocation: sourceLocation)
    }

    @Test func appendingOneEventPrintsOneJSONLineAppendedAtPositionOne() async throws {
        try await withTestDatabase { db in
            let result = try await InboxCLI.run(
                ["events", "append", Self.event(person: "conversation-1")], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(result.stdoutLines.count == 1, "stdout: \(result.stdout)")
            let line = try #require(result.stdoutObjects().first)
            #expect(line["appended"] as? Bool == true)
            #expect(line["position"] as? Int == 1)
            #expect(line["stream"] as? String == Self.stream("conversation-1"))
            #expect(line["type"] as? String == "password_changed")
            #expect(line["version"] as? Int == 1)
            #expect(line["schemaVersion"] as? Int == 1)
            #expect((line["payload"] as? [String: Any])?["body"] as? String == "Is it still for sale?")
            let metadata = try #require(line["metadata"] as? [String: Any])
            #expect(metadata["origin"] as? String == "api")
            #expect(metadata["service"] as? String == "inbox-cli")
        }
    }

    @Test func appendingTheSameIdempotencyKeyAgainReturnsTheOriginalWithoutAppending() async throws {
        try await withTestDatabase { db in
            let document = Self.event(person: "conversation-1", extra: #""idempotencyKey":"send-42""#)
            let first = try await Self.append(document, to: db)
            let second = try await Self.append(document, to: db)
            #expect(first.count == 1)
            #expect(second.count == 1)
            #expect(first.first?["appended"] as? Bool == true)
            #expect(second.first?["appended"] as? Bool == false)
            #expect(first.first?["position"] as? Int == 1)
            #expect(second.first?["position"] as? Int == 1)
            #expect(second.first?["idempotencyKey"] as? String == "send-42")
            // Nothing new was written: the next event is the stream's second. (Positions may skip
            // numbers, as sequences do; versions within a stream do not.)
            let third = try await Self.append(Self.event(person: "conversation-1"), to: db)
            #expect(third.first?["version"] as? Int == 2)
            #expect((third.first?["position"] as? Int ?? 0) > 1)
        }
    }

    @Test func anIdempotencyKeyReusedForAnotherEventExitsWithOneAndAppendsNothing() async throws {
        try await withTestDatabase { db in
            _ = try await Self.append(Self.event(person: "conversation-1", extra: #""idempotencyKey":"send-42""#), to: db)
            let other = Self.event(person: "conversation-1", payload: #"{"body":"Another text"}"#, extra: #""idempotencyKey":"send-42""#)
            try await Self.expectRefusal(of: other, by: db, naming: "send-42")
        }
    }

    @Test func appendingAnArrayOfThreeEventsAppendsThreeInOrder() async throws {
        try await withTestDatabase { db in
            let batch = "[" + (1...3).map { Self.event(person: "conversation-\($0)", payload: #"{"n":\#($0)}"#) }
                .joined(separator: ",") + "]"
            let lines = try await Self.append(batch, to: db)
            #expect(lines.count == 3)
            #expect(lines.map { $0["appended"] as? Bool } == [true, true, true])
            #expect(lines.map { $0["position"] as? Int } == [1, 2, 3])
            #expect(lines.map { $0["stream"] as? String } == ["conversation-1", "conversation-2", "conversation-3"].map(Self.stream))
            #expect(lines.map { ($0["payload"] as? [String: Any])?["n"] as? Int } == [1, 2, 3])
        }
    }

    @Test func appendingFromStandardInputWorksLikeTheArgument() async throws {
        try await withTestDatabase { db in
            let result = try await InboxCLI.run(
                ["events", "append"], environment: InboxCLI.databaseEnvironment(db.url),
                stdin: Self.event(person: "conversation-1") + "\n")
            #expect(result.status == 0, "stderr: \(result.stderr)")
            let line = try #require(result.stdoutObjects().first)
            #expect(line["appended"] as? Bool == true)
            #expect(line["position"] as? Int == 1)
        }
    }

    @Test func aMismatchedExpectedVersionExitsWithOneAndAppendsNothing() async throws {
        try await withTestDatabase { db in
            _ = try await Self.append(Self.event(person: "conversation-1"), to: db)
            // A batch whose second event expects the wrong version: neither event may be written.
            let batch = "[" + Self.event(person: "conversation-2") + ","
                + Self.event(person: "conversation-1", extra: #""expectedVersion":5"#) + "]"
            try await Self.expectRefusal(of: batch, by: db, naming: "conversation-1")

            let tail = try await InboxCLI.run(["events", "tail", "--from", "1"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(tail.status == 0, "stderr: \(tail.stderr)")
            #expect(try tail.stdoutObjects().map { $0["stream"] as? String } == [Self.stream("conversation-1")])
        }
    }

    @Test func aMatchingExpectedVersionAppends() async throws {
        try await withTestDatabase { db in
            let first = try await Self.append(Self.event(person: "conversation-1", extra: #""expectedVersion":0"#), to: db)
            let second = try await Self.append(Self.event(person: "conversation-1", extra: #""expectedVersion":1"#), to: db)
            #expect(first.first?["version"] as? Int == 1)
            #expect(second.first?["version"] as? Int == 2)
            #expect(second.first?["appended"] as? Bool == true)
        }
    }

    @Test func tailFromOnePrintsEveryEventAsAJSONLineInOrder() async throws {
        try await withTestDatabase { db in
            let expected: [(stream: String, type: String, text: String)] = [
                ("7", "password_changed", "Is it still for sale?"),
                ("7", "email_changed", "yes"),
                ("8", "second_factor_enabled", "café ☕ \"quoted\""),
                ("7", "password_changed", "line\nbreak"),
            ]
            let batch = try String(
                decoding: JSONSerialization.data(
                    withJSONObject: expected.map {
                        ["stream": Self.stream($0.stream), "type": $0.type, "payload": ["personId": $0.stream, "text": $0.text]]
                    }),
                as: UTF8.self)
            _ = try await Self.append(batch, to: db)

            let result = try await InboxCLI.run(["events", "tail", "--from", "1"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(result.status == 0, "stderr: \(result.stderr)")
            let lines = try result.stdoutObjects()
            try #require(lines.count == expected.count, "stdout: \(result.stdout)")
            for (index, (line, event)) in zip(lines, expected).enumerated() {
                #expect(line["position"] as? Int == index + 1)
                #expect(line["stream"] as? String == Self.stream(event.stream))
                #expect(line["type"] as? String == event.type)
                #expect((line["payload"] as? [String: Any])?["text"] as? String == event.text)
                #expect(line["appended"] == nil, "tail lines carry no appended field")
            }
        }
    }

    @Test func tailFromAPositionSkipsTheEventsBeforeIt() async throws {
        try await withTestDatabase { db in
            let batch = "[" + (1...5).map { Self.event(person: "s-\($0)") }.joined(separator: ",") + "]"
            _ = try await Self.append(batch, to: db)
            let result = try await InboxCLI.run(["events", "tail", "--from", "4"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(try result.stdoutObjects().map { $0["position"] as? Int } == [4, 5])
        }
    }

    @Test func tailWithoutAFlagPrintsTheLastTenEvents() async throws {
        try await withTestDatabase { db in
            let batch = "[" + (1...15).map { Self.event(person: "s-\($0)", payload: #"{"n":\#($0)}"#) }.joined(separator: ",") + "]"
            #expect(try await Self.append(batch, to: db).count == 15)
            let result = try await InboxCLI.run(["events", "tail"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(result.status == 0, "stderr: \(result.stderr)")
            let lines = try result.stdoutObjects()
            #expect(lines.map { $0["position"] as? Int } == Array(6...15))
            #expect(lines.map { ($0["payload"] as? [String: Any])?["n"] as? Int } == Array(6...15))
        }
    }

    @Test func tailOfAnEmptyLogPrintsNothingAndSucceeds() async throws {
        try await withTestDatabase { db in
            let result = try await InboxCLI.run(["events", "tail"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(result.stdout.isEmpty)
        }
    }

    @Test func tailFollowPrintsAnEventAppendedAfterItStartedAndStopsOnSIGTERMWithZero() async throws {
        try await withTestDatabase { db in
            _ = try await Self.append(Self.event(person: "before", payload: #"{"n":1}"#), to: db)

            let follower = try InboxCLI.start(
                ["events", "tail", "--follow", "--from", "1"], environment: InboxCLI.databaseEnvironment(db.url))
            defer { follower.cleanUp() }
            // The event that was there before: the follower is up and has read the log.
            _ = try await follower.waitForStdoutLine(timeout: .seconds(15)) { $0.contains(#""stream":"person-before-security""#) }

            _ = try await Self.append(Self.event(person: "after", payload: #"{"n":2}"#), to: db)
            let line: String
            do {
                line = try await follower.waitForStdoutLine(timeout: .seconds(15)) { $0.contains(#""stream":"person-after-security""#) }
            } catch {
                // An event held back that long means a writing transaction open somewhere in the cluster.
                throw InboxCLI.Failure(description: "\(error)\nthe cluster's writers: \(await db.writersHoldingReadersBack())")
            }
            let object = try #require(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            #expect(object["position"] as? Int == 2)
            #expect(object["type"] as? String == "password_changed")
            #expect((object["payload"] as? [String: Any])?["n"] as? Int == 2)

            follower.send(SIGTERM)
            let result = try await follower.waitForExit(timeout: .seconds(15))
            #expect(result.exitedNormally, "killed by signal \(result.status)")
            #expect(result.status == 0, "stderr: \(result.stderr)")
            #expect(result.stdoutLines.count == 2, "each event printed once: \(result.stdout)")
        }
    }

    @Test func tailFollowStopsOnSIGINTWithZero() async throws {
        try await withTestDatabase { db in
            _ = try await Self.append(Self.event(person: "before"), to: db)
            let follower = try InboxCLI.start(
                ["events", "tail", "--follow", "--from", "1"], environment: InboxCLI.databaseEnvironment(db.url))
            defer { follower.cleanUp() }
            _ = try await follower.waitForStdoutLine(timeout: .seconds(15)) { $0.contains(#""stream":"person-before-security""#) }
            follower.send(SIGINT)
            let result = try await follower.waitForExit(timeout: .seconds(15))
            #expect(result.exitedNormally, "killed by signal \(result.status)")
            #expect(result.status == 0, "stderr: \(result.stderr)")
        }
    }

    /// Bug: `inbox run` printed its banner with `print` (buffered by the C library when stdout is
    /// not a terminal): under a supervisor or a pipe the banner was held back until the process exited.
    @Test func runPrintsItsBannerWhileRunningAndProjectsTheLog() async throws {
        try await withTestDatabase { db in
            _ = try await Self.append(Self.event(person: "7"), to: db)
            var environment = InboxCLI.databaseEnvironment(db.url)
            environment["INBOX_HTTP_PORT"] = "0"
            let tier = try InboxCLI.start(["run"], environment: environment)
            defer { tier.cleanUp() }
            _ = try await tier.waitForStdoutLine(timeout: .seconds(15)) { $0.contains("runs its projectors") }
            // Where mail goes: without INBOX_SMTP_URL, a folder, said with its whole path.
            let mailLine = try await tier.waitForStdoutLine(timeout: .seconds(15)) { $0.contains("Mail is written to") }
            #expect(mailLine.contains("/.inbox/mail as .eml files"), "\(mailLine)")
            // The tier projects: the password change reaches person 7's bell.
            let client = db.client
            var entries = 0
            for _ in 0..<150 where entries == 0 {
                entries = try await client.withConnection { connection in
                    guard try connection.query("SELECT to_regclass('public.bell_entries') IS NOT NULL").scalar(Bool.self) else { return 0 }
                    return try connection.query("SELECT count(*)::int FROM bell_entries WHERE person_id = '7'").scalar(Int.self)
                }
                if entries == 0 { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(entries == 1)
            tier.send(SIGTERM)
            let result = try await tier.waitForExit(timeout: .seconds(15))
            #expect(result.status == 0, "stderr: \(result.stderr)")
        }
    }

    /// Bug: the CLI parses the event into `JSONValue`, which holds every number as a `Double`, and
    /// re-encodes the payload from it: an integer above 2^53 (a 64-bit id from another system) is
    /// stored rounded, and above 9e15 written in exponent form.
    @Test func anIntegerPayloadFieldIsStoredExactly() async throws {
        try await withTestDatabase { db in
            let lines = try await Self.append(
                Self.event(person: "listing-1", payload: #"{"externalId":1234567890123456789,"small":42}"#), to: db)
            let tail = try await InboxCLI.run(["events", "tail", "--from", "1"], environment: InboxCLI.databaseEnvironment(db.url))
            #expect(tail.status == 0, "stderr: \(tail.stderr)")
            #expect(lines.first?["appended"] as? Bool == true)
            #expect(tail.stdout.contains(#""small": 42"#) || tail.stdout.contains(#""small":42"#))
            #expect(tail.stdout.contains("1234567890123456789"), "stdout: \(tail.stdout)")
        }
    }
}
