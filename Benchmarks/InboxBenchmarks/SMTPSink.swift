import Foundation
import Glibc

/// A local SMTP peer for the `mail` benchmark, on plain sockets in this process: it answers
/// EHLO, HELO, MAIL, RCPT, RSET, NOOP with 250, DATA with 354, and takes the data up to CRLF.CRLF
/// without keeping it (250 again), QUIT with 221. No TLS, no AUTH, nothing written anywhere: a
/// relay that costs next to nothing, so that the mailer's side is what is measured.
///
/// A test peer, not production code. One thread per connection, each adding up its own CPU time
/// (`cpuSeconds`), so the benchmark can show the sink is not the bottleneck although it shares the
/// process with the mailer.
final class SMTPSink: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let lock = NSLock()
    private var connections: [Int32] = []
    /// CPU seconds of every connection's thread so far, by connection number.
    private var cpu: [Int: Double] = [:]
    private var accepted = 0
    private var mails = 0
    private var bytes = 0

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw BenchmarkFailure(description: "the SMTP sink cannot open a socket: \(String(cString: strerror(errno)))") }
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(listener, pointer, length) == 0 && listen(listener, 16) == 0 && getsockname(listener, pointer, &length) == 0
            }
        }
        guard bound else {
            let reason = String(cString: strerror(errno))
            close(listener)
            throw BenchmarkFailure(description: "the SMTP sink cannot listen on 127.0.0.1: \(reason)")
        }
        self.listener = listener
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.name = "smtp-sink"
        thread.start()
    }

    /// What the sink did so far: mails taken (250 after the data), their bytes as sent (dot-stuffed,
    /// terminator included), connections accepted, and the CPU seconds of its threads.
    var totals: (mails: Int, bytes: Int, connections: Int, cpuSeconds: Double) {
        lock.withLock { (mails, bytes, accepted, cpu.values.reduce(0, +)) }
    }

    /// Stops listening and ends every connection (their threads then return).
    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        lock.withLock {
            for connection in connections { shutdown(connection, Int32(SHUT_RDWR)) }
        }
    }

    private func acceptLoop() {
        while true {
            let connection = accept(listener, nil, nil)
            if connection < 0 {
                if errno == EINTR { continue }
                break
            }
            let number = lock.withLock {
                accepted += 1
                connections.append(connection)
                return accepted
            }
            let thread = Thread { [self] in serve(connection, number: number) }
            thread.name = "smtp-sink-\(number)"
            thread.start()
        }
        close(listener)
    }

    private static func threadCPUSeconds() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// One SMTP session. The data's end is found with a five-byte automaton over CRLF.CRLF,
    /// starting as if CRLF had just been read (the DATA line's), so nothing is buffered but the
    /// command line being read.
    private func serve(_ connection: Int32, number: Int) {
        let started = Self.threadCPUSeconds()
        defer {
            let used = Self.threadCPUSeconds() - started
            lock.withLock {
                cpu[number] = used
                connections.removeAll { $0 == connection }
            }
            close(connection)
        }
        let terminator: [UInt8] = Array("\r\n.\r\n".utf8)
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        var line: [UInt8] = []
        var inData = false
        var matched = 0
        var dataBytes = 0
        guard reply(connection, "220 sink.localhost ESMTP benchmark sink\r\n") else { return }
        while true {
            let count = chunk.withUnsafeMutableBytes { read(connection, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { return }
            var index = 0
            while index < count {
                if inData {
                    while index < count && matched < terminator.count {
                        let byte = chunk[index]
                        matched = byte == terminator[matched] ? matched + 1 : (byte == 13 ? 1 : 0)
                        index += 1
                        dataBytes += 1
                    }
                    if matched == terminator.count {
                        inData = false
                        let used = Self.threadCPUSeconds() - started
                        lock.withLock {
                            mails += 1
                            bytes += dataBytes
                            cpu[number] = used
                        }
                        guard reply(connection, "250 2.0.0 taken and discarded\r\n") else { return }
                    }
                    continue
                }
                let byte = chunk[index]
                index += 1
                line.append(byte)
                guard byte == 10 else {
                    if line.count > 4096 { return }  // no command line is that long
                    continue
                }
                let verb = String(decoding: line.prefix(4), as: UTF8.self).uppercased()
                line.removeAll(keepingCapacity: true)
                let answer: String
                switch verb {
                case "EHLO": answer = "250-sink.localhost\r\n250-8BITMIME\r\n250 SIZE 52428800\r\n"
                case "HELO", "MAIL", "RCPT", "RSET", "NOOP": answer = "250 2.0.0 OK\r\n"
                case "DATA":
                    inData = true
                    matched = 2
                    dataBytes = 0
                    answer = "354 end data with <CR><LF>.<CR><LF>\r\n"
                case "QUIT":
                    _ = reply(connection, "221 2.0.0 bye\r\n")
                    return
                default: answer = "502 5.5.2 not implemented\r\n"
                }
                guard reply(connection, answer) else { return }
            }
        }
    }

    private func reply(_ connection: Int32, _ text: String) -> Bool {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes { send(connection, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if count < 0, errno == EINTR { continue }
            if count <= 0 { return false }
            sent += count
        }
        return true
    }
}
