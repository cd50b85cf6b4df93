import Foundation
import HTTPServer
import HTTPTesting
import Synchronization
import Testing

/// RFC 9112's framing rules through real sockets: what a proxy in front and this server could read
/// differently is refused at once (and the connection closed), never guessed, and every request is
/// answered promptly.
@Suite struct HTTPFramingTests {
    /// A server that counts what reaches its handler.
    final class Counted: Sendable {
        final class Counter: Sendable {
            let value = Atomic<Int>(0)
        }
        let handled = Counter()
        let server: HTTPServer

        init() throws {
            let handled = handled
            server = try HTTPServer(configuration: .init(port: 0, threads: 2)) { request in
                handled.value.add(1, ordering: .relaxed)
                return HTTPServerTests.echo(request)
            }
        }

        var count: Int { handled.value.load(ordering: .relaxed) }

        /// The answer to `request` and how long it took (the exchange reads until the server
        /// closes, or 5 s).
        func exchange(_ request: String) throws -> (reply: String, seconds: Double) {
            let started = ContinuousClock.now
            let reply = try RawHTTPClient.exchange(port: server.port, Array(request.utf8), timeout: 5)
            let elapsed = ContinuousClock.now - started
            return (reply, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
        }
    }

    /// §6.1: Transfer-Encoding with Content-Length is how a request is smuggled past a proxy that
    /// trusts the length: a 400, the connection closed, nothing handled (not even what follows).
    @Test func transferEncodingBesideContentLengthIsA400AndTheConnectionCloses() throws {
        let server = try Counted()
        defer { server.server.shutdown() }
        let (reply, seconds) = try server.exchange(
            "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(RawHTTPClient.statuses(reply) == [400], "\(reply)")
        #expect(reply.contains("\"code\":\"conflicting_framing\"") && reply.lowercased().contains("connection: close"), "\(reply)")
        #expect(seconds < 2, "answered at once, the connection closed")
        #expect(server.count == 0)
    }

    /// §6.1: chunked must be the final coding of a request (else its end is unknown: 400 and close);
    /// a coding this server does not decode is a 501. Both at once, not at the request's deadline.
    @Test(arguments: [
        ("chunked, identity", 400), ("xchunked", 400), ("identity", 400), ("chunked, chunked", 400), ("gzip, chunked", 501),
    ])
    func aTransferEncodingOtherThanChunkedIsRefusedAtOnce(coding: String, status: Int) throws {
        let server = try Counted()
        defer { server.server.shutdown() }
        let (reply, seconds) = try server.exchange("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \(coding)\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        #expect(RawHTTPClient.statuses(reply) == [status], "\(reply)")
        #expect(reply.lowercased().contains("connection: close"), "\(reply)")
        #expect(seconds < 2)
        #expect(server.count == 0)
        let chunked = try server.exchange(
            "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
        #expect(RawHTTPClient.statuses(chunked.reply) == [200] && chunked.reply.contains("body=5"), "\(chunked.reply)")
    }

    /// §3.2: an HTTP/1.1 request has exactly one Host.
    @Test func anHTTP11RequestWithoutOneHostIsA400() throws {
        let server = try Counted()
        defer { server.server.shutdown() }
        let none = try server.exchange("GET /x HTTP/1.1\r\nConnection: close\r\n\r\n")
        #expect(RawHTTPClient.statuses(none.reply) == [400] && none.reply.contains("\"header\":\"Host\""), "\(none.reply)")
        let two = try server.exchange("GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n")
        #expect(RawHTTPClient.statuses(two.reply) == [400] && two.reply.contains("\"header\":\"Host\""), "\(two.reply)")
        #expect(server.count == 0)
        let old = try server.exchange("GET /x HTTP/1.0\r\n\r\n")
        #expect(RawHTTPClient.statuses(old.reply) == [200], "HTTP/1.0 has no Host to require: \(old.reply)")
    }

    /// However many query parameters a URL holds, the request is answered at once: up to 256 they
    /// reach the handler, beyond they are a 414 (libmicrohttpd 0.9.75 answered nothing for a
    /// thousand, until the request's deadline).
    @Test(arguments: [(256, 200), (257, 414), (1_000, 414), (9_000, 414)])
    func aURLWithManyParametersIsAnsweredAtOnce(count: Int, status: Int) throws {
        let server = try Counted()
        defer { server.server.shutdown() }
        let query = (0..<count).map { "a=\($0 % 10)" }.joined(separator: "&")
        let (reply, seconds) = try server.exchange("GET /x?\(query) HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        #expect(RawHTTPClient.statuses(reply) == [status], "\(reply.prefix(300))")
        #expect(seconds < 2, "answered in \(seconds) s")
        if status == 200 {
            #expect(reply.components(separatedBy: "&a=").count == count, "every parameter reaches the handler")
        } else {
            #expect(reply.contains("too_many_query_parameters") && server.count == 0, "\(reply.prefix(300))")
        }
    }

    /// A refused query with a body and a request after it on the same connection: the 414 closes
    /// the connection, so neither the body nor what follows is read as a request.
    @Test func aTooLongQueryWithABodyClosesTheConnection() throws {
        let server = try Counted()
        defer { server.server.shutdown() }
        let query = (0..<300).map { "a=\($0 % 10)" }.joined(separator: "&")
        let (reply, seconds) = try server.exchange(
            "POST /x?\(query) HTTP/1.1\r\nHost: x\r\nContent-Length: 32\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
                + "GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
        #expect(RawHTTPClient.statuses(reply) == [414], "\(reply.prefix(400))")
        #expect(seconds < 2)
        #expect(server.count == 0)
    }
}
