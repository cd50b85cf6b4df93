import Foundation
import Testing

/// Mistakes on the command line are refused with exit status 2 and one line on stderr, before any
/// database is touched.
@Suite struct UsageErrorTests {
    /// Exit 2, nothing on stdout, exactly one stderr line starting with "inbox: "; returns that line.
    @discardableResult
    func expectUsageError(_ result: InboxResult, sourceLocation: SourceLocation = #_sourceLocation) -> String {
        let exitedNormally = result.exitedNormally
        #expect(exitedNormally, "the process crashed: \(result.stderrHead)", sourceLocation: sourceLocation)
        #expect(result.status == 2, "stderr: \(result.stderrHead)", sourceLocation: sourceLocation)
        #expect(result.stdout.isEmpty, "stdout: \(result.stdout)", sourceLocation: sourceLocation)
        #expect(result.stderrLines.count == 1, "stderr: \(result.stderrHead)", sourceLocation: sourceLocation)
        let line = result.stderrLines.first ?? ""
        #expect(line.hasPrefix("inbox: "), "stderr: \(result.stderrHead)", sourceLocation: sourceLocation)
        return line
    }

    @Test func appendingBadJSONExitsWithTwoAndOneLine() async throws {
        let result = try await InboxCLI.run(["events", "append", "{bad"])
        let line = expectUsageError(result)
        #expect(line.contains("not valid JSON"))
    }

    @Test func appendingBadJSONFromStandardInputExitsWithTwoAndOneLine() async throws {
        let result = try await InboxCLI.run(["events", "append", "-"], stdin: "{bad")
        let line = expectUsageError(result)
        #expect(line.contains("not valid JSON"))
    }

    @Test func anUnknownCommandExitsWithTwoAndOneLine() async throws {
        let result = try await InboxCLI.run(["frobnicate"])
        let line = expectUsageError(result)
        #expect(line.contains("frobnicate"))
    }

    @Test func anUnknownEventsVerbExitsWithTwoAndOneLine() async throws {
        let result = try await InboxCLI.run(["events", "delete"])
        let line = expectUsageError(result)
        #expect(line.contains("delete"))
    }

    @Test func anUnknownFlagOfEventsTailExitsWithTwoAndOneLineNamingIt() async throws {
        let result = try await InboxCLI.run(["events", "tail", "--since", "3"])
        let line = expectUsageError(result)
        #expect(line.contains("--since"))
    }

    @Test(arguments: [["--from", "0"], ["--from", "-4"], ["--from", "two"], ["--from"]])
    func tailFromAPositionBelowOneOrNotANumberExitsWithTwoAndOneLine(flags: [String]) async throws {
        let result = try await InboxCLI.run(["events", "tail"] + flags)
        let line = expectUsageError(result)
        #expect(line.contains("--from"))
    }

    /// A secret is never taken as a flag, where every user of the machine reads it in `ps`.
    @Test(arguments: [
        ["--smtp-password", "hunter2-secret"], ["--service-credentials=shop=hunter2-secret-long"], ["--unsubscribe-keys", "1:hunter2-secret"], ["--uploads-s3-secret-access-key", "hunter2-secret"],
        ["--database-url", "postgres://inbox:hunter2-secret@127.0.0.1:1/none"], ["--database-url", "postgres://127.0.0.1:1/none?password=hunter2-secret"],
    ])
    func aSecretAsAFlagIsRefusedWithoutRepeatingIt(flags: [String]) async throws {
        let line = expectUsageError(try await InboxCLI.run(["version"] + flags))
        #expect(line.contains("_FILE"), "\(line)")
        #expect(!line.contains("hunter2"), "\(line)")
    }

    @Test func aDatabaseURLWithoutAPasswordIsTakenAsAFlag() async throws {
        let result = try await InboxCLI.run(["version", "--database-url", "postgres://inbox@127.0.0.1:1/none"])
        #expect(result.status == 0, "\(result.stderrHead)")
    }

