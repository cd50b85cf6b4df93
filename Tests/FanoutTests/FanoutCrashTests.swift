import Devices
import EventLog
import Fanout
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

/// kill -9 of `inbox fanout` in the middle of sending, then a new one: every push in the outbox
/// reaches the mock, and what goes out twice is at most what was in flight, and is reported.
@Suite(.serialized) struct FanoutCrashTests {
    /// Starts the real binary (`.build/debug/inbox`, or `INBOX_BINARY`) as `inbox fanout`.
    static func startFanout(
        _ db: TestDatabase, _ mock: PushMock, serviceAccount: URL, log: URL, batch: Int = 10, claimSeconds: Int = 5
    ) throws -> Process {
        let binary = ProcessInfo.processInfo.environment["INBOX_BINARY"].map { URL(fileURLWithPath: $0) }
            ?? TestDatabase.packageRoot.appendingPathComponent(".build/debug/inbox")
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw PushMock.Failure(description: "the inbox binary is missing at \(binary.path): `swift build --build-tests` builds it")
        }
        var environment = ProcessInfo.processInfo.environment.filter { key, _ in !key.hasPrefix("INBOX_") && key != "DATABASE_URL" }
        environment.merge([
            "DATABASE_URL": db.url, "INBOX_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path, "INBOX_LOG_FORMAT": "text",
            "INBOX_PERSONAL_DATA_KEY_FILE": TestPersonalData.keyFile,
            "INBOX_FCM_SERVICE_ACCOUNT": serviceAccount.path, "INBOX_FCM_URL": "https://127.0.0.1:\(mock.fcm)",
            "INBOX_PUSH_CA_FILE": mock.caFile, "INBOX_PUSH_CLAIM_SECONDS": String(claimSeconds), "INBOX_FANOUT_BATCH": String(batch), "INBOX_FANOUT_WORKERS": "1",
            "INBOX_POLL_INTERVAL_MS": "100", "SWIFT_BACKTRACE": "enable=no",
        ]) { _, new in new }
        let process = Process()
        process.executableURL = binary
        process.arguments = ["fanout"]
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        let output = try FileHandle(forWritingTo: log)
        output.seekToEndOfFile()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        return process
    }

    @Test func aFanOutKilledMidStreamLosesNothingAndDoublesAtMostWhatWasInFlight() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            let people = 60
            let log = try await Self.signIns(people, tokens: "fine", db, mock)
            let account = try Self.serviceAccount(mock)
            // Slow answers, so that a batch is in flight when the process dies: with 300 ms, a loaded
            // machine once saw all six batches answered before the kill landed, and with a second
            // once more, at a load average of 16 (the kill comes after the second batch arrives; the
            // four after it take ten seconds now).
            try await mock.post("/delay", #"{"ms": 2500}"#)
            let first = try Self.startFanout(db, mock, serviceAccount: account, log: log)
            _ = try await mock.waitForPushes { $0.count >= 15 }
            kill(first.processIdentifier, SIGKILL)
            first.waitUntilExit()
            #expect(first.terminationReason == .uncaughtSignal)
            let beforeRestart = try await mock.pushes().count
            #expect(beforeRestart < people, "killed mid-stream")
            try await mock.post("/delay", #"{"ms": 0}"#)
            let second = try Self.startFanout(db, mock, serviceAccount: account, log: log)
            defer {
                second.terminate()
                second.waitUntilExit()
            }
            try await db.waitUntilFannedOut(timeout: .seconds(60))
            let tokens = try await mock.pushes().map(\.token)
            let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            #expect(Set(tokens) == Set((0..<people).map { "fine-\($0)" }), "every push delivered: \(output.suffix(2000))")
            let doubled = tokens.count - Set(tokens).count
            #expect(doubled <= 10, "at most one batch (10) was in flight: \(doubled) sent twice")
            let reclaimed = try await db.counter("reclaimed")
            #expect(Int64(doubled) <= reclaimed && reclaimed <= 10, "the pushes taken over are counted: \(reclaimed), doubled \(doubled)")
            // A kill between two batches leaves nothing claimed: then nothing is taken over (rare
            // with answers this slow, but a busy machine can deliver the signal late).
            if reclaimed > 0 { #expect(output.contains("took over pushes claimed by a fan-out that stopped"), "and logged") }
        }
    }

    /// `people` Android phones (tokens `prefix-<n>`), a sign-in notification for each projected
    /// into the outbox, and an empty log for the fan-outs the test starts.
    static func signIns(_ people: Int, tokens prefix: String, _ db: TestDatabase, _ mock: PushMock) async throws -> URL {
        for person in 0..<people { _ = try db.register("p\(person)", "android", token: "\(prefix)-\(person)", locale: "en") }
        try await db.withProjectors {
            _ = try await db.store.append(
                try (0..<people).map { try NewEvent(catalogueEvent: SignedIn(personId: "p\($0)", signInId: "s\($0)", platform: "web")) })
            try await db.waitUntilProjected()
        }
        let log = mock.directory.appendingPathComponent("fanout.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        return log
    }

    /// The service account of the mock, with its token endpoint.
    static func serviceAccount(_ mock: PushMock) throws -> URL {
        let account = mock.directory.appendingPathComponent("account-with-uri.json")
        var json = try JSONSerialization.jsonObject(with: Data(contentsOf: mock.directory.appendingPathComponent("fcm-service-account.json")))
            as! [String: Any]
        json["token_uri"] = mock.fcmTokenURI
        try JSONSerialization.data(withJSONObject: json).write(to: account)
        return account
    }

    /// kill -9 again and again while a thousand security notifications go out in batches of 200,
    /// a few streams at a time (so that a batch is answered bit by bit): nothing is lost, what a
    /// crash sends again is at most what was in flight at the kill (answers are recorded as they
    /// arrive, not per batch), every copy sent again is counted, and it carries the collapse key
    /// of its first copy, so the phone shows it once.
    @Test func aFanOutKilledAgainAndAgainLosesNothingAndEveryCopyReplacesItsFirst() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            let people = 1_000, kills = 6, streams = 10, batch = 200
            let log = try await Self.signIns(people, tokens: "k", db, mock)
            let account = try Self.serviceAccount(mock)
            // Each connection takes `streams` at a time, answered 20 ms later: a batch of 200 takes
            // ten waves, and a kill lands in the middle of one.
            try await mock.post("/streams", #"{"max": \#(streams)}"#)
            try await mock.post("/delay", #"{"ms": 20}"#)
            for kill in 1...kills {
                let fanout = try Self.startFanout(db, mock, serviceAccount: account, log: log, batch: batch, claimSeconds: 5)
                let target = people * kill / (kills + 2)
                _ = try await mock.waitForPushes(timeout: .seconds(60)) { $0.count >= target }
                Foundation.kill(fanout.processIdentifier, SIGKILL)
                fanout.waitUntilExit()
                #expect(fanout.terminationReason == .uncaughtSignal)
            }
            try await mock.post("/delay", #"{"ms": 0}"#)
            let last = try Self.startFanout(db, mock, serviceAccount: account, log: log, batch: batch, claimSeconds: 5)
            defer {
                last.terminate()
                last.waitUntilExit()
            }
            try await db.waitUntilFannedOut(timeout: .seconds(90))
            let pushes = try await mock.pushes()
            let byToken = Dictionary(grouping: pushes, by: \.token)
            let doubled = pushes.count - byToken.count
            let reclaimed = try await db.counter("reclaimed")
            print("kill test: \(pushes.count) pushes for \(people) notifications, \(kills) kills, \(doubled) sent twice, reclaimed \(reclaimed)")
            #expect(Set(byToken.keys) == Set((0..<people).map { "k-\($0)" }), "nothing lost")
            // In flight at a kill: at most `streams` per connection, two connections per host, and
            // the answers of the moment that were being recorded: twice that is a generous bound,
            // where recording per batch doubled 660 to 840 of the 1,000.
            #expect(doubled <= kills * 2 * streams * 2, "\(doubled) sent twice in \(kills) kills")
            #expect(Int64(doubled) <= reclaimed, "every copy sent again is counted: \(reclaimed)")
            for (token, copies) in byToken where copies.count > 1 {
                #expect(Set(copies.map(\.collapse)).count == 1, "\(token): one collapse key for every copy")
                #expect(copies[0].collapse == "notification:" + (copies[0].data["notificationId"] ?? "?"), "\(token)")
            }
        }
    }
}
