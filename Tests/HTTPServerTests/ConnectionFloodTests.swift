import Foundation
import HTTPServer
import HTTPTesting
import Synchronization
import Testing

/// One client cannot take the server from everybody else: the per-address limit, the deadline for
/// a whole request, and a second server (the operations listener) that answers while the first is
/// full. Real sockets on loopback; each client address is one of 127.0.0.0/8.
@Suite struct ConnectionFloodTests {
    static let healthCheck = Array("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".utf8)

    static func health(_ request: HTTPRequest) -> HTTPResponse {
        HTTPResponse(status: 200, contentType: "text/plain", body: "up \(request.path)")
    }

    /// Opens `count` connections from each of `sources`; the caller closes them.
    static func hold(_ count: Int, port: UInt16, from sources: [String]) throws -> [Int32] {
        try sources.flatMap { source in try (0..<count).map { _ in try RawHTTPClient.connect(port: port, from: source) } }
    }

    /// Waits up to `timeout` for `count` of `sockets` to be closed by the server; returns how many were.
    static func closedByServer(_ sockets: [Int32], atLeast count: Int, within timeout: Duration) -> Int {
        let deadline = ContinuousClock.now + timeout
        var closed = 0
        repeat {
            closed = sockets.filter(RawHTTPClient.isClosedByServer).count
            if closed >= count { break }
            usleep(20_000)
        } while ContinuousClock.now < deadline
        return closed
    }

    @Test func oneAddressOverItsLimitIsRefusedAtOnceWhileOthersAndTheOperationsListenerAreAnswered() throws {
        let server = try HTTPServer(
            configuration: .init(port: 0, threads: 1, connectionLimit: 40, connectionsPerAddress: 16), handler: Self.health)
        defer { server.shutdown(gracePeriod: .zero) }
        let operations = try HTTPServer(configuration: .init(port: 0, threads: 1, connectionLimit: 8), handler: Self.health)
        defer { operations.shutdown(gracePeriod: .zero) }

        // One address opens 60: the 44 over its 16 are closed as soon as they are accepted.
        let flood = try Self.hold(60, port: server.port, from: ["127.0.0.2"])
        defer { flood.forEach { close($0) } }
        #expect(Self.closedByServer(flood, atLeast: 44, within: .seconds(2)) == 44)
        let other = try RawHTTPClient.exchange(port: server.port, Self.healthCheck, from: "127.0.0.3", timeout: 3)
        #expect(RawHTTPClient.statuses(other) == [200], "another address: \(other)")

        // Three more addresses within their limit fill the server's 40; the operations listener
        // still answers.
        let rest = try Self.hold(16, port: server.port, from: ["127.0.0.4", "127.0.0.5", "127.0.0.6"])
        defer { rest.forEach { close($0) } }
        let full = try RawHTTPClient.exchange(port: server.port, Self.healthCheck, from: "127.0.0.7", timeout: 1)
        #expect(RawHTTPClient.statuses(full).isEmpty, "the full server answered: \(full)")
        let health = try RawHTTPClient.exchange(port: operations.port, Self.healthCheck, from: "127.0.0.7", timeout: 3)
        #expect(RawHTTPClient.statuses(health) == [200], "the operations listener: \(health)")
    }

    /// A path with a deadline of its own (an upload) may take longer to arrive than the server's
    /// deadline; another path sending at the same pace is cut off at the server's.
    @Test func aPathWithADeadlineOfItsOwnMayArriveSlowerAndOnlyThere() throws {
        let server = try HTTPServer(
            configuration: .init(
                port: 0, threads: 1, requestDeadlineSeconds: 1,
                bodyLimits: [.init(method: .post, path: "/upload", maximumBytes: 4096, requestDeadline: .seconds(4))]),
            handler: Self.health)
        defer { server.shutdown(gracePeriod: .zero) }
        func trickle(_ path: String, from source: String) -> String {
            guard let socket = try? RawHTTPClient.connect(port: server.port, from: source) else { return "" }
            defer { close(socket) }
            let head = Array("POST \(path) HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n".utf8)
            _ = send(socket, head, head.count, Int32(MSG_NOSIGNAL))
            for _ in 0..<8 {
                usleep(250_000)
                var byte: UInt8 = 97
                _ = send(socket, &byte, 1, Int32(MSG_NOSIGNAL))
            }
            return RawHTTPClient.readAnswer(socket, timeout: 2)
        }
        let slowUpload = trickle("/upload", from: "127.0.0.3")
        #expect(RawHTTPClient.statuses(slowUpload) == [200], "2 s for an upload with 4 s: \(slowUpload)")
        let slowOther = trickle("/other", from: "127.0.0.4")
        #expect(RawHTTPClient.statuses(slowOther).isEmpty, "2 s for another path with the server's 1 s: \(slowOther)")
    }

