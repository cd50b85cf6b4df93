import Foundation
import Lifecycle
import Testing

@Suite struct TestClockTests {
    @Test func aSleepEndsWhenTheClockIsMovedPastItsDeadlineAndNotBefore() async throws {
        let clock = TestClock()
        let woke = Task { try await clock.sleep(for: .seconds(10)) }
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(9))
        #expect(clock.sleepers == 1)
        clock.advance(by: .seconds(1))
        try await woke.value
        #expect(clock.sleepers == 0)
        #expect(clock.now.offset == .seconds(10))
    }

    @Test func aCancelledSleepThrowsAtOnce() async throws {
        let clock = TestClock()
        let sleeping = Task { try await clock.sleep(for: .seconds(10)) }
        try await clock.waitForSleepers(1)
        sleeping.cancel()
        await #expect(throws: CancellationError.self) { try await sleeping.value }
        #expect(clock.sleepers == 0)
    }
}

@Suite struct BackoffTests {
    @Test func waitsDoubleUpToTheMaximumAndStartOverAfterAReset() {
        var backoff = Backoff(initial: .milliseconds(100), maximum: .milliseconds(500))
        #expect((0..<5).map { _ in backoff.nextDelay() } == [.milliseconds(100), .milliseconds(200), .milliseconds(400), .milliseconds(500), .milliseconds(500)])
        backoff.reset()
        #expect(backoff.nextDelay() == .milliseconds(100))
    }
}

@Suite struct LoggerTests {
    @Test func linesBelowTheLevelAreNotWrittenAndMetadataIsMerged() {
        let log = RecordingLogHandler()
        var logger = Logger(label: "test", level: .info, metadata: ["role": "api"], handler: log)
        logger.debug("not written")
        logger.info("written", metadata: ["requestId": "r1"])
        logger[metadataKey: "role"] = "projector"
        logger.with(["projection": "bell"]).error("with more")
        #expect(log.messages == ["written", "with more"])
        #expect(log.records[0].metadata == ["role": "api", "requestId": "r1"])
        #expect(log.records[1].metadata == ["role": "projector", "projection": "bell"])
        #expect(log.records[1].level == .error)
    }

    @Test func aJSONLineIsOneObjectWhateverTheTextHolds() throws {
        let record = LogRecord(
            level: .warning, label: "test", message: "a \"quoted\"\nline\u{1}", metadata: ["path": "C:\\tmp", "level": "overridden"],
            date: Date(timeIntervalSince1970: 1_764_460_800.25))
        let line = StreamLogHandler.jsonLine(record)
        #expect(!line.contains("\n"))
        let object = try #require(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String])
        #expect(object == ["level": "warning", "message": "a \"quoted\"\nline\u{1}", "path": "C:\\tmp", "time": "2025-11-30T00:00:00.250000Z"])
        #expect(line.hasPrefix(#"{"level":"warning","message":"#))
    }

    /// Numbers and booleans are JSON's own in a JSON line (a collector compares and sums them), and
    /// a number JSON cannot hold is null; the text line writes each as it reads.
    @Test func aJSONLineWritesNumbersAndBooleansTyped() throws {
        let record = LogRecord(
            level: .info, label: "test", message: "request",
            metadata: ["status": .int(200), "durationMs": .number(1.25), "cached": true, "route": "/healthz", "bad": .number(.nan), "quoted": "200"],
            date: Date(timeIntervalSince1970: 0))
        let line = StreamLogHandler.jsonLine(record)
        #expect(line.contains(#""status":200"#) && line.contains(#""durationMs":1.25"#) && line.contains(#""cached":true"#))
        #expect(line.contains(#""bad":null"#) && line.contains(#""quoted":"200""#))
        let object = try #require(JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["status"] as? Int == 200 && object["route"] as? String == "/healthz")
        #expect(StreamLogHandler.textLine(record).hasPrefix("info: request bad=null cached=true durationMs=1.25 quoted=200 route=/healthz status=200"))
    }

    @Test func aTextLineIsTheLevelTheMessageAndTheMetadataInOrder() {
        let record = LogRecord(level: .info, label: "test", message: "took the lease", metadata: ["projection": "bell", "backend": "42"], date: Date())
        #expect(StreamLogHandler.textLine(record) == "info: took the lease backend=42 projection=bell")
    }
}
