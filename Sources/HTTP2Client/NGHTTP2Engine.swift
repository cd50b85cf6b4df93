/// The HTTP/2 engine on libnghttp2 directly: framing, HPACK, flow control, SETTINGS and GOAWAY are
/// nghttp2's, TLS (with ALPN `h2`, certificate and host name checks) is OpenSSL's; this file only
/// moves bytes between them and a socket, and maps streams to callers.
///
/// **One thread.** `send` queues requests under the engine's lock and writes the eventfd once per
/// hand-over; the loop thread owns every socket, `SSL` and `nghttp2_session`, sleeps in `poll` on
/// the eventfd and its sockets, and is the only thread that touches them. DNS (`getaddrinfo`) runs
/// on the loop thread, blocking, once per new connection: cheap for the IP literals and few
/// provider hosts the fan-out talks to, and a stall only while a connection is being made.
///
/// **Per loop turn.** New requests join their host's backlog; each ready connection (TLS done, the
/// server's first SETTINGS read, no GOAWAY) takes from it up to min(`maxConcurrentStreams`, the
/// server's SETTINGS_MAX_CONCURRENT_STREAMS) streams; nghttp2 serialises every queued frame into one
/// buffer (`nghttp2_session_mem_send`) that goes out in one `SSL_write`; reads take 64 KiB at a
/// time into `nghttp2_session_mem_recv`. A host's backlog opens another connection (up to
/// `maxConnectionsPerHost`) only when no connection of it is still being set up, so a burst does not
/// open connections it cannot fill.
///
/// **Failures.** A stream the server did not process (REFUSED_STREAM, or above a GOAWAY's
/// last_stream_id, which nghttp2 closes as REFUSED_STREAM) goes back to the front of its host's
/// backlog, for another connection (at most `maxAttempts` times, then it fails retryable). Errors
/// carry the libcurl code of the same failure (`curlCode`), so callers read one vocabulary whichever
/// engine ran.
import CNGHTTP2
import COpenSSL
import Foundation
import Synchronization
import Threads

#if canImport(Glibc)
    import Glibc
#endif

final class NGHTTP2Engine: Sendable {
    typealias Configuration = HTTP2Client.Configuration
    private let inbox: Locked<Inbox>
    private let wakeDescriptor: Int32
    private let finished: Latch
    private let counters: Counters

    init(configuration: Configuration) throws {
        let descriptor = wristler_eventfd()
        guard descriptor >= 0 else {
            throw HTTP2ClientError(kind: .transport, message: "eventfd: \(String(cString: strerror(errno)))", isRetryable: false)
        }
        self.wakeDescriptor = descriptor
        self.inbox = Locked(Inbox())
        self.finished = Latch()
        self.counters = Counters()
        let loop = try H2Loop(
            configuration: configuration, inbox: inbox, wakeDescriptor: descriptor, finished: finished, counters: counters)
        let thread = Thread {
            Thread.current.name = "http2-nghttp2"
            loop.run()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    deinit {
        shutdown()
        close(wakeDescriptor)
    }

    var connectionsOpened: Int { counters.connectionsOpened.load(ordering: .relaxed) }

    func shutdown() {
        if inbox.withLock({ $0.stop() }) { signal() }
        finished.wait()
    }

    /// Queues `items` and wakes the loop unless a wake-up is already on its way; false once stopping.
    func hand(_ items: [Pending]) -> Bool {
        guard let wake = inbox.withLock({ $0.add(items) }) else { return false }
        if wake { signal() }
        return true
    }

    private func signal() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakeDescriptor, $0.baseAddress, 8) }
    }
}

// MARK: - libcurl's codes for the same failures

enum CurlCode {
    static let unsupportedProtocol = 1
    static let couldntResolveHost = 6
    static let couldntConnect = 7
    static let http2 = 16
    static let operationTimedOut = 28
    static let sslConnectError = 35
    static let sendError = 55
    static let recvError = 56
    static let peerFailedVerification = 60
    static let fileSizeExceeded = 63
    static let sslCACertBadFile = 77
    static let http2Stream = 92
}

// MARK: - Streams, connections, hosts (loop thread only)

/// One request on its way: from the host's backlog to a stream and back to its caller.
private final class Stream {
    let item: Pending
    let deadline: ContinuousClock.Instant
    /// Where the path starts in the request's URL (its bytes go to `:path` as they are).
    let pathOffset: Int
    /// `maxResponseBytes`: a body past it fails the stream.
    let limit: Int
    var bodySent = 0
    var status = 0
    var headers: [(name: String, value: String)] = []
    var body: [UInt8] = []
    var headerBytes = 0
    var remoteEnded = false
    /// Decided before the stream closed (too large, headers too large): reported when it closes.
    var failure: HTTP2ClientError?
    var done = false
    var attempts = 0
    var id: Int32 = 0

    init(item: Pending, deadline: ContinuousClock.Instant, pathOffset: Int, limit: Int) {
        self.item = item
        self.deadline = deadline
        self.pathOffset = pathOffset
        self.limit = limit
    }

    func finish(_ result: Result<HTTP2Response, HTTP2ClientError>) {
        if done { return }
        done = true
        item.completion.finish(result)
    }
}

private final class Host {
    let prefix: String
    let secure: Bool
    /// For DNS, SNI and the certificate check (IPv6 without brackets).
    let name: String
    let port: UInt16
    /// `:authority` as written in the URL.
    let authority: [UInt8]
    var backlog: [Stream] = []
    var backlogHead = 0
    var connections: [Connection] = []
    /// After a connection that never became ready, the next waits this long (while another
    /// connection of the host carries its streams): no reconnect storm against a refusing server.
    var openNotBefore = ContinuousClock.Instant.now

    init(prefix: String, secure: Bool, name: String, port: UInt16, authority: [UInt8]) {
        self.prefix = prefix
        self.secure = secure
        self.name = name
        self.port = port
        self.authority = authority
    }

    var waiting: Int { backlog.count - backlogHead }

    func compactBacklog() {
        if backlogHead == backlog.count {
            backlog.removeAll(keepingCapacity: backlog.count <= 4096)
            backlogHead = 0
        } else if backlogHead > 4096 && backlogHead * 2 > backlog.count {
            backlog.removeFirst(backlogHead)
            backlogHead = 0
        }
    }

