import Foundation
import InboxTesting
import Synchronization
import Testing

/// How one run of the `inbox` binary ended, with everything it wrote.
struct InboxResult: Sendable {
    var status: Int32
    /// `.exit` when the process called exit; `.uncaughtSignal` when it crashed or was killed.
    var reason: Process.TerminationReason
    var stdout: String
    var stderr: String

    var exitedNormally: Bool { reason == .exit }
    /// The first lines of stderr, for failure messages (a crash writes a long backtrace).
    var stderrHead: String { stderrLines.prefix(4).joined(separator: "\n") }
    var stdoutLines: [String] { Self.lines(stdout) }
    var stderrLines: [String] { Self.lines(stderr) }

    static func lines(_ text: String) -> [String] {
        text.split(separator: "\n", omittingEmptySubsequences: true).map(String.init)
    }

    /// The stdout lines parsed as JSON objects (a line that is not one fails the test).
    func stdoutObjects(sourceLocation: SourceLocation = #_sourceLocation) throws -> [[String: Any]] {
        try stdoutLines.map { line in
            try #require(
                JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                "stdout line is not a JSON object: \(line)", sourceLocation: sourceLocation)
        }
    }
}

/// Runs the real `inbox` binary as a child process. Output goes to temporary files (so neither pipe
/// can fill up and block the child), stdin comes from a file or /dev/null (never the test runner's
/// own stdin), and every run has a deadline: a hang kills the child and fails the test.
enum InboxCLI {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// `INBOX_BINARY` when set, else `<package root>/.build/debug/inbox`.
    static func binary() throws -> URL {
        let environment = ProcessInfo.processInfo.environment
        let url: URL
        if let override = environment["INBOX_BINARY"], !override.isEmpty {
            url = URL(fileURLWithPath: override)
        } else {
            url = TestDatabase.packageRoot.appendingPathComponent(".build/debug/inbox")
        }
        guard FileManager.default.isExecutableFile(atPath: url.path) else {
            throw Failure(
                description: "The inbox binary is missing at \(url.path): build it with `swift build --build-tests` "
                    + "(or set INBOX_BINARY to the binary of another build folder).")
        }
        return url
    }

    /// The test runner's environment without any inbox setting (so `make test`'s INBOX_MIGRATIONS_DIR
    /// or a developer's DATABASE_URL never leaks into a run), plus `extra`. A crash prints its fatal
    /// error without the Swift backtracer's pages of registers.
    static func environment(_ extra: [String: String]) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment.filter { key, _ in
            !key.hasPrefix("INBOX_") && key != "DATABASE_URL"
        }
        environment["SWIFT_BACKTRACE"] = "enable=no"
        environment.merge(extra) { _, new in new }
        return environment
    }

    /// The environment for a run against `databaseURL`, migrated from the repository's `sql/`.
    static func databaseEnvironment(_ databaseURL: String, _ extra: [String: String] = [:]) -> [String: String] {
        var environment = [
            "DATABASE_URL": databaseURL,
            "INBOX_MIGRATIONS_DIR": TestDatabase.migrationsDirectory.path,
            "INBOX_LOG_FORMAT": "json",
            // The key the test process seals with (InboxTesting.TestPersonalData).
            "INBOX_PERSONAL_DATA_KEY_FILE": TestPersonalData.keyFile,
        ]
        environment.merge(extra) { _, new in new }
        return environment
    }

    /// For runs that must be refused before they touch a database: should one get that far after
    /// all, it fails fast on a server that does not exist instead of starting an embedded PostgreSQL.
    static let unreachableDatabase = ["DATABASE_URL": "postgres://inbox@127.0.0.1:1/none?connect_timeout=2"]

    /// Runs `inbox arguments...` to completion.
    /// `executable`: another program than `inbox` (a shell that runs it in a pipeline).
    static func run(
        _ arguments: [String], environment: [String: String] = unreachableDatabase, stdin: String? = nil,
        timeout: Duration = .seconds(60), executable: URL? = nil
    ) async throws -> InboxResult {
        let child = try RunningInbox(arguments, environment: environment, stdin: stdin, executable: executable)
        defer { child.cleanUp() }
        return try await child.waitForExit(timeout: timeout)
    }

    /// Starts `inbox arguments...` in the background; the caller stops it (and calls `cleanUp`).
    static func start(_ arguments: [String], environment: [String: String]) throws -> RunningInbox {
        try RunningInbox(arguments, environment: environment, stdin: nil)
    }
}

/// One `inbox` child process, its working folder and its output files.
final class RunningInbox: Sendable {
    let arguments: [String]
    let process: Process
    let folder: URL
    let stdoutFile: URL
    let stderrFile: URL
    /// The exit status as `waitpid` gave it, when this harness reaped the child itself (see `reapIfExited`).
    private let reaped = Mutex<Int32?>(nil)

    fileprivate init(_ arguments: [String], environment: [String: String], stdin: String?, executable: URL? = nil) throws {
        self.arguments = arguments
        let binary = try executable ?? InboxCLI.binary()
        let files = FileManager.default
        folder = files.temporaryDirectory.appendingPathComponent("inbox-cli-test-\(UUID().uuidString)")
        try files.createDirectory(at: folder, withIntermediateDirectories: true)
        stdoutFile = folder.appendingPathComponent("stdout")
        stderrFile = folder.appendingPathComponent("stderr")
        _ = files.createFile(atPath: stdoutFile.path, contents: nil)
        _ = files.createFile(atPath: stderrFile.path, contents: nil)

        process = Process()
        process.executableURL = binary
        process.arguments = arguments
        process.environment = InboxCLI.environment(environment)
        // A folder of its own: an accidental embedded PostgreSQL (.inbox/) never lands in the repository.
        process.currentDirectoryURL = folder
        do {
            process.standardOutput = try FileHandle(forWritingTo: stdoutFile)
            process.standardError = try FileHandle(forWritingTo: stderrFile)
            if let stdin {
                let stdinFile = folder.appendingPathComponent("stdin")
                _ = files.createFile(atPath: stdinFile.path, contents: Data(stdin.utf8))
                process.standardInput = try FileHandle(forReadingFrom: stdinFile)
            } else {
                process.standardInput = FileHandle.nullDevice
            }
            try process.run()
        } catch {
            cleanUp()
            throw error
        }
    }