    /// The deadline is for each request, counted again from each answer: a keep-alive connection
    /// that sends whole requests in time lives past it, and one that then goes quiet is closed.
    @Test func aKeepAliveConnectionGetsTheDeadlineAfreshForEachRequest() throws {
        let server = try HTTPServer(configuration: .init(port: 0, threads: 1, requestDeadlineSeconds: 1), handler: Self.health)
        defer { server.shutdown(gracePeriod: .zero) }
        let socket = try RawHTTPClient.connect(port: server.port, from: "127.0.0.2")
        defer { close(socket) }
        let started = ContinuousClock.now
        for round in 0..<3 {
            usleep(600_000)
            let request = Array("GET /round-\(round) HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
            _ = send(socket, request, request.count, Int32(MSG_NOSIGNAL))
            let answer = RawHTTPClient.readAnswer(socket, timeout: 2)
            #expect(RawHTTPClient.statuses(answer) == [200] && answer.contains("up /round-\(round)"), "round \(round): \(answer)")
        }
        #expect(ContinuousClock.now - started > .seconds(1), "the requests outlived one deadline")
        let quiet = ContinuousClock.now
        #expect(Self.closedByServer([socket], atLeast: 1, within: .seconds(3)) == 1)
        #expect(ContinuousClock.now - quiet < .milliseconds(2500))
    }

    /// A slowloris: connections that fill the server and send one byte of a request head every
    /// 0.2 s, which restarts libmicrohttpd's idle timer every time. The deadline closes them, so a
    /// health check queued behind them is answered.
    @Test func connectionsTricklingTheirHeadAreClosedAtTheDeadlineAndTheHealthCheckIsAnswered() throws {
        let deadline = 2
        let server = try HTTPServer(
            configuration: .init(port: 0, threads: 1, connectionLimit: 40, connectionsPerAddress: 16, requestDeadlineSeconds: deadline),
            handler: Self.health)
        defer { server.shutdown(gracePeriod: .zero) }
        let opened = ContinuousClock.now
        let slow = try Self.hold(10, port: server.port, from: ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"])
        defer { slow.forEach { close($0) } }
        let closedAfter = Mutex<[Int32: Duration]>([:])
        let stop = Atomic<Bool>(false)
        let head = Array("GET /slow HTTP/1.1\r\nHost: x\r\nX-Trickle: ".utf8) + [UInt8](repeating: 97, count: 200)
        let trickler = Thread {
            var sent = 0
            while !stop.load(ordering: .relaxed) {
                for socket in slow where closedAfter.withLock({ $0[socket] == nil }) {
                    if RawHTTPClient.isClosedByServer(socket) {
                        closedAfter.withLock { $0[socket] = ContinuousClock.now - opened }
                    } else {
                        _ = send(socket, [head[sent % head.count]], 1, Int32(MSG_NOSIGNAL))
                    }
                }
                sent += 1
                usleep(200_000)
            }
        }
        trickler.start()
        let health = try RawHTTPClient.exchange(port: server.port, Self.healthCheck, from: "127.0.0.9", timeout: 6)
        #expect(RawHTTPClient.statuses(health) == [200], "the health check behind the slow connections: \(health)")
        // The deadline, plus the watcher's 0.1 s, the trickler's 0.2 s rounds and a busy machine.
        let bound = Duration.seconds(deadline) + .seconds(2)
        let waitUntil = opened.advanced(by: bound + .milliseconds(500))
        while closedAfter.withLock({ $0.count }) < slow.count && ContinuousClock.now < waitUntil { usleep(50_000) }
        stop.store(true, ordering: .relaxed)
        let lifetimes = closedAfter.withLock { $0 }
        #expect(lifetimes.count == slow.count, "\(slow.count - lifetimes.count) slow connections still open")
        #expect(lifetimes.values.allSatisfy { $0 <= bound }, "longest: \(lifetimes.values.max() ?? .zero), bound \(bound)")
    }
}