    /// Back to the front (a stream the server did not process keeps its place in line).
    func putBack(_ stream: Stream) {
        if backlogHead > 0 {
            backlogHead -= 1
            backlog[backlogHead] = stream
        } else {
            backlog.insert(stream, at: 0)
        }
    }
}

private final class Connection {
    enum State {
        case connecting, handshaking, open, closed
    }

    unowned let host: Host
    unowned let loop: H2Loop
    var descriptor: Int32 = -1
    var ssl: OpaquePointer?
    var session: OpaquePointer?
    var state = State.connecting
    var settingsReceived = false
    var goingAway = false
    /// Why it closed, when it did not close cleanly: its streams and (when it never became ready)
    /// its host's backlog fail with this.
    var failure: HTTP2ClientError?
    var everReady = false
    var streams: [Int32: Stream] = [:]
    /// Streams the server did not process, to go back to the host's backlog.
    var refused: [Stream] = []
    var output: [UInt8] = []
    var outputStart = 0
    /// The socket must become writable before anything else moves (connect, TLS, a full send buffer).
    var wantsWritable = false
    var setupDeadline: ContinuousClock.Instant
    var addresses: [(storage: sockaddr_storage, length: socklen_t)] = []
    var addressIndex = 0

    init(host: Host, loop: H2Loop, setupDeadline: ContinuousClock.Instant) {
        self.host = host
        self.loop = loop
        self.setupDeadline = setupDeadline
        output.reserveCapacity(1 << 16)
    }

    var ready: Bool { state == .open && settingsReceived && !goingAway }
    var settingUp: Bool { state == .connecting || state == .handshaking || (state == .open && !settingsReceived) }
}

// MARK: - The loop

private final class H2Loop: @unchecked Sendable {
    typealias Configuration = HTTP2Client.Configuration
    let configuration: Configuration
    let inbox: Locked<Inbox>
    let wakeDescriptor: Int32
    let finished: Latch
    let counters: Counters

    static let maxAttempts = 5
    static let maxResponseHeaderBytes = 64 << 10
    static let readSize = 64 << 10
    static let writeBatch = 64 << 10

    let callbacks: OpaquePointer
    let options: OpaquePointer
    var tls: OpaquePointer?
    var tlsError: HTTP2ClientError?
    var hosts: [String: Host] = [:]
    var lastHost: Host?
    var connections: [Connection] = []
    var pollSet: [pollfd] = []
    let readBuffer: UnsafeMutableRawBufferPointer
    var earliestDeadline = ContinuousClock.Instant.now + .seconds(3600)
    // Scratch for building one request's header block.
    var scratch: [UInt8] = []
    var fields: [(nameStart: Int, nameLength: Int, valueStart: Int, valueLength: Int)] = []
    var vector: [nghttp2_nv] = []