    /// `NAME_FILE` reads a setting from a file: a bad value in it is refused naming the setting,
    /// and so are a file that cannot be read and both ways at once.
    @Test func aSettingFromAFileIsReadAndCheckedLikeTheVariable() async throws {
        let path = NSTemporaryDirectory() + "inbox-setting-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try Data("not-a-port\n".utf8).write(to: URL(fileURLWithPath: path))
        let bad = expectUsageError(try await InboxCLI.run(["version"], environment: UsageErrorTests.database(["INBOX_HTTP_PORT_FILE": path])))
        #expect(bad.contains("INBOX_HTTP_PORT"), "\(bad)")
        let missing = expectUsageError(
            try await InboxCLI.run(["version"], environment: UsageErrorTests.database(["INBOX_SMTP_PASSWORD_FILE": path + ".missing"])))
        #expect(missing.contains("INBOX_SMTP_PASSWORD_FILE") && missing.contains(path + ".missing"), "\(missing)")
        let both = expectUsageError(
            try await InboxCLI.run(["version"], environment: UsageErrorTests.database(["INBOX_HTTP_PORT_FILE": path, "INBOX_HTTP_PORT": "8080"])))
        #expect(both.contains("both"), "\(both)")
    }

    static func database(_ extra: [String: String]) -> [String: String] { InboxCLI.unreachableDatabase.merging(extra) { $1 } }

    @Test func anArgumentToVersionExitsWithTwoAndOneLine() async throws {
        let result = try await InboxCLI.run(["version", "extra"])
        let line = expectUsageError(result)
        #expect(line.contains("extra"))
    }

    // MARK: Settings

    @Test(arguments: [
        ("INBOX_DB_POOL_SIZE", "abc"),
        ("INBOX_DB_POOL_SIZE", "0"),
        ("INBOX_POLL_INTERVAL_MS", "5"),
        ("INBOX_POLL_INTERVAL_MS", "soon"),
        ("INBOX_PROJECTOR_READ_INTERVAL_MS", "-1"),
        ("INBOX_PROJECTOR_READ_INTERVAL_MS", "5000"),
        ("INBOX_LOG_FORMAT", "xml"),
        ("DATABASE_URL", "mysql://x"),
        ("INBOX_SCHEDULE_INTERVAL_SECONDS", "5"),
        ("INBOX_SHOP_REMINDER_GAP_SECONDS", "two hours"),
        ("INBOX_SHOP_REMINDER_WINDOW_DAYS", "0"),
    ])
    func aBadSettingExitsWithTwoAndASentenceNamingTheVariable(variable: String, value: String) async throws {
        let result = try await InboxCLI.run(["events", "tail"], environment: [variable: value])
        let line = expectUsageError(result)
        #expect(line.contains(variable))
        #expect(line.hasSuffix("."), "a sentence: \(line)")
    }

    @Test func aBadSettingGivenAsAFlagIsRefusedLikeTheVariable() async throws {
        let result = try await InboxCLI.run(["--pool-size=abc", "events", "tail"])
        let line = expectUsageError(result)
        #expect(line.contains("--pool-size"))
    }

    @Test func aFlagOverridesAGoodVariableWithABadValue() async throws {
        var environment = InboxCLI.unreachableDatabase
        environment["INBOX_LOG_FORMAT"] = "json"
        let result = try await InboxCLI.run(["--log-format", "xml", "version"], environment: environment)
        let line = expectUsageError(result)
        #expect(line.contains("INBOX_LOG_FORMAT"))
    }

    // MARK: The event document

