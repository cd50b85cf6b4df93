import EventLog
import Foundation

// Test support, meant to be copied: a throwaway certificate authority and a server certificate for
// 127.0.0.1 and localhost, made with the `openssl` command (Debian's `openssl` package) in a fresh
// temporary directory. Depends only on Foundation.

/// Something a test needs could not be set up; the test fails with this message (never skips).
struct TestSetupError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A CA (`caFile`, to trust) and a server key and certificate signed by it, valid for a day.
struct TestCertificates: Sendable {
    let directory: String
    var caFile: String { directory + "/ca.pem" }
    var keyFile: String { directory + "/server.key" }
    var certificateFile: String { directory + "/server.pem" }

    /// Makes the files in a new temporary directory; `remove()` deletes it.
    static func make() throws -> TestCertificates {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("test-tls-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let certificates = TestCertificates(directory: directory)
        let extensions = directory + "/server.ext"
        try Data(
            """
            subjectAltName = DNS:localhost, IP:127.0.0.1
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature, keyEncipherment
            extendedKeyUsage = serverAuth

            """.utf8
        ).write(to: URL(fileURLWithPath: extensions))
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try runTool(
            "openssl",
            ["req", "-x509"] + ec + [
                "-keyout", directory + "/ca.key", "-out", certificates.caFile, "-days", "1", "-subj", "/CN=Wristler test CA",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ])
        try runTool(
            "openssl",
            ["req"] + ec + ["-keyout", certificates.keyFile, "-out", directory + "/server.csr", "-subj", "/CN=localhost"])
        try runTool(
            "openssl",
            [
                "x509", "-req", "-in", directory + "/server.csr", "-CA", certificates.caFile, "-CAkey", directory + "/ca.key",
                "-CAcreateserial", "-out", certificates.certificateFile, "-days", "1", "-extfile", extensions,
            ])
        return certificates
    }

    func remove() { try? FileManager.default.removeItem(atPath: directory) }
}

/// Runs a command found on PATH (or in /usr/sbin, /sbin) to its end; throws with its output when
/// it cannot be found or fails.
@discardableResult
func runTool(_ name: String, _ arguments: [String]) throws -> String {
    guard let path = findExecutable(name) else {
        throw TestSetupError("\(name) is not installed (PATH: \(ProcessInfo.processInfo.environment["PATH"] ?? ""))")
    }
    // Output to a file, not a pipe: a server another test starts at the same moment can inherit a
    // pipe's write end, and reading to its end then waits for that server (seen: a hung run).
    let (status, text) = try Subprocess.run(path, arguments)
    guard status == 0 else {
        throw TestSetupError("\(name) \(arguments.joined(separator: " ")) exited \(status): \(text)")
    }
    return text
}

func findExecutable(_ name: String) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
    let directories = path.split(separator: ":").map(String.init) + ["/usr/sbin", "/sbin", "/usr/local/sbin"]
    return directories.map { $0 + "/" + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
}
