import Foundation
import Testing

/// `inbox-bench gate` through its command line, as `make bench-gate` runs it, with stand-in
/// benchmark processes (shell scripts speaking `INBOX_BENCH_STEPPED`'s protocol on real pipes) whose
/// rates are known, so that what the gate must answer is known too.
@Suite struct GateCommandTests {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// `swift build --build-tests` (make test) builds it.
    static func inboxBench() throws -> String {
        let path = packageRoot.appendingPathComponent(".build/debug/inbox-bench").path
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw GateTestFailure(description: "\(path) is missing: build it with swift build --build-tests")
        }
        return path
    }

    struct GateTestFailure: Error, CustomStringConvertible {
        var description: String
    }

    /// A stand-in `inbox-bench`: each configuration of INBOX_BENCH_ONLY measures `rates[round % count]`
    /// in round `round`; `gate --help` succeeds unless `hasGate` is false; it exits with 1 after
    /// `dieAfter` rounds when given; after `floodAfter` rounds it writes 70,000 bytes and no line
    /// break, then sleeps 5 s (the gate must give up on it before then).
    static func standIn(in folder: URL, name: String, rates: [Double], hasGate: Bool = true, dieAfter: Int? = nil, floodAfter: Int? = nil) throws -> String {
        let script = """
            #!/bin/bash
            if [[ $1 == gate && $2 == --help ]]; then exit \(hasGate ? 0 : 1); fi
            [[ $INBOX_BENCH_STEPPED == 1 ]] || exit 2
            echo -n "$INBOX_MIGRATIONS_DIR" > "$0.migrations"
            trap 'echo terminated > "$0.terminated"; exit 143' TERM
            rates=(\(rates.map { String($0) }.joined(separator: " ")))
            IFS=, read -ra ids <<< "$INBOX_BENCH_ONLY"
            for ((round = 1; round <= $3; round++)); do
                echo "loading" >&2
                echo "ready $round"
                read -r line || exit 0
                \(dieAfter.map { "(( round > \($0) )) && exit 1" } ?? "")
                \(floodAfter.map { "(( round > \($0) )) && { head -c 70000 /dev/zero | tr '\\0' x; sleep 5; }" } ?? "")
                for id in "${ids[@]}"; do echo "measured $id $round ${rates[round % ${#rates[@]}]}"; done
            done
            """
        let path = folder.appendingPathComponent(name).path
        // Written with O_CLOEXEC: a descriptor open for writing that a process forked meanwhile by
        // a test running beside this one inherited would keep the script from being run (ETXTBSY)
        // for as long as that process lives.
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o755)
        guard descriptor >= 0 else { throw GateTestFailure(description: "cannot write \(path): errno \(errno)") }
        let bytes = Array(script.utf8)
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
        guard written == bytes.count else { throw GateTestFailure(description: "cannot write \(path): errno \(errno)") }
        return path
    }

    struct Outcome {
        var status: Int32
        var output: String
        var record: [String: Any]
        /// Which stand-ins were ended by SIGTERM (their trap ran).
        var terminated: Set<String>
        /// The migrations folder each stand-in was given, and the folder its tree holds (`inTrees`).
        var migrations: [String: (given: String, own: String)] = [:]
    }

    static func gate(
        candidate: [Double], baseline: [Double], paths: String = "append,mail", candidateHasGate: Bool = true, dieAfter: Int? = nil,
        floodAfter: Int? = nil, inTrees: Bool = false
    ) throws -> Outcome {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("gate-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        // In trees: each stand-in is `<tree>/.build/release/inbox-bench` beside `<tree>/sql`, as a
        // build of a checkout is, `release` a link to `.build/<triple>/release` as SwiftPM makes it.
        func place(_ name: String) throws -> (folder: URL, name: String) {
            guard inTrees else { return (folder, name) }
            let tree = folder.appendingPathComponent("\(name)-tree")
            let build = tree.appendingPathComponent(".build/release")
            try FileManager.default.createDirectory(at: tree.appendingPathComponent(".build/x86_64-unknown-linux-gnu/release"), withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: build.path, withDestinationPath: "x86_64-unknown-linux-gnu/release")
            try FileManager.default.createDirectory(at: tree.appendingPathComponent("sql"), withIntermediateDirectories: true)
            try Data("-- \(name)".utf8).write(to: tree.appendingPathComponent("sql/001_event_log.sql"))
            return (build, "inbox-bench")
        }
        let (candidateFolder, candidateName) = try place("candidate")
        let (baselineFolder, baselineName) = try place("baseline")
        let a = try standIn(
            in: candidateFolder, name: candidateName, rates: candidate, hasGate: candidateHasGate, dieAfter: dieAfter, floodAfter: floodAfter)
        let b = try standIn(in: baselineFolder, name: baselineName, rates: baseline)
        let json = folder.appendingPathComponent("gate.json").path
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try inboxBench())
        process.arguments = ["gate", "--baseline-binary", b, "--candidate-binary", a, "--paths", paths, "--json", json]
        var environment = ProcessInfo.processInfo.environment
        environment.removeValue(forKey: "DATABASE_URL")
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        let record = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: json)))) as? [String: Any] ?? [:]
        let terminated = Set(["candidate", "baseline"].filter { FileManager.default.fileExists(atPath: folder.appendingPathComponent("\($0).terminated").path) })
        var migrations: [String: (given: String, own: String)] = [:]
        for (name, binary) in [("candidate", a), ("baseline", b)] {
            let given = (try? String(contentsOfFile: binary + ".migrations", encoding: .utf8)) ?? ""
            let own = URL(fileURLWithPath: binary).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("sql").path
            migrations[name] = (given, own)
        }
        return Outcome(status: process.terminationStatus, output: text, record: record, terminated: terminated, migrations: migrations)
    }

    /// Runs inbox-bench with `arguments`: its exit status and stderr.
    static func inboxBenchErrors(_ arguments: [String]) throws -> (status: Int32, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try inboxBench())
        process.arguments = arguments
        let output = Pipe()
        process.standardError = output
        process.standardOutput = Pipe()
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process.terminationStatus, text)
    }

    static func outcomes(_ record: [String: Any]) -> [String: String] {
        var outcomes: [String: String] = [:]
        for result in record["results"] as? [[String: Any]] ?? [] {
            if let path = result["path"] as? String, let judgement = result["judgement"] as? [String: Any] {
                outcomes[path] = judgement["outcome"] as? String
            }
        }
        return outcomes
    }

    @Test func aBuildAFifthSlowerFallsAndIsNamed() throws {
        let outcome = try Self.gate(candidate: [800, 790, 810, 805, 795], baseline: [1000, 990, 1010, 1005, 995])
        #expect(outcome.status == 1, "\(outcome.output)")
        #expect(outcome.output.contains("FELL: append, mail"))
        #expect(Self.outcomes(outcome.record) == ["append": "fell", "mail": "fell"])
    }

    @Test func theSameBuildPasses() throws {
        let rates = [1000.0, 990, 1010, 1005, 995, 1020, 980]
        let outcome = try Self.gate(candidate: rates, baseline: rates)
        #expect(outcome.status == 0, "\(outcome.output)")
        // Both ended at the end of their stdin, as told, not by a signal.
        #expect(outcome.terminated.isEmpty)
        #expect(outcome.output.contains("PASSED: 2 paths judged, none fell"))
        // Judged after the first 8 pairs: nothing was inconclusive.
        let results = outcome.record["results"] as? [[String: Any]] ?? []
        #expect(results.map { ($0["candidateRates"] as? [Double])?.count } == [8, 8])
    }

    /// A build made in a checkout migrates with that checkout's migrations: a migration that
    /// changed a key since the baseline would otherwise fail the baseline's own code.
    @Test func eachBuildMigratesWithItsOwnTreesMigrations() throws {
        let rates = [1000.0, 990, 1010, 1005, 995, 1020, 980]
        let outcome = try Self.gate(candidate: rates, baseline: rates, inTrees: true)
        #expect(outcome.status == 0, "\(outcome.output)")
        for build in ["candidate", "baseline"] {
            let migrations = try #require(outcome.migrations[build])
            #expect(migrations.given == migrations.own, "\(build)")
            #expect(migrations.given.hasSuffix("\(build)-tree/sql"), "\(build): \(migrations.given)")
        }
    }

    @Test func pairsTooFarApartAreInconclusiveAfterSixteenNeverPassed() throws {
        // The candidate's rounds swing from half to one and a half of the baseline's.
        let outcome = try Self.gate(candidate: [500, 1500, 600, 1400, 1000], baseline: [1000])
        #expect(outcome.status == 4, "\(outcome.output)")
        #expect(outcome.output.contains("INCONCLUSIVE, run again"))
        let results = outcome.record["results"] as? [[String: Any]] ?? []
        #expect(results.map { ($0["candidateRates"] as? [Double])?.count } == [16, 16])
    }

    @Test func aProcessThatDiesIsAFailureNotAVerdict() throws {
        let outcome = try Self.gate(candidate: [1000], baseline: [1000], paths: "append", dieAfter: 3)
        #expect(outcome.status == 3, "\(outcome.output)")
        #expect(outcome.output.contains("FAILED TO RUN: append"))
        #expect(outcome.output.contains("ended during a round"))
        // The other build's process was told to stop with SIGTERM, and could act on it: the gate
        // ignores SIGTERM itself, and a child that inherited that would be killed without
        // cleaning up its embedded PostgreSQL.
        #expect(outcome.terminated == ["baseline"])
    }

    @Test func aProcessThatWritesNoLineBreakIsStoppedNotBuffered() throws {
        let outcome = try Self.gate(candidate: [1000], baseline: [1000], paths: "append", floodAfter: 2)
        #expect(outcome.status == 3, "\(outcome.output)")
        #expect(outcome.output.contains("FAILED TO RUN: append"))
        #expect(outcome.output.contains("wrote more than 64 KiB without a line break"))
        #expect(outcome.terminated.contains("candidate"))
    }

    @Test func aBaselineBuiltBeforeTheGateIsRefusedWithASentence() throws {
        let outcome = try Self.gate(candidate: [1000], baseline: [1000], paths: "append", candidateHasGate: false)
        #expect(outcome.status == 3, "\(outcome.output)")
        #expect(outcome.output.contains("has no gate"))
    }

    @Test func aReleaseWhoseBaselineBinaryHasNoGateStopsBeforeItsBenchmarks() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("gate-test-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let old = try Self.standIn(in: folder, name: "old", rates: [1000], hasGate: false)
        let (status, text) = try Self.inboxBenchErrors([
            "release", "--baseline", Self.packageRoot.appendingPathComponent("Benchmarks/baseline.json").path, "--baseline-binary", old,
            "--report", folder.appendingPathComponent("report").path,
        ])
        #expect(status == 3)
        #expect(text == "inbox-bench: \(old) has no gate (built from a commit before it): write a new baseline (make bench-baseline) to judge against\n")
        // Nothing ran: no report.
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("report").path))
    }

    @Test func aMistakeOnTheCommandLineIsStatusTwoAndOneLine() throws {
        let (status, text) = try Self.inboxBenchErrors(["gate", "--paths", "append"])
        #expect(status == 2)
        #expect(text == "inbox-bench: gate: --baseline-binary is required (the baseline's inbox-bench; make bench-gate builds it)\n")
    }
}
