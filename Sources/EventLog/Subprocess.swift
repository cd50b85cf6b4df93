import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs a command to completion with posix_spawn and waitpid. Foundation's `Process` was seen to
/// miss the exit of `runuser` when `pg_ctl start` leaves a server running behind it (the child
/// stayed a zombie and `waitUntilExit` never returned), so the embedded cluster uses this instead.
public enum Subprocess {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Runs `executable` with `arguments`; stdout and stderr go to a temporary file whose text is
    /// returned. Throws with that text when the exit status is not 0.
    public static func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-\(UUID().uuidString).out").path
        defer { unlink(outputPath) }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)

        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, executable, &actions, nil, argv, environ)
        guard spawned == 0 else {
            throw Failure(description: "\(executable) could not be started: \(String(cString: strerror(spawned)))")
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 {
            guard errno == EINTR else { throw Failure(description: "waiting for \(executable) failed: \(String(cString: strerror(errno)))") }
        }
        let output = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        // WIFEXITED / WEXITSTATUS, which Swift does not import as macros.
        let exitStatus: Int32 = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return (exitStatus, output)
    }

    /// Waits at most `timeout` for `process` (started with Foundation's `Process`) to end, and
    /// says whether it did. The same miss as above: a child that has exited can stay a zombie
    /// while `isRunning` says true and `waitUntilExit` never returns (seen with the tests' mock
    /// servers under `make test`), so the child is reaped here when Foundation has not.
    @discardableResult
    public static func waitForExit(of process: Process, timeout: Duration = .seconds(5)) -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if !process.isRunning { return true }
            var status: Int32 = 0
            if waitpid(process.processIdentifier, &status, WNOHANG) == process.processIdentifier { return true }
            usleep(10_000)
        }
        return !process.isRunning
    }
}