    init(configuration: Configuration, inbox: Locked<Inbox>, wakeDescriptor: Int32, finished: Latch, counters: Counters) throws {
        self.configuration = configuration
        self.inbox = inbox
        self.wakeDescriptor = wakeDescriptor
        self.finished = finished
        self.counters = counters
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else {
            throw HTTP2ClientError(kind: .transport, message: "nghttp2_session_callbacks_new failed", isRetryable: false)
        }
        nghttp2_session_callbacks_set_on_header_callback(callbacks, onHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, onDataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, onFrame)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, onStreamClose)
        nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks, onFrameNotSent)
        var options: OpaquePointer?
        guard nghttp2_option_new(&options) == 0, let options else {
            nghttp2_session_callbacks_del(callbacks)
            throw HTTP2ClientError(kind: .transport, message: "nghttp2_option_new failed", isRetryable: false)
        }
        // Until the server's SETTINGS arrive no stream is opened anyway (see `ready`); this is a
        // second guard.
        nghttp2_option_set_peer_max_concurrent_streams(options, 1)
        self.callbacks = callbacks
        self.options = options
        self.readBuffer = .allocate(byteCount: Self.readSize, alignment: 16)
    }

    deinit {
        nghttp2_session_callbacks_del(callbacks)
        nghttp2_option_del(options)
        readBuffer.deallocate()
    }

    func run() {
        // A write to a socket the server closed raises SIGPIPE on this thread; blocked, it stays
        // pending instead of ending the process (OpenSSL writes with write(2), not MSG_NOSIGNAL).
        var blocked = sigset_t()
        sigemptyset(&blocked)
        sigaddset(&blocked, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &blocked, nil)

        var taken: [Pending] = []
        while true {
            let stopping = inbox.withLock { $0.take(into: &taken) }
            if stopping {
                for item in taken { item.completion.finish(.failure(.shutDown)) }
                break
            }
            if !taken.isEmpty {
                let now = ContinuousClock.now
                for item in taken { admit(item, now: now) }
                taken.removeAll(keepingCapacity: true)
            }
            if ContinuousClock.now >= earliestDeadline { sweep() }
            reap()
            for connection in connections where connection.refused.count > 0 { requeueRefused(connection) }
            for host in hosts.values where host.waiting > 0 { dispatch(host) }
            for connection in connections where connection.state == .open { flush(connection) }
            reap()
            waitAndDrive()
        }
        tearDown()
        finished.open()
    }

    // MARK: Admission

    private func admit(_ item: Pending, now: ContinuousClock.Instant) {
        let url = item.request.url
        let host: Host
        let pathOffset: Int
        if let last = lastHost, let offset = Self.pathOffset(url, after: last.prefix) {
            host = last
            pathOffset = offset
        } else {
            switch parse(url) {
            case .failure(let error):
                item.completion.finish(.failure(error))
                return
            case .success(let (found, offset)):
                host = found
                pathOffset = offset
                lastHost = found
            }
        }
        if let problem = Self.validate(item.request, pathOffset: pathOffset) {
            item.completion.finish(.failure(problem))
            return
        }
        let deadline = item.enqueued + item.request.timeout
        if deadline < earliestDeadline { earliestDeadline = deadline }
        host.backlog.append(Stream(item: item, deadline: deadline, pathOffset: pathOffset, limit: configuration.maxResponseBytes))
    }

    /// The offset of the path when `url` starts with `prefix` followed by `/`, `?` or nothing.
    private static func pathOffset(_ url: String, after prefix: String) -> Int? {
        let bytes = url.utf8
        let count = prefix.utf8.count
        guard bytes.count >= count, bytes.starts(with: prefix.utf8) else { return nil }
        if bytes.count == count { return count }
        let next = bytes[bytes.index(bytes.startIndex, offsetBy: count)]
        return next == UInt8(ascii: "/") || next == UInt8(ascii: "?") ? count : nil
    }

    private func parse(_ url: String) -> Result<(Host, Int), HTTP2ClientError> {
        let bytes = Array(url.utf8)
        func invalid(_ why: String) -> Result<(Host, Int), HTTP2ClientError> {
            .failure(HTTP2ClientError(kind: .invalidRequest, message: "bad URL \(url.debugDescription): \(why)", isRetryable: false))
        }
        guard let schemeEnd = bytes.firstRange(of: Array("://".utf8))?.lowerBound else { return invalid("no scheme") }
        let scheme = String(decoding: bytes[..<schemeEnd], as: UTF8.self).lowercased()
        let secure: Bool
        switch scheme {
        case "https": secure = true
        case "http": secure = false
        default: return invalid("not http or https")
        }
        let authorityStart = schemeEnd + 3
        var authorityEnd = authorityStart
        while authorityEnd < bytes.count && bytes[authorityEnd] != UInt8(ascii: "/") && bytes[authorityEnd] != UInt8(ascii: "?")
            && bytes[authorityEnd] != UInt8(ascii: "#")
        {
            authorityEnd += 1
        }
        let authority = Array(bytes[authorityStart..<authorityEnd])
        guard !authority.isEmpty else { return invalid("no host") }
        if authority.contains(UInt8(ascii: "@")) { return invalid("user information is not supported") }
        var name: [UInt8]
        var portText: [UInt8] = []
        if authority[0] == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { return invalid("unclosed [") }
            name = Array(authority[1..<close])
            let rest = authority[(close + 1)...]
            if !rest.isEmpty {
                guard rest.first == UInt8(ascii: ":") else { return invalid("junk after ]") }
                portText = Array(rest.dropFirst())
            }
        } else if let colon = authority.lastIndex(of: UInt8(ascii: ":")) {
            name = Array(authority[..<colon])
            portText = Array(authority[(colon + 1)...])
        } else {
            name = authority
        }
        var port = secure ? 443 : 80
        if !portText.isEmpty {
            guard portText.count <= 5, portText.allSatisfy({ $0 >= 48 && $0 <= 57 }), let value = Int(String(decoding: portText, as: UTF8.self)),
                value > 0 && value < 65536
            else { return invalid("bad port") }
            port = value
        }
        guard !name.isEmpty, name.allSatisfy({ $0 > 32 && $0 < 127 }) else { return invalid("bad host") }
        for index in name.indices where name[index] >= 65 && name[index] <= 90 { name[index] += 32 }
        let prefix = String(decoding: bytes[..<authorityEnd], as: UTF8.self)
        let host: Host
        if let known = hosts[prefix] {
            host = known
        } else {
            host = Host(
                prefix: prefix, secure: secure, name: String(decoding: name, as: UTF8.self), port: UInt16(port), authority: authority)
            hosts[prefix] = host
        }
        return .success((host, authorityEnd))
    }

    /// What HTTP/2 cannot carry: a header with a line break or NUL (it would split into two), a
    /// name with a colon or none, a URL with spaces or control characters.
    private static func validate(_ request: HTTP2Request, pathOffset: Int) -> HTTP2ClientError? {
        for header in request.headers {
            if header.name.isEmpty || header.name.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 58 || $0 == 0 || $0 == 32 })
                || Self.holdsLineBreakOrNUL(header.value)
            {
                return HTTP2ClientError(kind: .invalidRequest, message: "header \(header.name.debugDescription) cannot be sent", isRetryable: false)
            }
        }
        if request.method.isEmpty || request.method.utf8.contains(where: { $0 <= 32 || $0 >= 127 }) {
            return HTTP2ClientError(kind: .invalidRequest, message: "method \(request.method.debugDescription) cannot be sent", isRetryable: false)
        }
        if request.url.utf8.dropFirst(pathOffset).contains(where: { $0 <= 32 || $0 == 127 }) {
            return HTTP2ClientError(kind: .invalidRequest, message: "URL \(request.url.debugDescription) has spaces or control characters", isRetryable: false)
        }
        return nil
    }

    // MARK: Dispatch

    private func capacity(_ connection: Connection) -> Int {
        guard connection.ready, let session = connection.session else { return 0 }
        let remote = Int(nghttp2_session_get_remote_settings(session, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS))
        return min(max(1, configuration.maxConcurrentStreams), remote) - connection.streams.count
    }

    private func dispatch(_ host: Host) {
        while host.waiting > 0 {
            var best: Connection?
            var bestRoom = 0
            for connection in host.connections {
                let room = capacity(connection)
                if room > bestRoom {
                    best = connection
                    bestRoom = room
                }
            }
            guard let connection = best else { break }
            // Fill this one up to the next one's room, so streams spread over the connections.
            var taken = 0
            while taken < bestRoom && host.waiting > 0 && connection.ready {
                let stream = host.backlog[host.backlogHead]
                host.backlogHead += 1
                submit(stream, on: connection)
                taken += 1
                if taken >= 64 { break }
            }
        }
        host.compactBacklog()
        if host.waiting > 0 && !host.connections.contains(where: { $0.settingUp }) && ContinuousClock.now >= host.openNotBefore {
            let live = host.connections.filter { $0.state != .closed && !$0.goingAway }.count
            if live < max(1, configuration.maxConnectionsPerHost) { open(host) }
        }
    }

    private func submit(_ stream: Stream, on connection: Connection) {
        guard let session = connection.session else { return }
        let request = stream.item.request
        let host = connection.host
        scratch.removeAll(keepingCapacity: true)
        fields.removeAll(keepingCapacity: true)
        func field(_ name: some Collection<UInt8>, _ value: some Collection<UInt8>, lowercase: Bool = false) {
            let nameStart = scratch.count
            // Names are mostly given in lower case already: then they are copied whole.
            if lowercase && name.contains(where: { $0 >= 65 && $0 <= 90 }) {
                for byte in name { scratch.append(byte >= 65 && byte <= 90 ? byte + 32 : byte) }
            } else {
                scratch.append(contentsOf: name)
            }
            let valueStart = scratch.count
            scratch.append(contentsOf: value)
            fields.append((nameStart, valueStart - nameStart, valueStart, scratch.count - valueStart))
        }
        field(":method".utf8, request.method.utf8)
        field(":scheme".utf8, (host.secure ? "https" : "http").utf8)
        field(":authority".utf8, host.authority)
        var path = request.url.utf8.dropFirst(stream.pathOffset)
        if let hash = path.firstIndex(of: UInt8(ascii: "#")) { path = path[..<hash] }
        if path.isEmpty || path.first == UInt8(ascii: "?") {
            let start = scratch.count
            field(":path".utf8, "/".utf8)
            if !path.isEmpty {
                scratch.append(contentsOf: path)
                fields[fields.count - 1].valueLength = scratch.count - fields[fields.count - 1].valueStart
            }
            _ = start
        } else {
            field(":path".utf8, path)
        }
        var hasLength = false
        for header in request.headers {
            let name = header.name.utf8
            if Self.isConnectionSpecific(name) { continue }
            if name.count == 14 && header.name.lowercased() == "content-length" { hasLength = true }
            field(name, header.value.utf8, lowercase: true)
        }
        let hasBody = !request.body.isEmpty
        if !hasLength && (hasBody || request.method == "POST" || request.method == "PUT" || request.method == "PATCH") {
            field("content-length".utf8, String(request.body.count).utf8)
        }
        let pointer = Unmanaged.passUnretained(stream).toOpaque()
        let id: Int32 = scratch.withUnsafeMutableBufferPointer { buffer in
            vector.removeAll(keepingCapacity: true)
            let base = buffer.baseAddress!
            for field in fields {
                vector.append(
                    nghttp2_nv(
                        name: base + field.nameStart, value: base + field.valueStart, namelen: field.nameLength, valuelen: field.valueLength,
                        flags: UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
            }
            if hasBody {
                var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: pointer), read_callback: readBody)
                return nghttp2_submit_request(session, nil, vector, vector.count, &provider, pointer)
            }
            return nghttp2_submit_request(session, nil, vector, vector.count, nil, pointer)
        }
        if id < 0 {
            if id == NGHTTP2_ERR_STREAM_ID_NOT_AVAILABLE.rawValue {
                // This connection has used every stream id: the next connection takes the stream.
                connection.goingAway = true
                host.putBack(stream)
            } else {
                stream.finish(
                    .failure(
                        HTTP2ClientError(
                            kind: .transport, curlCode: CurlCode.http2,
                            message: "nghttp2_submit_request: \(String(cString: nghttp2_strerror(id)))", isRetryable: true)))
            }
            return
        }
        stream.id = id
        stream.attempts += 1
        stream.bodySent = 0
        stream.status = 0
        stream.headers = []
        stream.body = []
        stream.headerBytes = 0
        stream.remoteEnded = false
        connection.streams[id] = stream
    }

    /// Whether `value` holds CR, LF or NUL: a header value that cannot be sent. Scanned by the C
    /// library over the string's bytes (a provider's token is some hundreds of them, on every push).
    private static func holdsLineBreakOrNUL(_ value: String) -> Bool {
        var value = value
        return value.withUTF8 { bytes in
            guard let base = bytes.baseAddress, !bytes.isEmpty else { return false }
            return memchr(base, 0, bytes.count) != nil || memchr(base, 10, bytes.count) != nil || memchr(base, 13, bytes.count) != nil
        }
    }

    private static func isConnectionSpecific(_ name: String.UTF8View) -> Bool {
        switch name.count {
        case 2, 4, 7, 10, 16, 17:
            let lower = String(name).lowercased()
            return lower == "te" || lower == "host" || lower == "upgrade" || lower == "connection" || lower == "keep-alive"
                || lower == "proxy-connection" || lower == "transfer-encoding"
        default:
            return false
        }
    }

    private func requeueRefused(_ connection: Connection) {
        let host = connection.host
        for stream in connection.refused.reversed() where !stream.done {
            if stream.attempts >= Self.maxAttempts {
                stream.finish(
                    .failure(
                        HTTP2ClientError(
                            kind: .transport, curlCode: CurlCode.http2Stream,
                            message: "the server refused the stream \(stream.attempts) times (REFUSED_STREAM or GOAWAY)", isRetryable: true)))
            } else {
                host.putBack(stream)
            }
        }
        connection.refused.removeAll()
    }

    // MARK: Connections

    private func open(_ host: Host) {
        let connection = Connection(host: host, loop: self, setupDeadline: .now + configuration.connectTimeout)
        if connection.setupDeadline < earliestDeadline { earliestDeadline = connection.setupDeadline }
        host.connections.append(connection)
        connections.append(connection)
        counters.connectionsOpened.add(1, ordering: .relaxed)
        if host.secure && tls == nil && tlsError == nil { makeTLSContext() }
        if host.secure, let tlsError {
            fail(connection, tlsError)
            return
        }
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let code = getaddrinfo(host.name, String(host.port), &hints, &list)
        guard code == 0, let list else {
            fail(
                connection,
                HTTP2ClientError(
                    kind: .transport, curlCode: CurlCode.couldntResolveHost,
                    message: "could not resolve \(host.name): \(String(cString: gai_strerror(code)))", isRetryable: true))
            return
        }
        var entry: UnsafeMutablePointer<addrinfo>? = list
        while let current = entry {
            var storage = sockaddr_storage()
            let length = min(Int(current.pointee.ai_addrlen), MemoryLayout<sockaddr_storage>.size)
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: UnsafeRawBufferPointer(start: current.pointee.ai_addr, count: length)) }
            connection.addresses.append((storage, socklen_t(length)))
            entry = current.pointee.ai_next
        }
        freeaddrinfo(list)
        connectNext(connection, lastError: nil)
    }

    /// Tries the next address of the connection's host; fails it when none is left.
    private func connectNext(_ connection: Connection, lastError: Int32?) {
        if connection.descriptor >= 0 {
            close(connection.descriptor)
            connection.descriptor = -1
        }
        let host = connection.host
        while connection.addressIndex < connection.addresses.count {
            var address = connection.addresses[connection.addressIndex]
            connection.addressIndex += 1
            let descriptor = socket(Int32(address.storage.ss_family), Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if descriptor < 0 { continue }
            var yes: Int32 = 1
            setsockopt(descriptor, Int32(IPPROTO_TCP), TCP_NODELAY, &yes, socklen_t(MemoryLayout<Int32>.size))
            let result = withUnsafePointer(to: &address.storage) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(descriptor, $0, address.length) }
            }
            connection.descriptor = descriptor
            if result == 0 {
                connected(connection)
                return
            }
            if errno == EINPROGRESS {
                connection.state = .connecting
                connection.wantsWritable = true
                return
            }
            close(descriptor)
            connection.descriptor = -1
        }
        let reason = lastError.map { String(cString: strerror($0)) } ?? "no address"
        fail(
            connection,
            HTTP2ClientError(
                kind: .transport, curlCode: CurlCode.couldntConnect,
                message: "could not connect to \(host.name) port \(host.port): \(reason)", isRetryable: true))
    }

    private func connected(_ connection: Connection) {
        connection.wantsWritable = false
        guard connection.host.secure, let tls else {
            startSession(connection)
            return
        }
        guard let ssl = SSL_new(tls) else {
            fail(connection, HTTP2ClientError(kind: .transport, curlCode: CurlCode.sslConnectError, message: "SSL_new failed", isRetryable: true))
            return
        }
        connection.ssl = ssl
        SSL_set_fd(ssl, connection.descriptor)
        let name = connection.host.name
        if Self.isIPAddress(name) {
            X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name)
        } else {
            SSL_set1_host(ssl, name)
            _ = wristler_ssl_set_sni(ssl, name)
        }
        SSL_set_connect_state(ssl)
        connection.state = .handshaking
        handshake(connection)
    }

    private static func isIPAddress(_ name: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, name, &v4) == 1 || inet_pton(AF_INET6, name, &v6) == 1
    }

    private func handshake(_ connection: Connection) {
        guard let ssl = connection.ssl else { return }
        ERR_clear_error()
        let result = SSL_connect(ssl)
        if result == 1 {
            var selected: UnsafePointer<UInt8>?
            var length: UInt32 = 0
            SSL_get0_alpn_selected(ssl, &selected, &length)
            let protocolName = selected.map { String(decoding: UnsafeBufferPointer(start: $0, count: Int(length)), as: UTF8.self) } ?? ""
            guard protocolName == "h2" else {
                let said = protocolName.isEmpty ? "chose no protocol" : "chose \(protocolName.debugDescription)"
                fail(
                    connection,
                    HTTP2ClientError(
                        kind: .transport, curlCode: CurlCode.unsupportedProtocol,
                        message: "\(connection.host.name) port \(connection.host.port) does not speak HTTP/2: offered ALPN \"h2\", the server \(said)",
                        isRetryable: false))
                return
            }
            startSession(connection)
            return
        }
        let error = SSL_get_error(ssl, result)
        switch error {
        case SSL_ERROR_WANT_READ:
            connection.wantsWritable = false
        case SSL_ERROR_WANT_WRITE:
            connection.wantsWritable = true
        default:
            let verify = SSL_get_verify_result(ssl)
            if verify != X509_V_OK {
                fail(
                    connection,
                    HTTP2ClientError(
                        kind: .transport, curlCode: CurlCode.peerFailedVerification,
                        message: "SSL certificate problem: \(String(cString: X509_verify_cert_error_string(verify))) (\(connection.host.name))",
                        isRetryable: false))
            } else {
                fail(
                    connection,
                    HTTP2ClientError(
                        kind: .transport, curlCode: CurlCode.sslConnectError,
                        message: "TLS handshake with \(connection.host.name) port \(connection.host.port) failed: \(Self.openSSLError(error))",
                        isRetryable: true))
            }
        }
    }

    private static func openSSLError(_ sslError: Int32) -> String {
        let code = ERR_get_error()
        if code != 0 {
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        }
        if sslError == SSL_ERROR_SYSCALL {
            return errno == 0 ? "the server closed the connection" : String(cString: strerror(errno))
        }
        return "SSL error \(sslError)"
    }

    private func startSession(_ connection: Connection) {
        var session: OpaquePointer?
        let pointer = Unmanaged.passUnretained(connection).toOpaque()
        guard nghttp2_session_client_new2(&session, callbacks, pointer, options) == 0, let session else {
            fail(connection, HTTP2ClientError(kind: .transport, curlCode: CurlCode.http2, message: "nghttp2_session_client_new2 failed", isRetryable: true))
            return
        }
        connection.session = session
        connection.state = .open
        // No server push; a window that lets a response of `maxResponseBytes` come without waiting
        // for WINDOW_UPDATEs (bounded: the body bound cuts a stream that goes past it anyway).
        let window = UInt32(min(max(configuration.maxResponseBytes, 65535), 1 << 24))
        var settings = [
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_ENABLE_PUSH.rawValue), value: 0),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: 100),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE.rawValue), value: window),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE.rawValue), value: UInt32(Self.maxResponseHeaderBytes)),
        ]
        _ = nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &settings, settings.count)
        _ = nghttp2_session_set_local_window_size(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, Int32(1 << 24))
        flush(connection)
    }

    private func makeTLSContext() {
        guard let context = SSL_CTX_new(TLS_client_method()) else {
            tlsError = HTTP2ClientError(kind: .transport, curlCode: CurlCode.sslConnectError, message: "SSL_CTX_new failed", isRetryable: false)
            return
        }
        _ = wristler_ssl_ctx_set_min_tls12(context)
        _ = wristler_ssl_ctx_set_mode(context, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
        SSL_CTX_set_verify(context, SSL_VERIFY_PEER, nil)
        if let caFile = configuration.caFile {
            if SSL_CTX_load_verify_locations(context, caFile, nil) != 1 {
                tlsError = HTTP2ClientError(
                    kind: .transport, curlCode: CurlCode.sslCACertBadFile,
                    message: "cannot read the CA file \(caFile): \(Self.openSSLError(0))", isRetryable: false)
                SSL_CTX_free(context)
                return
            }
        } else {
            SSL_CTX_set_default_verify_paths(context)
        }
        let alpn: [UInt8] = [2, UInt8(ascii: "h"), UInt8(ascii: "2")]
        _ = SSL_CTX_set_alpn_protos(context, alpn, UInt32(alpn.count))
        tls = context
    }

    /// Marks the connection closed with `error`; its streams fail in `reap`.
    private func fail(_ connection: Connection, _ error: HTTP2ClientError) {
        if connection.state == .closed { return }
        if connection.failure == nil { connection.failure = error }
        connection.state = .closed
    }

    // MARK: I/O

    /// Lets nghttp2 fill one buffer with every frame it has and writes it in one go.
    private func flush(_ connection: Connection) {
        guard connection.state == .open, let session = connection.session else { return }
        while true {
            if connection.outputStart < connection.output.count {
                if !writePending(connection) { return }
            }
            connection.output.removeAll(keepingCapacity: true)
            connection.outputStart = 0
            while connection.output.count < Self.writeBatch && nghttp2_session_want_write(session) != 0 {
                var data: UnsafePointer<UInt8>?
                let count = nghttp2_session_mem_send(session, &data)
                if count < 0 {
                    fail(
                        connection,
                        HTTP2ClientError(
                            kind: .transport, curlCode: CurlCode.http2,
                            message: "nghttp2_session_mem_send: \(String(cString: nghttp2_strerror(Int32(count))))", isRetryable: true))
                    return
                }
                if count == 0 { break }
                connection.output.append(contentsOf: UnsafeBufferPointer(start: data, count: count))
            }
            if connection.output.isEmpty {
                connection.wantsWritable = false
                return
            }
        }
    }

    /// Writes what is buffered; false when the socket is full (or the connection failed).
    private func writePending(_ connection: Connection) -> Bool {
        while connection.outputStart < connection.output.count {
            let remaining = connection.output.count - connection.outputStart
            let written: Int = connection.output.withUnsafeBytes { bytes in
                let start = bytes.baseAddress! + connection.outputStart
                if let ssl = connection.ssl {
                    ERR_clear_error()
                    let result = SSL_write(ssl, start, Int32(min(remaining, Int(Int32.max))))
                    if result > 0 { return Int(result) }
                    let error = SSL_get_error(ssl, result)
                    if error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ { return 0 }
                    return -1
                }
                let result = Glibc.send(connection.descriptor, start, remaining, Int32(MSG_NOSIGNAL))
                if result >= 0 { return result }
                return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1
            }
            if written < 0 {
                fail(
                    connection,
                    HTTP2ClientError(kind: .transport, curlCode: CurlCode.sendError, message: "sending to \(connection.host.name) failed", isRetryable: true))
                return false
            }
            if written == 0 {
                connection.wantsWritable = true
                return false
            }
            connection.outputStart += written
        }
        connection.wantsWritable = false
        return true
    }

    private func readAll(_ connection: Connection) {
        guard let session = connection.session else { return }
        while connection.state == .open {
            let count: Int
            if let ssl = connection.ssl {
                ERR_clear_error()
                let result = SSL_read(ssl, readBuffer.baseAddress, Int32(Self.readSize))
                if result > 0 {
                    count = Int(result)
                } else {
                    let error = SSL_get_error(ssl, result)
                    if error == SSL_ERROR_WANT_READ { return }
                    if error == SSL_ERROR_WANT_WRITE {
                        connection.wantsWritable = true
                        return
                    }
                    closedByServer(connection, detail: error == SSL_ERROR_ZERO_RETURN ? "closed" : Self.openSSLError(error))
                    return
                }
            } else {
                let result = recv(connection.descriptor, readBuffer.baseAddress, Self.readSize, 0)
                if result < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
                if result <= 0 {
                    closedByServer(connection, detail: result == 0 ? "closed" : String(cString: strerror(errno)))
                    return
                }
                count = result
            }
            let used = nghttp2_session_mem_recv(session, readBuffer.baseAddress!.assumingMemoryBound(to: UInt8.self), count)
            if used < 0 && !connection.settingsReceived {
                fail(connection, Self.notHTTP2(connection, String(cString: nghttp2_strerror(Int32(used)))))
                return
            }
            if used < 0 {
                fail(
                    connection,
                    HTTP2ClientError(
                        kind: .transport, curlCode: CurlCode.http2,
                        message: "HTTP/2 error from \(connection.host.name): \(String(cString: nghttp2_strerror(Int32(used))))", isRetryable: true))
                return
            }
            if count < Self.readSize && connection.ssl == nil { return }
        }
    }

    /// The server's first bytes were not an HTTP/2 SETTINGS frame, or it closed before sending one
    /// over h2c: not an HTTP/2 server (an h2c request to HTTP/1.1; over TLS, ALPN settles it before).
    private static func notHTTP2(_ connection: Connection, _ detail: String) -> HTTP2ClientError {
        HTTP2ClientError(
            kind: .transport, curlCode: CurlCode.unsupportedProtocol,
            message: "\(connection.host.name) port \(connection.host.port) does not speak HTTP/2: no SETTINGS frame first (\(detail))",
            isRetryable: false)
    }

    private func closedByServer(_ connection: Connection, detail: String) {
        if connection.streams.isEmpty && connection.goingAway {
            connection.state = .closed
            return
        }
        if !connection.settingsReceived && connection.ssl == nil {
            fail(connection, Self.notHTTP2(connection, detail))
            return
        }
        fail(
            connection,
            HTTP2ClientError(
                kind: .transport, curlCode: CurlCode.recvError,
                message: "the connection to \(connection.host.name) port \(connection.host.port) ended (\(detail))", isRetryable: true))
    }

    private func waitAndDrive() {
        pollSet.removeAll(keepingCapacity: true)
        pollSet.append(pollfd(fd: wakeDescriptor, events: Int16(POLLIN), revents: 0))
        for connection in connections {
            var events = Int16(POLLIN)
            if connection.wantsWritable || connection.state == .connecting { events |= Int16(POLLOUT) }
            pollSet.append(pollfd(fd: connection.descriptor, events: events, revents: 0))
        }
        let now = ContinuousClock.now
        var timeout: Int32 = 60_000
        if earliestDeadline <= now {
            timeout = 0
        } else {
            let (seconds, attoseconds) = (earliestDeadline - now).components
            let milliseconds = seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1
            timeout = Int32(min(Int64(timeout), milliseconds))
        }
        let ready = poll(&pollSet, nfds_t(pollSet.count), timeout)
        if ready <= 0 { return }
        if pollSet[0].revents != 0 {
            var value: UInt64 = 0
            _ = withUnsafeMutableBytes(of: &value) { read(wakeDescriptor, $0.baseAddress, 8) }
        }
        // `connections` is unchanged since the poll set was built (only reap removes).
        for (index, connection) in connections.enumerated() {
            let events = pollSet[index + 1].revents
            if events == 0 { continue }
            drive(connection, events: events)
        }
    }

    private func drive(_ connection: Connection, events: Int16) {
        switch connection.state {
        case .connecting:
            var error: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(connection.descriptor, SOL_SOCKET, SO_ERROR, &error, &length)
            if error == 0 && events & Int16(POLLOUT) != 0 {
                connected(connection)
            } else if error != 0 || events & Int16(POLLERR | POLLHUP) != 0 {
                connectNext(connection, lastError: error == 0 ? ECONNREFUSED : error)
            }
        case .handshaking:
            handshake(connection)
        case .open:
            if events & Int16(POLLOUT) != 0 { flush(connection) }
            if connection.state == .open && events & Int16(POLLIN | POLLERR | POLLHUP) != 0 { readAll(connection) }
            if connection.state == .open { flush(connection) }
        case .closed:
            break
        }
    }

    // MARK: Ends

    /// Removes closed connections and answers what they held; a connection that ended after its
    /// GOAWAY with nothing in flight closes quietly.
    private func reap() {
        var index = 0
        while index < connections.count {
            let connection = connections[index]
            if connection.state == .open, let session = connection.session,
                nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0
                    && connection.outputStart >= connection.output.count
            {
                // nghttp2 ended the session: after a GOAWAY with nothing left, or on a protocol error.
                if !connection.settingsReceived { fail(connection, Self.notHTTP2(connection, "nghttp2 ended the session")) }
                connection.state = .closed
            }
            if connection.state == .open && connection.goingAway && connection.streams.isEmpty && connection.refused.isEmpty {
                connection.state = .closed
            }
            guard connection.state == .closed else {
                index += 1
                continue
            }
            connections.remove(at: index)
            release(connection, because: connection.failure)
        }
    }

    private func release(_ connection: Connection, because failure: HTTP2ClientError?) {
        let host = connection.host
        if !connection.refused.isEmpty { requeueRefused(connection) }
        if let session = connection.session {
            nghttp2_session_del(session)
            connection.session = nil
        }
        if let ssl = connection.ssl {
            SSL_free(ssl)
            connection.ssl = nil
        }
        if connection.descriptor >= 0 {
            close(connection.descriptor)
            connection.descriptor = -1
        }
        let error =
            failure
            ?? HTTP2ClientError(
                kind: .transport, curlCode: CurlCode.recvError, message: "the connection to \(host.name) closed with the stream open",
                isRetryable: true)
        for stream in connection.streams.values { stream.finish(.failure(error)) }
        connection.streams = [:]
        host.connections.removeAll { $0 === connection }
        // A connection that never worked leaves nothing to wait for: what waits for this host fails
        // with its reason (refused, untrusted certificate, no h2), unless another is on its way.
        if let failure, !connection.everReady {
            if !host.connections.contains(where: { $0.state != .closed }) {
                for stream in host.backlog[host.backlogHead...] { stream.finish(.failure(failure)) }
                host.backlog.removeAll()
                host.backlogHead = 0
            } else {
                host.openNotBefore = .now + .milliseconds(500)
                if host.openNotBefore < earliestDeadline { earliestDeadline = host.openNotBefore }
            }
        }
    }

    /// Fails what has waited past its deadline: requests (RST_STREAM if on a stream) and connections
    /// still being set up after `connectTimeout`.
    private func sweep() {
        let now = ContinuousClock.now
        var next = now + .seconds(3600)
        for host in hosts.values where host.waiting > 0 {
            var kept: [Stream] = []
            kept.reserveCapacity(host.waiting)
            for stream in host.backlog[host.backlogHead...] where !stream.done {
                if stream.deadline <= now {
                    stream.finish(.failure(Self.timedOut(stream, now: now, what: "waiting for a connection to \(host.name)")))
                } else {
                    next = min(next, stream.deadline)
                    kept.append(stream)
                }
            }
            host.backlog = kept
            host.backlogHead = 0
        }
        for connection in connections {
            if connection.settingUp {
                if connection.setupDeadline <= now {
                    fail(
                        connection,
                        HTTP2ClientError(
                            kind: .transport, curlCode: CurlCode.operationTimedOut,
                            message: "connecting to \(connection.host.name) port \(connection.host.port) timed out after \(configuration.connectTimeout)",
                            isRetryable: true))
                    continue
                }
                next = min(next, connection.setupDeadline)
            }
            for (id, stream) in connection.streams where !stream.done {
                if stream.deadline <= now {
                    // Answered now; the stream stays in the table (nghttp2 may still read its body
                    // through the data provider) until nghttp2 closes it after the RST_STREAM, or
                    // reports its HEADERS not sent.
                    if let session = connection.session {
                        nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, NGHTTP2_CANCEL.rawValue)
                    }
                    stream.finish(.failure(Self.timedOut(stream, now: now, what: "waiting for the answer")))
                } else {
                    next = min(next, stream.deadline)
                }
            }
        }
        earliestDeadline = next
    }

    private static func timedOut(_ stream: Stream, now: ContinuousClock.Instant, what: String) -> HTTP2ClientError {
        HTTP2ClientError(
            kind: .transport, curlCode: CurlCode.operationTimedOut,
            message: "timed out after \(now - stream.item.enqueued) \(what) (timeout \(stream.item.request.timeout))", isRetryable: true)
    }

    private func tearDown() {
        for connection in connections {
            connection.failure = .shutDown
            connection.state = .closed
            release(connection, because: .shutDown)
        }
        connections = []
        for host in hosts.values {
            for stream in host.backlog[host.backlogHead...] { stream.finish(.failure(.shutDown)) }
            host.backlog = []
            host.backlogHead = 0
        }
        hosts = [:]
        lastHost = nil
        let late = inbox.withLock { $0.drain() }
        for item in late { item.completion.finish(.failure(.shutDown)) }
        if let tls { SSL_CTX_free(tls) }
        tls = nil
    }

    // MARK: Called back by nghttp2 (on the loop thread, from mem_recv and mem_send)

    /// A request's HEADERS that nghttp2 did not send (a GOAWAY came first, or the connection is
    /// closing): the server never saw the stream, so it goes to another connection.
    fileprivate func requestNotSent(_ connection: Connection, id: Int32) {
        guard let stream = connection.streams.removeValue(forKey: id), !stream.done else { return }
        connection.refused.append(stream)
    }

    fileprivate func streamClosed(_ connection: Connection, id: Int32, code: UInt32) {
        guard let stream = connection.streams.removeValue(forKey: id), !stream.done else { return }
        if let failure = stream.failure {
            stream.finish(.failure(failure))
        } else if stream.remoteEnded && stream.status >= 200 {
            stream.finish(.success(HTTP2Response(status: stream.status, headers: stream.headers, body: stream.body, httpVersion: 2)))
        } else if code == NGHTTP2_REFUSED_STREAM.rawValue {
            // Not processed by the server (RST_STREAM REFUSED_STREAM, or above a GOAWAY's
            // last_stream_id): safe to send again, on another connection.
            connection.refused.append(stream)
        } else {
            stream.finish(
                .failure(
                    HTTP2ClientError(
                        kind: .transport, curlCode: CurlCode.http2Stream,
                        message: "the stream was closed before a complete answer (\(String(cString: nghttp2_http2_strerror(code))))",
                        isRetryable: true)))
        }
    }
}