    var commandLine: String { (["inbox"] + arguments).joined(separator: " ") }

    /// What the process has written to stdout so far.
    var stdoutSoFar: String { (try? String(contentsOf: stdoutFile, encoding: .utf8)) ?? "" }
    var stderrSoFar: String { (try? String(contentsOf: stderrFile, encoding: .utf8)) ?? "" }

    /// Waits for the first stdout line that satisfies `matches`, failing after `timeout`.
    func waitForStdoutLine(
        timeout: Duration = .seconds(15), where matches: (String) -> Bool
    ) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while true {
            // Only complete lines: the last one may still be half written.
            let text = stdoutSoFar
            let complete = text.hasSuffix("\n") ? text : String(text[..<(text.lastIndex(of: "\n") ?? text.startIndex)])
            if let line = InboxResult.lines(complete).first(where: matches) { return line }
            if !process.isRunning {
                throw InboxCLI.Failure(
                    description: "\(commandLine) exited (status \(process.terminationStatus)) before printing the line; "
                        + "stdout: \(text) stderr: \(stderrSoFar)")
            }
            if ContinuousClock.now >= deadline {
                throw InboxCLI.Failure(
                    description: "\(commandLine) did not print the line within \(timeout); stdout: \(text) stderr: \(stderrSoFar)")
            }
            try await Task.sleep(for: .milliseconds(25))
        }
    }

    /// Waits for the first stderr line that satisfies `matches`, failing after `timeout` (or when the
    /// process exits before writing it).
    func waitForStderrLine(
        timeout: Duration = .seconds(15), where matches: (String) -> Bool
    ) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while true {
            // Only complete lines: the last one may still be half written.
            let text = stderrSoFar
            let complete = text.hasSuffix("\n") ? text : String(text[..<(text.lastIndex(of: "\n") ?? text.startIndex)])
            if let line = InboxResult.lines(complete).first(where: matches) { return line }
            if !process.isRunning {
                throw InboxCLI.Failure(
                    description: "\(commandLine) exited (status \(process.terminationStatus)) before writing the line to stderr; "
                        + "stderr: \(text)")
            }
            if ContinuousClock.now >= deadline {
                throw InboxCLI.Failure(description: "\(commandLine) did not write the line to stderr within \(timeout); stderr: \(text)")
            }
            try await Task.sleep(for: .milliseconds(25))
        }
    }

    /// Sends `signal` to the process.
    func send(_ signal: Int32) {
        if process.isRunning && reaped.withLock({ $0 == nil }) { kill(process.processIdentifier, signal) }
    }

    /// Reaps the child when it has exited and Foundation has not noticed: with many children at
    /// once, Foundation's `Process` on Linux was seen to leave some as zombies with `isRunning`
    /// true for good (as `Subprocess` says of `runuser`), and `waitUntilExit` then spun for ever on
    /// a thread of the cooperative pool; two such waits stopped the whole test run. `wait`: block
    /// until it exits (only after SIGKILL, so the wait is short). The status, once reaped, is kept.
    @discardableResult
    private func reapIfExited(wait: Bool = false) -> Int32? {
        reaped.withLock { reaped in
            if reaped != nil { return reaped }
            var status: Int32 = 0
            if waitpid(process.processIdentifier, &status, wait ? 0 : WNOHANG) == process.processIdentifier { reaped = status }
            // -1 (ECHILD): Foundation reaped it first, and `isRunning` says so.
            return reaped
        }
    }

    /// Waits for the process to end; after `timeout` it is killed and the wait fails.
    func waitForExit(timeout: Duration = .seconds(60)) async throws -> InboxResult {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            if let status = reapIfExited() {
                // Exited behind Foundation's back: the status is waitpid's.
                let signalled = status & 0x7F != 0
                return InboxResult(
                    status: signalled ? status & 0x7F : (status >> 8) & 0xFF, reason: signalled ? .uncaughtSignal : .exit, stdout: stdoutSoFar,
                    stderr: stderrSoFar)
            }
            if ContinuousClock.now >= deadline {
                kill(process.processIdentifier, SIGKILL)
                reapIfExited(wait: true)
                throw InboxCLI.Failure(
                    description: "\(commandLine) did not finish within \(timeout) and was killed; "
                        + "stdout: \(stdoutSoFar) stderr: \(stderrSoFar)")
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        process.waitUntilExit()  // returns at once; makes terminationStatus/Reason final
        return InboxResult(
            status: process.terminationStatus, reason: process.terminationReason, stdout: stdoutSoFar, stderr: stderrSoFar)
    }

    /// Kills the process if it still runs and removes its folder.
    func cleanUp() {
        if process.isRunning && reapIfExited() == nil {
            kill(process.processIdentifier, SIGKILL)
            // Not `waitUntilExit`, which spins for ever on an exit Foundation missed.
            reapIfExited(wait: true)
        }
        try? FileManager.default.removeItem(at: folder)
    }
}