    @Test func anEventWithoutPayloadIsRefusedNamingPayload() async throws {
        let result = try await InboxCLI.run(["events", "append", #"{"stream":"s-1","type":"message_sent"}"#])
        let line = expectUsageError(result)
        #expect(line.contains(#""payload""#))
    }

    @Test(arguments: [#""hello""#, "[1,2]", "42", "null", "true"])
    func aPayloadThatIsNotAnObjectIsRefusedNamingPayload(payload: String) async throws {
        let result = try await InboxCLI.run(
            ["events", "append", #"{"stream":"s-1","type":"message_sent","payload":\#(payload)}"#])
        let line = expectUsageError(result)
        #expect(line.contains(#""payload""#))
    }

    @Test func anUnknownFieldIsRefusedNamingIt() async throws {
        let result = try await InboxCLI.run(
            ["events", "append", #"{"stream":"s-1","type":"message_sent","payload":{},"colour":"red"}"#])
        let line = expectUsageError(result)
        #expect(line.contains(#""colour""#))
    }

    @Test func aBadEventInABatchIsRefusedNamingItsIndex() async throws {
        let batch = #"[{"stream":"s-1","type":"a","payload":{}},{"stream":"s-1","type":"b","payload":{},"extra":1}]"#
        let result = try await InboxCLI.run(["events", "append", batch])
        let line = expectUsageError(result)
        #expect(line.contains("event 1"))
        #expect(line.contains(#""extra""#))
    }

    @Test(arguments: zip(
        [#"{"stream":7,"type":"t","payload":{}}"#, #"{"type":"t","payload":{}}"#,
         #"{"stream":"s-1","type":["t"],"payload":{}}"#, #"{"stream":"s-1","payload":{}}"#],
        ["stream", "stream", "type", "type"]))
    func aMissingStreamOrTypeOrOneThatIsNotAStringIsRefusedNamingTheField(document: String, field: String) async throws {
        let result = try await InboxCLI.run(["events", "append", document])
        let line = expectUsageError(result)
        #expect(line.contains("\"\(field)\""))
    }

    @Test func anEmptyBatchIsRefused() async throws {
        let result = try await InboxCLI.run(["events", "append", "[]"])
        let line = expectUsageError(result)
        #expect(line.contains("empty"))
    }

    @Test(arguments: ["0", "1.5", #""2""#])
    func aSchemaVersionThatIsNotAWholeNumberOfOneOrMoreIsRefused(version: String) async throws {
        let result = try await InboxCLI.run(
            ["events", "append", #"{"stream":"s-1","type":"t","payload":{},"schemaVersion":\#(version)}"#])
        let line = expectUsageError(result)
        #expect(line.contains(#""schemaVersion""#))
    }

    @Test(arguments: ["-1", "2.5"])
    func anExpectedVersionThatIsNotAWholeNumberOfZeroOrMoreIsRefused(version: String) async throws {
        let result = try await InboxCLI.run(
            ["events", "append", #"{"stream":"s-1","type":"t","payload":{},"expectedVersion":\#(version)}"#])
        let line = expectUsageError(result)
        #expect(line.contains(#""expectedVersion""#))
    }

    /// Bug: `EventsCommand.parseEvents` checks `expectedVersion` for `>= 0` and wholeness but not for
    /// an upper bound, then calls `Int64(number)`, which traps for 1e300 (or anything ≥ 2^63): the
    /// process dies of SIGILL/SIGTRAP instead of refusing the document with exit 2.
    @Test func anExpectedVersionTooLargeForInt64IsRefusedInsteadOfCrashing() async throws {
        let result = try await InboxCLI.run(
            ["events", "append", #"{"stream":"s-1","type":"t","payload":{},"expectedVersion":1e300}"#])
        let line = expectUsageError(result)
        #expect(line.contains(#""expectedVersion""#))
    }

    @Test func metadataWithAnUnknownOriginIsRefusedNamingMetadata() async throws {
        let result = try await InboxCLI.run(
            ["events", "append", #"{"stream":"s-1","type":"t","payload":{},"metadata":{"origin":"app:windows"}}"#])
        let line = expectUsageError(result)
        #expect(line.contains(#""metadata""#))
        #expect(line.contains("app:ios"))
    }

    @Test func appendTakesOneArgument() async throws {
        let result = try await InboxCLI.run(["events", "append", "{}", "{}"])
        expectUsageError(result)
    }
}