// MARK: - nghttp2 callbacks

private func connectionOf(_ userData: UnsafeMutableRawPointer?) -> Connection {
    Unmanaged<Connection>.fromOpaque(userData!).takeUnretainedValue()
}

private func streamOf(_ session: OpaquePointer?, _ id: Int32) -> Stream? {
    guard let pointer = nghttp2_session_get_stream_user_data(session, id) else { return nil }
    return Unmanaged<Stream>.fromOpaque(pointer).takeUnretainedValue()
}

private let onFrame: nghttp2_on_frame_recv_callback = { session, frame, userData in
    guard let frame else { return 0 }
    let connection = connectionOf(userData)
    let type = UInt32(frame.pointee.hd.type)
    let flags = frame.pointee.hd.flags
    switch type {
    case NGHTTP2_SETTINGS.rawValue:
        if flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 {
            connection.settingsReceived = true
            connection.everReady = true
        }
    case NGHTTP2_GOAWAY.rawValue:
        connection.goingAway = true
    case NGHTTP2_HEADERS.rawValue, NGHTTP2_DATA.rawValue:
        if flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0, let stream = streamOf(session, frame.pointee.hd.stream_id) {
            stream.remoteEnded = true
        }
    default:
        break
    }
    return 0
}

private let onHeader: nghttp2_on_header_callback = { session, frame, name, nameLength, value, valueLength, _, _ in
    guard let frame, let name, let value, UInt32(frame.pointee.hd.type) == NGHTTP2_HEADERS.rawValue,
        let stream = streamOf(session, frame.pointee.hd.stream_id), !stream.done, stream.failure == nil
    else { return 0 }
    stream.headerBytes += nameLength + valueLength + 32
    if stream.headerBytes > H2Loop.maxResponseHeaderBytes {
        stream.failure = HTTP2ClientError(
            kind: .transport, curlCode: CurlCode.http2,
            message: "the response headers are larger than \(H2Loop.maxResponseHeaderBytes) bytes", isRetryable: false)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue
    }
    let nameBytes = UnsafeBufferPointer(start: name, count: nameLength)
    if nameLength == 7 && nameBytes.elementsEqual(":status".utf8) {
        var status = 0
        for byte in UnsafeBufferPointer(start: value, count: valueLength) where byte >= 48 && byte <= 57 { status = status * 10 + Int(byte - 48) }
        // A 1xx is not the answer: the final status starts the headers again.
        stream.status = status
        stream.headers.removeAll(keepingCapacity: true)
        return 0
    }
    stream.headers.append(
        (name: String(decoding: nameBytes, as: UTF8.self), value: String(decoding: UnsafeBufferPointer(start: value, count: valueLength), as: UTF8.self)))
    return 0
}

