import Foundation
import HTTP2Client
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A server that answers a few streams per connection and then sends GOAWAY: the streams it did
/// not take come back retryable (or libcurl retries them itself on a new connection), none hangs,
/// and later requests open a new connection. nghttpd cannot be told to send GOAWAY, so this is a
/// bare HTTP/2 server over cleartext (prior knowledge), just enough frames for GETs.
@Suite struct GoawayTests {
    // Unfinished (issue 11): against this bare server, 1 of 20 is answered and the other 19 fail at
    // once as retryable CURLE_HTTP2 (16) — no hang — but the request sent after the GOAWAY fails with
    // 16 too instead of opening a new connection. Not yet known whether the bare server is at fault
    // (curl's own CLI gets its first answer from it) or libcurl 7.88. Enable to work on it.
    @Test(.disabled("unfinished: the request after the GOAWAY fails with CURLE_HTTP2; see the comment"))
    func aGoawayFailsTheRefusedStreamsRetryablyAndLaterRequestsUseANewConnection() async throws {
        let server = try GoawayServer(answersPerConnection: 5)
        defer { server.stop() }
        let client = try HTTP2Client(configuration: .init(maxConnectionsPerHost: 2, cleartextHTTP2: true))
        defer { client.shutdown() }
        let url = "http://127.0.0.1:\(server.port)/"
        let started = ContinuousClock.now
        let results = await client.send((0..<20).map { _ in HTTP2Request(url: url, timeout: .seconds(5)) })
        #expect(ContinuousClock.now - started < .seconds(4), "a refused stream waited for its timeout")
        var answered = 0
        for result in results {
            switch result {
            case .success(let response):
                #expect(response.status == 200 && response.httpVersion == 2)
                answered += 1
            case .failure(let error):
                #expect(error.isRetryable, "\(error)")
                #expect(error.curlCode != 28, "timed out rather than failed: \(error)")
            }
        }
        #expect(answered >= 5)
        let before = client.connectionsOpened
        let later = try await client.send(HTTP2Request(url: url, timeout: .seconds(5)))
        #expect(later.status == 200)
        #expect(client.connectionsOpened > before || before >= 2, "opened \(client.connectionsOpened)")
        #expect(server.connections >= 2)
    }
}

/// Accepts connections on 127.0.0.1; on each, answers the first `answersPerConnection` HEADERS
/// with `:status 200` and END_STREAM, then sends GOAWAY naming the last answered stream and
/// closes the connection a moment later.
final class GoawayServer: @unchecked Sendable {
    let port: UInt16
    private let listener: Int32
    private let answersPerConnection: Int
    private let count = NSLock()
    private var accepted = 0  // under `count`

    var connections: Int { count.withLock { accepted } }

    init(answersPerConnection: Int) throws {
        let (socket, port) = try silentListener()
        self.listener = socket
        self.port = port
        self.answersPerConnection = answersPerConnection
        Thread { [self] in acceptLoop() }.start()
    }

    func stop() { shutdown(listener, Int32(SHUT_RDWR)); close(listener) }

    private func acceptLoop() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 { return }
            count.withLock { accepted += 1 }
            Thread { [self] in serve(connection) }.start()
        }
    }

    private func serve(_ connection: Int32) {
        defer { close(connection) }
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(connection, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard read(connection, 24) != nil else { return }  // the client preface
        write(connection, frame(type: 4, flags: 0, stream: 0, payload: []))  // our SETTINGS
        var answered = 0
        var lastStream: UInt32 = 0
        while let header = read(connection, 9) {
            let length = Int(header[0]) << 16 | Int(header[1]) << 8 | Int(header[2])
            let type = header[3]
            let flags = header[4]
            let stream = UInt32(header[5] & 0x7f) << 24 | UInt32(header[6]) << 16 | UInt32(header[7]) << 8 | UInt32(header[8])
            guard length == 0 || read(connection, length) != nil else { return }
            if type == 4 && flags & 1 == 0 {
                write(connection, frame(type: 4, flags: 1, stream: 0, payload: []))  // SETTINGS ACK
            } else if type == 1 {
                if answered < answersPerConnection {
                    // HEADERS, END_STREAM | END_HEADERS, HPACK static index 8 (":status: 200").
                    write(connection, frame(type: 1, flags: 0x05, stream: stream, payload: [0x88]))
                    answered += 1
                    lastStream = stream
                } else if answered == answersPerConnection {
                    answered += 1
                    let goaway = bigEndian(lastStream) + bigEndian(0)  // NO_ERROR
                    write(connection, frame(type: 7, flags: 0, stream: 0, payload: goaway))
                    usleep(100_000)
                    return
                }
            }
        }
    }

    private func frame(type: UInt8, flags: UInt8, stream: UInt32, payload: [UInt8]) -> [UInt8] {
        let length = payload.count
        return [UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff), type, flags] + bigEndian(stream) + payload
    }

    private func bigEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value >> 24 & 0xff), UInt8(value >> 16 & 0xff), UInt8(value >> 8 & 0xff), UInt8(value & 0xff)]
    }

    private func read(_ connection: Int32, _ count: Int) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        var have = 0
        while have < count {
            let got = bytes.withUnsafeMutableBytes { recv(connection, $0.baseAddress! + have, count - have, 0) }
            if got <= 0 { return nil }
            have += got
        }
        return bytes
    }

    private func write(_ connection: Int32, _ bytes: [UInt8]) {
        _ = bytes.withUnsafeBytes { send(connection, $0.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) }
    }
}
