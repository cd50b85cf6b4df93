import Foundation
import InboxTesting
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `inbox run` under systemd's `Type=notify` protocol, with a datagram socket of the test's own in
/// place of systemd's (`NOTIFY_SOCKET`), and `inbox health` against it.
@Suite(.serialized) struct SystemdNotifyTests {
    /// A bound Unix datagram socket, read without blocking.
    final class NotifySocket: @unchecked Sendable {
        let path: String
        let descriptor: Int32

        init() throws {
            path = "/tmp/inbox-notify-\(UUID().uuidString.prefix(8))"
            descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard descriptor >= 0, bound == 0 else { throw POSIXError(.EADDRNOTAVAIL) }
        }

        deinit {
            close(descriptor)
            unlink(path)
        }

        /// The datagrams that arrived by now.
        func drain() -> [String] {
            var messages: [String] = []
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                guard count > 0 else { return messages }
                messages.append(String(decoding: buffer[0..<count], as: UTF8.self))
            }
        }

        /// Waits for a datagram that `matches`, returning every one read meanwhile.
        func wait(timeout: Duration, until matches: (String) -> Bool) async throws -> [String] {
            var seen: [String] = []
            let deadline = ContinuousClock.now + timeout
            while ContinuousClock.now < deadline {
                seen += drain()
                if seen.contains(where: matches) { return seen }
                try await Task.sleep(for: .milliseconds(20))
            }
            Issue.record("no datagram matched within \(timeout); got \(seen)")
            return seen
        }
    }

    static func freePort() throws -> Int {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    @Test func readyOnceTheAPIListensThenTheWatchdogsPingsThenStoppingAndHealthSaysSo() async throws {
        try await withTestDatabase { db in
            let notify = try NotifySocket()
            let ops = try Self.freePort()
            var environment = InboxCLI.databaseEnvironment(db.url)
            environment["INBOX_HTTP_PORT"] = "0"
            environment["INBOX_OPS_PORT"] = String(ops)
            let health = ["INBOX_OPS_PORT": String(ops)]
            let tier = try InboxCLI.start(
                ["run"], environment: environment.merging(["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"]) { $1 })
            defer { tier.cleanUp() }

            let beforeReady = try await notify.wait(timeout: .seconds(60)) { $0.hasPrefix("READY=1") }
            // What arrived with READY=1 in one read may follow it: only what came before counts.
            #expect(!beforeReady.prefix { !$0.hasPrefix("READY=1") }.contains { $0.contains("WATCHDOG=1") }, "no ping before ready: \(beforeReady)")
            // Ready means ready: the operations listener answers /readyz at once.
            let ready = try await InboxCLI.run(["health"], environment: InboxCLI.environment(health))
            #expect(ready.status == 0, "stderr: \(ready.stderr)")
            #expect(ready.stdout.contains("ready: http://127.0.0.1:\(ops)/readyz answered 200"))

            // WATCHDOG_USEC of 0.4 s: a ping every 0.2 s.
            // Counted over the time that really passed: a loaded machine wakes the sleep late.
            _ = notify.drain()
            let started = ContinuousClock.now
            try await Task.sleep(for: .seconds(1.5))
            let pings = notify.drain().filter { $0 == "WATCHDOG=1" }.count
            let expected = Int(((ContinuousClock.now - started) / .milliseconds(200)).rounded())
            #expect((expected - 3...expected + 3).contains(pings), "\(pings) pings in \(ContinuousClock.now - started), about \(expected) expected")

            tier.send(SIGTERM)
            let stopping = try await notify.wait(timeout: .seconds(30)) { $0.hasPrefix("STOPPING=1") }
            #expect(stopping.contains { $0.hasPrefix("STOPPING=1") })
            let result = try await tier.waitForExit(timeout: .seconds(30))
            #expect(result.status == 0, "stderr: \(result.stderr)")

            let gone = try await InboxCLI.run(["health"], environment: InboxCLI.environment(health))
            #expect(gone.status == 1)
            #expect(gone.stderr.contains("inbox: nothing answers at http://127.0.0.1:\(ops)/readyz"), "stderr: \(gone.stderr)")
        }
    }

    @Test func healthWithoutTheOperationsPortSaysWhichSettingIsMissing() async throws {
        let result = try await InboxCLI.run(["health"], environment: InboxCLI.environment([:]))
        #expect(result.status == 2)
        #expect(result.stderr.contains("set INBOX_OPS_PORT"), "stderr: \(result.stderr)")
    }

    @Test func withoutNotifySocketNothingIsToldAndTheRunIsAsBefore() async throws {
        try await withTestDatabase { db in
            var environment = InboxCLI.databaseEnvironment(db.url)
            environment["INBOX_HTTP_PORT"] = "0"
            let tier = try InboxCLI.start(["run"], environment: environment)
            defer { tier.cleanUp() }
            _ = try await tier.waitForStdoutLine(timeout: .seconds(30)) { $0.contains("The API listens") }
            tier.send(SIGTERM)
            let result = try await tier.waitForExit(timeout: .seconds(30))
            #expect(result.status == 0)
            #expect(!result.stderr.contains("systemd"), "stderr: \(result.stderr)")
        }
    }
}