private let onDataChunk: nghttp2_on_data_chunk_recv_callback = { session, _, id, data, length, _ in
    guard let data, let stream = streamOf(session, id), !stream.done, stream.failure == nil else { return 0 }
    let limit = stream.limit
    if stream.body.count + length > limit {
        stream.failure = HTTP2ClientError(
            kind: .responseTooLarge, curlCode: CurlCode.fileSizeExceeded,
            message: "the response is larger than maxResponseBytes (\(limit))", isRetryable: false)
        stream.body = []
        nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), id, NGHTTP2_CANCEL.rawValue)
        return 0
    }
    stream.body.append(contentsOf: UnsafeBufferPointer(start: data, count: length))
    return 0
}

private let onStreamClose: nghttp2_on_stream_close_callback = { session, id, code, userData in
    let connection = connectionOf(userData)
    connection.loop.streamClosed(connection, id: id, code: code)
    return 0
}

private let onFrameNotSent: nghttp2_on_frame_not_send_callback = { _, frame, _, userData in
    guard let frame, UInt32(frame.pointee.hd.type) == NGHTTP2_HEADERS.rawValue else { return 0 }
    let connection = connectionOf(userData)
    connection.loop.requestNotSent(connection, id: frame.pointee.hd.stream_id)
    return 0
}

private let readBody: nghttp2_data_source_read_callback = { _, _, buffer, length, flags, source, _ in
    guard let buffer, let flags, let pointer = source?.pointee.ptr else {
        return Int(NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE.rawValue)
    }
    let stream = Unmanaged<Stream>.fromOpaque(pointer).takeUnretainedValue()
    let body = stream.item.request.body
    let count = min(length, body.count - stream.bodySent)
    body.withUnsafeBytes { bytes in
        UnsafeMutableRawPointer(buffer).copyMemory(from: bytes.baseAddress! + stream.bodySent, byteCount: count)
    }
    stream.bodySent += count
    if stream.bodySent == body.count { flags.pointee |= NGHTTP2_DATA_FLAG_EOF.rawValue }
    return count
}
