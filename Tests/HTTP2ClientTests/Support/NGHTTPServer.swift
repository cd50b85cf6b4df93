import EventLog
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

// Test support, meant to be copied: Debian's `nghttpd` (package `nghttp2-server`) as a local TLS
// HTTP/2 server on a free port of 127.0.0.1, plus plain sockets for "nobody listens" and "listens
// but never answers". Needs TestCertificates.swift (TestSetupError, runTool, findExecutable).

/// A running `nghttpd`; `stop()` ends it (also on deinit) and keeps its log for messages.
final class NGHTTPServer: @unchecked Sendable {
    let port: UInt16
    let logFile: String
    private let process: Process

    /// Starts `nghttpd` serving files from `htdocs` (for any method), with the server's stream
    /// limit when given; waits until it accepts connections. With `echoUpload`, a POST or PUT
    /// answers its own body (nghttpd then writes each upload to a temporary file: slow, so not for
    /// throughput). Throws with the server's own output when it cannot start.
    static func start(
        certificates: TestCertificates, htdocs: String? = nil, echoUpload: Bool = true, maxConcurrentStreams: Int? = nil,
        workers: Int = 1, extraArguments: [String] = []
    ) throws -> NGHTTPServer {
        guard let executable = findExecutable("nghttpd") else {
            throw TestSetupError("nghttpd is not installed: apt-get install nghttp2-server")
        }
        var lastFailure = ""
        // A port found free can be taken before nghttpd binds it: a few tries.
        for attempt in 1...3 {
            let port = try freePort()
            let logFile = certificates.directory + "/nghttpd-\(port)-\(attempt).log"
            _ = FileManager.default.createFile(atPath: logFile, contents: nil)
            guard let log = FileHandle(forWritingAtPath: logFile) else { throw TestSetupError("cannot write \(logFile)") }
            var arguments = ["--address=127.0.0.1", "--workers=\(workers)"]
            if echoUpload { arguments.append("--echo-upload") }
            if let htdocs { arguments.append("--htdocs=\(htdocs)") }
            if let maxConcurrentStreams { arguments.append("--max-concurrent-streams=\(maxConcurrentStreams)") }
            arguments += extraArguments
            arguments += [String(port), certificates.keyFile, certificates.certificateFile]
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
            process.standardOutput = log
            process.standardError = log
            process.standardInput = FileHandle.nullDevice
            try process.run()
            let deadline = ContinuousClock.now + .seconds(5)
            while process.isRunning && ContinuousClock.now < deadline {
                if canConnect(port: port) { return NGHTTPServer(port: port, logFile: logFile, process: process) }
                usleep(20_000)
            }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            Subprocess.waitForExit(of: process)
            lastFailure = "nghttpd \(arguments.joined(separator: " ")) did not listen within 5 s: "
                + ((try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "")
        }
        throw TestSetupError(lastFailure)
    }

    private init(port: UInt16, logFile: String, process: Process) {
        self.port = port
        self.logFile = logFile
        self.process = process
    }

    deinit { stop() }

    func url(_ path: String = "/") -> String { "https://127.0.0.1:\(port)\(path)" }

    /// SIGKILL: a child of the test runner inherits its blocked signals, so nghttpd never sees SIGTERM.
    func stop() {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            Subprocess.waitForExit(of: process)
        }
    }

    var log: String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }
}

/// A TCP port on 127.0.0.1 that nothing listened on a moment ago.
func freePort() throws -> UInt16 {
    let socket = try boundSocket(port: 0)
    defer { close(socket) }
    return try localPort(socket)
}

/// A socket that listens on 127.0.0.1 and never accepts: the kernel completes the TCP handshake,
/// then nothing answers. Close it with `close`.
func silentListener() throws -> (socket: Int32, port: UInt16) {
    let socket = try boundSocket(port: 0)
    guard listen(socket, 128) == 0 else {
        close(socket)
        throw TestSetupError("listen: \(String(cString: strerror(errno)))")
    }
    return (socket, try localPort(socket))
}

func boundSocket(port: UInt16) throws -> Int32 {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { throw TestSetupError("socket: \(String(cString: strerror(errno)))") }
    var yes: Int32 = 1
    setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
    var address = loopback(port: port)
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else {
        close(descriptor)
        throw TestSetupError("bind: \(String(cString: strerror(errno)))")
    }
    return descriptor
}

func localPort(_ socket: Int32) throws -> UInt16 {
    var address = sockaddr_in()
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let result = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) }
    }
    guard result == 0 else { throw TestSetupError("getsockname: \(String(cString: strerror(errno)))") }
    return UInt16(bigEndian: address.sin_port)
}

func canConnect(port: UInt16) -> Bool {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { return false }
    defer { close(descriptor) }
    var address = loopback(port: port)
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    } == 0
}

func loopback(port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return address
}
