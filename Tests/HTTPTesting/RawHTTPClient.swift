import Foundation

/// A plain TCP client for tests that need to put exact bytes on the wire (pipelining, chunked
/// bodies, oversized headers): it sends what it is given and reads until the server closes.
public enum RawHTTPClient {
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Sends `request` to 127.0.0.1:`port` from the loopback address `source` and returns
    /// everything the server wrote until it closed the connection (or `timeout` passed).
    public static func exchange(port: UInt16, _ request: [UInt8], from source: String = "127.0.0.1", timeout: TimeInterval = 10) throws -> String {
        try exchangeReporting(port: port, request, from: source, timeout: timeout).answer
    }

    /// `exchange`, saying also whether all of `request` could be sent: a client that stops at a
    /// failed send (curl and most HTTP stacks do) never reads the answer when it could not.
    public static func exchangeReporting(
        port: UInt16, _ request: [UInt8], from source: String = "127.0.0.1", timeout: TimeInterval = 10
    ) throws -> (sentAll: Bool, answer: String) {
        let (sentAll, received) = try send(port: port, request, from: source, timeout: timeout)
        return (sentAll, String(decoding: received, as: UTF8.self))
    }

    /// The bytes of `exchangeReporting`: sends `request` whole (or until the server stops taking
    /// it; the server may answer and close before reading everything) and reads until it closes.
    public static func send(
        port: UInt16, _ request: [UInt8], from source: String = "127.0.0.1", timeout: TimeInterval = 10
    ) throws -> (sentAll: Bool, received: [UInt8]) {
        let socket = try connect(port: port, from: source)
        defer { close(socket) }
        var time = timeval(tv_sec: Int(timeout), tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        var sent = 0
        while sent < request.count {
            let written = request[sent...].withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written <= 0 { break }
            sent += written
        }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            received.append(contentsOf: buffer[0..<count])
        }
        return (sent == request.count, received)
    }

    /// A connection to 127.0.0.1:`port` from `source` (any address of 127.0.0.0/8 is this machine
    /// on Linux, so each looks like another client); the caller closes the socket.
    /// `receiveBuffer`: the socket's receive buffer, set before it connects (a small one keeps a
    /// reader that stops reading from holding megabytes of the kernel's memory).
    public static func connect(port: UInt16, from source: String, receiveBuffer: Int32? = nil) throws -> Int32 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw Failure(description: "socket() failed") }
        if var bytes = receiveBuffer { setsockopt(socket, SOL_SOCKET, SO_RCVBUF, &bytes, socklen_t(MemoryLayout<Int32>.size)) }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        var address = local
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) } }
        let connected =
            bound == 0
            ? withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket, $0, length) } } : -1
        guard connected == 0 else {
            let reason = String(cString: strerror(errno))
            close(socket)
            throw Failure(description: "connect() from \(source) failed: \(reason)")
        }
        return socket
    }

    /// Reads one answer from a connection kept open: its head, then as many body bytes as its
    /// `Content-Length` says (empty if nothing complete came within `timeout`).
    public static func readAnswer(_ socket: Int32, timeout: TimeInterval) -> String {
        var time = timeval(tv_sec: Int(timeout), tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let text = String(decoding: received, as: UTF8.self)
            if let end = text.range(of: "\r\n\r\n") {
                let length = text[..<end.lowerBound].split(separator: "\r\n")
                    .first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                if text.utf8.count - text[..<end.upperBound].utf8.count >= length { return text }
            }
            let count = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            if count <= 0 { return "" }
            received.append(contentsOf: buffer[0..<count])
        }
    }

    /// Whether the server has closed `socket` (read its end, or reset it), without waiting.
    public static func isClosedByServer(_ socket: Int32) -> Bool {
        var byte: UInt8 = 0
        let count = recv(socket, &byte, 1, Int32(MSG_DONTWAIT | MSG_PEEK))
        return count == 0 || (count < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }

    /// The status codes of the responses in `text`, in order.
    /// (A response begins right after the previous one's body, so they are found by their status
    /// line's start, wherever it is; the tests' bodies never contain it.)
    public static func statuses(_ text: String) -> [Int] {
        text.components(separatedBy: "HTTP/1.1 ").dropFirst().compactMap { Int($0.prefix(3)) }
    }
}
