import CMicroHTTPD
import CShims
import Foundation
import Synchronization
import Threads

/// An HTTP/1.1 server on libmicrohttpd: the library parses requests (keep-alive, pipelining and
/// chunked bodies included) and writes responses; this type collects each request's body within a
/// limit, hands the request to a handler and sends back what it returns.
///
/// Guarantees:
/// - a body over `maximumBodyBytes` (or over the limit `bodyLimits` gives its method and path) is
///   answered 413, never buffered whole: up front when `Content-Length` says so and the client
///   waits for it (`Expect: 100-continue`); otherwise once the body is in, read and dropped, so a
///   client that sends its body before reading gets the 413 rather than a reset connection, within
///   `HTTPServer.refusedBodyBytes` past the limit (beyond, at once, and the connection is closed);
/// - headers over `maximumHeaderBytes` are refused by libmicrohttpd itself (431);
/// - `Content-Length` given twice with different values is a 400 and the connection is closed
///   (RFC 9112 §6.3: the body's end is unknown); libmicrohttpd itself takes the first;
/// - at most `connectionLimit` connections are open, and at most `connectionsPerAddress` from one
///   client address; a connection over either limit is closed as soon as it is accepted;
/// - a request must be received whole, head and body, within `requestDeadlineSeconds` of its
///   connection being opened or of the previous answer on it, else the connection is closed
///   (`RequestDeadlines`), however steadily it trickles (a request with a `BodyLimit` of its own
///   may have a longer deadline from its head's arrival); idle connections close after
///   `idleTimeoutSeconds` (which also bounds a stalled reader of an answer);
/// - `shutdown` stops accepting, lets the requests in flight finish (up to a grace period), then
///   closes every connection.
///
/// The handler runs on one of libmicrohttpd's `threads` worker threads (an event loop each), never
/// on Swift's cooperative pool. What it can answer at once (from memory) it answers there; work
/// that waits (on the database, say) it hands back as `HTTPReply.later`, which runs on one of the
/// server's `blockingThreads` while its connection is suspended, so the worker goes on with its
/// other connections meanwhile and a slow request delays only itself.
public final class HTTPServer: Sendable {
    /// How many bytes past its limit a refused body is read and dropped before it is answered (a
    /// body declared larger is answered at once, on its head). 32 MiB at loopback or LAN speed is
    /// well under a second; a slow sender is cut by the request's deadline as before.
    public static let refusedBodyBytes = 32 * 1_048_576

    public struct Configuration: Sendable {
        /// The address to listen on: `127.0.0.1` (loopback) or `0.0.0.0` (every interface).
        public var host: String = "127.0.0.1"
        /// 0 picks a free port (see `port` once started).
        public var port: UInt16 = 8080
        /// libmicrohttpd's worker threads: event loops that read requests and write answers.
        public var threads: Int = HTTPServer.defaultThreads
        /// Threads that run the work requests hand back as `HTTPReply.later`, each waiting for its
        /// own (the database): how many such requests are in progress at once. 64, not fewer:
        /// writers that wait together share a commit (`InlineGroupCommit`), and with 16 threads
        /// message posts stopped at about 1,400/s for want of waiters (docs/benchmarks.md).
        public var blockingThreads: Int = 64
        public var maximumBodyBytes: Int = 1 << 20
        /// Other limits than `maximumBodyBytes` for a few requests by method and exact path (as
        /// sent, before percent-decoding): a file upload may be larger than every other body.
        public var bodyLimits: [BodyLimit] = []
        public var maximumHeaderBytes: Int = 64 * 1024
        public var connectionLimit: Int = 1024
        /// Connections open at once from one client address; 0: no limit (behind a proxy, every
        /// client has the proxy's address).
        public var connectionsPerAddress: Int = 64
        public var idleTimeoutSeconds: Int = 30
        /// The longest a whole request (head and body) may take to arrive; 0: no deadline.
        public var requestDeadlineSeconds: Int = 10
        /// Each connection's kernel send buffer (`SO_SNDBUF`; 0: the kernel's own, which grows to
        /// 4 MiB a connection). A file sent to a client that stops reading fills it: bounded, a
        /// thousand such clients hold a quarter of a gigabyte of the kernel's memory, not four.
        public var sendBufferBytes: Int = 128 * 1024

        public init(
            host: String = "127.0.0.1", port: UInt16 = 8080, threads: Int = HTTPServer.defaultThreads, blockingThreads: Int = 64,
            maximumBodyBytes: Int = 1 << 20, maximumHeaderBytes: Int = 64 * 1024, connectionLimit: Int = 1024,
            connectionsPerAddress: Int = 64, idleTimeoutSeconds: Int = 30, requestDeadlineSeconds: Int = 10, bodyLimits: [BodyLimit] = []
        ) {
            self.bodyLimits = bodyLimits
            self.host = host
            self.port = port
            self.threads = threads
            self.blockingThreads = blockingThreads
            self.maximumBodyBytes = maximumBodyBytes
            self.maximumHeaderBytes = maximumHeaderBytes
            self.connectionLimit = connectionLimit
            self.connectionsPerAddress = connectionsPerAddress
            self.idleTimeoutSeconds = idleTimeoutSeconds
            self.requestDeadlineSeconds = requestDeadlineSeconds
        }
    }

    /// The largest body of requests of one method to one exact path, instead of `maximumBodyBytes`,
    /// and, when given, a longer deadline for such a request to arrive whole than
    /// `requestDeadlineSeconds` (a large body needs time on a slow network), counted from the
    /// moment its head is in.
    public struct BodyLimit: Sendable, Hashable {
        public var method: HTTPMethod
        public var path: String
        public var maximumBytes: Int
        public var requestDeadline: Duration?
        /// The answer to a body over the limit, when the route answers in a shape of its own (the
        /// OAuth token endpoint); nil: the JSON:API `413 body_too_large`.
        public var tooLarge: HTTPResponse?

        public init(method: HTTPMethod, path: String, maximumBytes: Int, requestDeadline: Duration? = nil, tooLarge: HTTPResponse? = nil) {
            self.method = method
            self.path = path
            self.maximumBytes = maximumBytes
            self.requestDeadline = requestDeadline
            self.tooLarge = tooLarge
        }

        public static func == (lhs: BodyLimit, rhs: BodyLimit) -> Bool {
            lhs.method == rhs.method && lhs.path == rhs.path && lhs.maximumBytes == rhs.maximumBytes && lhs.requestDeadline == rhs.requestDeadline
                && lhs.tooLarge?.status == rhs.tooLarge?.status && lhs.tooLarge?.body == rhs.tooLarge?.body
        }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(method)
            hasher.combine(path)
            hasher.combine(maximumBytes)
        }
    }

    /// One event loop per core.
    public static let defaultThreads = max(2, ProcessInfo.processInfo.activeProcessorCount)

    public typealias Handler = @Sendable (HTTPRequest) -> HTTPReply

    public struct StartFailure: Error, CustomStringConvertible {
        public var description: String
    }

    public let configuration: Configuration
    /// The port the server listens on.
    public let port: UInt16
    private let core: Core
    private let daemon: Mutex<DaemonHandle?>

    /// Starts listening, with a handler that answers every request at once.
    public convenience init(configuration: Configuration, handler: @escaping @Sendable (HTTPRequest) -> HTTPResponse) throws {
        try self.init(configuration: configuration, replying: { .now(handler($0)) })
    }

    /// Starts listening.
    public init(configuration: Configuration, replying handler: @escaping Handler) throws {
        self.configuration = configuration
        let core = Core(
            handler: handler, maximumBodyBytes: configuration.maximumBodyBytes, bodyLimits: configuration.bodyLimits,
            pool: BlockingPool(threads: max(1, configuration.blockingThreads), name: "http-blocking"),
            deadlines: configuration.requestDeadlineSeconds > 0 ? RequestDeadlines(limit: .seconds(configuration.requestDeadlineSeconds)) : nil,
            sendBufferBytes: Int32(clamping: max(0, configuration.sendBufferBytes)))
        self.core = core
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = configuration.port.bigEndian
        guard inet_pton(AF_INET, configuration.host, &address.sin_addr) == 1 else {
            throw StartFailure(description: "\"\(configuration.host)\" is not an IPv4 address to listen on.")
        }
        let context = Unmanaged.passUnretained(core).toOpaque()
        let flags = UInt32(MHD_USE_EPOLL_INTERNAL_THREAD.rawValue) | UInt32(MHD_ALLOW_SUSPEND_RESUME.rawValue)
        let started: OpaquePointer? = withUnsafePointer(to: &address) { addressPointer in
            let options = [
                MHD_OptionItem(option: .SOCK_ADDR, value: 0, ptr_value: UnsafeMutableRawPointer(mutating: addressPointer)),
                MHD_OptionItem(option: .THREAD_POOL_SIZE, value: max(1, configuration.threads), ptr_value: nil),
                MHD_OptionItem(option: .CONNECTION_LIMIT, value: max(1, configuration.connectionLimit), ptr_value: nil),
                MHD_OptionItem(option: .PER_IP_CONNECTION_LIMIT, value: max(0, configuration.connectionsPerAddress), ptr_value: nil),
                MHD_OptionItem(option: .CONNECTION_TIMEOUT, value: max(1, configuration.idleTimeoutSeconds), ptr_value: nil),
                MHD_OptionItem(
                    option: .NOTIFY_CONNECTION, value: unsafeBitCast(connectionChanged, to: Int.self), ptr_value: context),
                MHD_OptionItem(option: .CONNECTION_MEMORY_LIMIT, value: max(4096, configuration.maximumHeaderBytes), ptr_value: nil),
                MHD_OptionItem(
                    option: .NOTIFY_COMPLETED, value: unsafeBitCast(requestCompleted, to: Int.self), ptr_value: context),
                // The path and query are decoded here (URLDecoding), once: libmicrohttpd's own
                // unescaping is switched off so nothing is decoded twice.
                MHD_OptionItem(option: .UNESCAPE_CALLBACK, value: unsafeBitCast(keepEscaped, to: Int.self), ptr_value: nil),
                MHD_OptionItem(option: .URI_LOG_CALLBACK, value: unsafeBitCast(uriReceived, to: Int.self), ptr_value: nil),
                MHD_OptionItem(option: .END, value: 0, ptr_value: nil),
            ]
            return options.withUnsafeBufferPointer { buffer in
                wristler_mhd_start_daemon(flags, configuration.port, nil, nil, accessHandler, context, buffer.baseAddress)
            }
        }
        guard let started else {
            core.pool.stop()
            core.deadlines?.stop()
            throw StartFailure(
                description: "Cannot listen on \(configuration.host):\(configuration.port) (in use, or not an address of this machine).")
        }
        port = wristler_mhd_bound_port(started)
        daemon = Mutex(DaemonHandle(pointer: started))
    }

    /// The number of requests being handled now.
    public var requestsInFlight: Int { core.inFlight.load(ordering: .relaxed) }

    /// Stops accepting connections, waits up to `gracePeriod` for the requests in flight to be
    /// answered, then closes every connection. Blocks; call it off the cooperative pool.
    public func shutdown(gracePeriod: Duration = .seconds(10)) {
        guard let running = daemon.withLock({ daemon -> DaemonHandle? in
            defer { daemon = nil }
            return daemon
        })?.pointer else { return }
        let listener = MHD_quiesce_daemon(running)
        if listener >= 0 { close(listener) }
        let deadline = ContinuousClock.now + gracePeriod
        while core.inFlight.load(ordering: .acquiring) > 0 && ContinuousClock.now < deadline {
            usleep(5_000)
        }
        // libmicrohttpd must not be stopped with a connection suspended: work still running (past
        // the grace period) is waited for a little longer; it is bounded by the database's
        // statement timeout.
        let lastDeadline = ContinuousClock.now + .seconds(30)
        while core.suspended.load(ordering: .acquiring) > 0 && ContinuousClock.now < lastDeadline {
            usleep(5_000)
        }
        MHD_stop_daemon(running)
        core.pool.stop()
        core.deadlines?.stop()
    }

    deinit { shutdown(gracePeriod: .zero) }
}

/// The daemon, which libmicrohttpd lets any thread stop.
struct DaemonHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// What the C callbacks reach through their context pointer.
final class Core: Sendable {
    let handler: HTTPServer.Handler
    let maximumBodyBytes: Int
    let bodyLimits: [HTTPServer.BodyLimit]
    let pool: BlockingPool
    let deadlines: RequestDeadlines?
    /// `Configuration.sendBufferBytes`, set on each connection as it opens (0: left alone).
    let sendBufferBytes: Int32
    let inFlight = Atomic<Int>(0)
    /// Connections suspended while their request's work runs on the pool.
    let suspended = Atomic<Int>(0)

    init(
        handler: @escaping HTTPServer.Handler, maximumBodyBytes: Int, bodyLimits: [HTTPServer.BodyLimit], pool: BlockingPool,
        deadlines: RequestDeadlines?, sendBufferBytes: Int32 = 0
    ) {
        self.sendBufferBytes = sendBufferBytes
        self.handler = handler
        self.maximumBodyBytes = maximumBodyBytes
        self.bodyLimits = bodyLimits
        self.pool = pool
        self.deadlines = deadlines
    }

    /// The limit of its own of a request of `method` to `url` (as sent), if it has one.
    func bodyLimit(method: UnsafePointer<CChar>?, url: UnsafePointer<CChar>?) -> HTTPServer.BodyLimit? {
        guard !bodyLimits.isEmpty, let method, let url else { return nil }
        return bodyLimits.first { strcmp(method, $0.method.rawValue) == 0 && strcmp(url, $0.path) == 0 }
    }
}

/// One request's body as it arrives, touched only by the worker thread of its connection; and the
/// answer its work on the pool left for that thread to send once the connection is resumed.
final class RequestState: @unchecked Sendable {
    var body: [UInt8] = []
    /// The largest body this request may have.
    let limit: Int
    /// The answer to a body over `limit`, when its route has one of its own.
    let tooLarge: HTTPResponse?
    /// The answer when the request is refused before its handler (413, 400): its body is dropped.
    var refusal: HTTPResponse?
    /// How many bytes of a refused body were read and dropped.
    var dropped = 0
    let answer = Mutex<HTTPResponse?>(nil)

    init(limit: Int, tooLarge: HTTPResponse? = nil) {
        self.limit = limit
        self.tooLarge = tooLarge
    }
}

/// A connection handed to the pool: libmicrohttpd lets any thread resume it.
struct SuspendedConnection: @unchecked Sendable {
    let pointer: OpaquePointer
}

private let accessHandler: MHD_AccessHandlerCallback = { context, connection, url, method, version, uploadData, uploadDataSize, stateSlot in
    guard let context, let connection, let stateSlot, let uploadDataSize else { return .NO }
    let core = Unmanaged<Core>.fromOpaque(context).takeUnretainedValue()
    // First call: the headers are in; the body (if any) comes in the calls after.
    guard let rawState = stateSlot.pointee, rawState != tooManyParametersMark else {
        let tooManyParameters = stateSlot.pointee == tooManyParametersMark
        let own = core.bodyLimit(method: method, url: url)
        let state = RequestState(limit: own?.maximumBytes ?? core.maximumBodyBytes, tooLarge: own?.tooLarge)
        if let deadline = own?.requestDeadline { core.deadlines?.extend(connection, until: .now + deadline) }
        core.inFlight.add(1, ordering: .relaxed)
        stateSlot.pointee = Unmanaged.passRetained(state).toOpaque()
        if let refusal = FramingHeaders(connection).refusal(http11: version.map { strcmp($0, "HTTP/1.0") != 0 } ?? true)
            ?? (tooManyParameters ? tooManyParametersResponse : nil)
        {
            state.refusal = refusal
            return send(refusal, on: connection)
        }
        if let length = headerValue(connection, "Content-Length").flatMap(Int.init), length > state.limit {
            let refusal = state.tooLarge ?? tooLargeResponse(state.limit)
            state.refusal = refusal
            // A client that sent `Expect: 100-continue` waits for this answer before its body, and
            // gets it now. One that sends its body anyway reads the answer only once it has sent
            // it, and closing the connection under its send would reset it (unread data makes the
            // kernel reset) and lose the answer: so its body is read and dropped first, within
            // `HTTPServer.refusedBodyBytes` and the request's deadline, and answered when it is all in.
            if expectsContinue(connection) || length - state.limit > HTTPServer.refusedBodyBytes { return send(refusal, on: connection) }
        }
        return .YES
    }
    let state = Unmanaged<RequestState>.fromOpaque(rawState).takeUnretainedValue()
    if uploadDataSize.pointee > 0 {
        let count = uploadDataSize.pointee
        if state.refusal == nil, let uploadData {
            if state.body.count + count > state.limit {
                state.refusal = state.tooLarge ?? tooLargeResponse(state.limit)
                state.dropped = state.body.count + count
                state.body = []
            } else {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: count) { bytes in
                    state.body.append(contentsOf: UnsafeBufferPointer(start: bytes, count: count))
                }
            }
        } else {
            state.dropped += count
        }
        uploadDataSize.pointee = 0
        // Past what a refused body may bring, the answer goes at once and the connection closes.
        if let refusal = state.refusal, state.dropped - state.limit > HTTPServer.refusedBodyBytes { return send(refusal, on: connection) }
        return .YES
    }
    // The request is all in: its deadline no longer runs while it is answered.
    core.deadlines?.received(connection)
    if let refusal = state.refusal { return send(refusal, on: connection) }
    // Called again after a resume: the pool's answer is waiting.
    if let answer = state.answer.withLock({ answer in answer.take() }) { return send(answer, on: connection) }
    let request = HTTPRequest(
        method: method.map { method in
            HTTPMethod(bytes: UnsafeBufferPointer(start: UnsafeRawPointer(method).assumingMemoryBound(to: UInt8.self), count: strlen(method)))
        } ?? .get,
        path: URLDecoding.decode(url.map { String(cString: $0) } ?? "/", plusIsSpace: false),
        query: values(connection, kind: .GET_ARGUMENT_KIND).map {
            HTTPRequest.QueryArgument(
                name: URLDecoding.decode($0.0, plusIsSpace: true), value: $0.1.map { URLDecoding.decode($0, plusIsSpace: true) })
        },
        headers: headers(connection), body: state.body, clientIPv4: clientIPv4(connection))
    state.body = []
    switch core.handler(request) {
    case .now(let response):
        return send(response, on: connection)
    case .later(let work):
        MHD_suspend_connection(connection)
        core.suspended.add(1, ordering: .relaxed)
        let suspended = SuspendedConnection(pointer: connection)
        core.pool.submit {
            let response = work()
            state.answer.withLock { $0 = response }
            MHD_resume_connection(suspended.pointer)
            // Only now may `shutdown` stop the daemon: the resume has touched the connection.
            core.suspended.subtract(1, ordering: .releasing)
        }
        return .YES
    }
}

private let keepEscaped: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<CChar>?) -> Int = { _, _, text in
    text.map { strlen($0) } ?? 0
}

/// The most query parameters a request may have: each takes some 50 bytes of the connection's
/// memory pool while libmicrohttpd parses them, before any handler runs, and libmicrohttpd 0.9.75
/// neither answers nor closes a request whose parameters overflow its pool (a thousand in a URL of
/// 7 KB, with headers, did). No route reads more than a few.
let maximumQueryParameters = 256

/// The request state that marks a request with more than `maximumQueryParameters` (a 414).
private nonisolated(unsafe) let tooManyParametersMark = UnsafeMutableRawPointer.allocate(byteCount: 1, alignment: 1)

/// Called with the request's URI before libmicrohttpd parses its query (the `?` is found already):
/// a query of too many parameters is cut at the `?` in libmicrohttpd's buffer, so none is parsed,
/// and the request is marked, to be answered 414 by the access handler (what this returns is the
/// request's state slot there).
private let uriReceived: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<CChar>?, OpaquePointer?) -> UnsafeMutableRawPointer? = {
    _, uri, _ in
    guard let uri, let question = strchr(uri, Int32(UInt8(ascii: "?"))) else { return nil }
    var parameters = 1
    var cursor = question + 1
    while let separator = strchr(cursor, Int32(UInt8(ascii: "&"))) {
        parameters += 1
        if parameters > maximumQueryParameters {
            UnsafeMutablePointer(mutating: question + 1).pointee = 0
            return tooManyParametersMark
        }
        cursor = separator + 1
    }
    return nil
}

private let tooManyParametersResponse = HTTPResponse(
    status: 414, contentType: "application/vnd.api+json",
    body: #"{"jsonapi":{"version":"1.0"},"errors":[{"status":"414","code":"too_many_query_parameters","title":"URI Too Long","#
        + #""detail":"The request has more than \#(maximumQueryParameters) query parameters."}]}"#,
    // Answered before a body is read: what follows on the connection is not a request's start.
    headers: [("Connection", "close")])

private let requestCompleted: MHD_RequestCompletedCallback = { context, connection, stateSlot, _ in
    guard let context else { return }
    let core = Unmanaged<Core>.fromOpaque(context).takeUnretainedValue()
    if let connection { core.deadlines?.answered(connection) }
    // A request marked in `uriReceived` that never reached the access handler holds no state.
    if let stateSlot, stateSlot.pointee == tooManyParametersMark { stateSlot.pointee = nil }
    guard let stateSlot, let rawState = stateSlot.pointee else { return }
    Unmanaged<RequestState>.fromOpaque(rawState).release()
    stateSlot.pointee = nil
    core.inFlight.subtract(1, ordering: .releasing)
}

private let connectionChanged: MHD_NotifyConnectionCallback = { context, connection, _, change in
    guard let context, let connection else { return }
    let core = Unmanaged<Core>.fromOpaque(context).takeUnretainedValue()
    // MHD_CONNECTION_NOTIFY_STARTED is 0, MHD_CONNECTION_NOTIFY_CLOSED 1.
    if change.rawValue == 0, core.sendBufferBytes > 0 {
        var bytes = core.sendBufferBytes
        let socket = wristler_mhd_connection_socket(connection)
        if socket >= 0 { _ = setsockopt(socket, SOL_SOCKET, SO_SNDBUF, &bytes, socklen_t(MemoryLayout<Int32>.size)) }
    }
    guard let deadlines = core.deadlines else { return }
    if change.rawValue == 0 { deadlines.opened(connection) } else { deadlines.closed(connection) }
}

/// The headers that say where a request's body ends and whom it is for, read in one pass.
struct FramingHeaders {
    var hosts = 0
    var contentLengths = Set<String>()
    var transferCodings: [String] = []
    var hasTransferEncoding = false

    init(_ connection: OpaquePointer) {
        for (name, value) in values(connection, kind: .HEADER_KIND) {
            // Only names of these lengths are lowercased: every request passes here.
            guard [4, 14, 17].contains(name.utf8.count) else { continue }
            switch name.lowercased() {
            case "host": hosts += 1
            case "content-length": contentLengths.insert(value ?? "")
            case "transfer-encoding":
                hasTransferEncoding = true
                transferCodings += (value ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }.filter { !$0.isEmpty }
            default: continue
            }
        }
    }

    /// The answer that refuses the request before its body is read (RFC 9112), nil when its framing
    /// is sound. All but the Host refusals close the connection: where the body ends, and so where
    /// the next request starts, is unknown, or is read differently by a proxy in front.
    func refusal(http11: Bool) -> HTTPResponse? {
        if contentLengths.count > 1 {
            return framingError(400, "conflicting_content_length", "The request has Content-Length headers with different values.", header: "Content-Length")
        }
        if hasTransferEncoding {
            // §6.1: a sender must not send both; a proxy that reads the length and this server
            // reading the chunks would see different requests (request smuggling).
            if !contentLengths.isEmpty {
                return framingError(
                    400, "conflicting_framing", "The request has both Transfer-Encoding and Content-Length.", header: "Transfer-Encoding")
            }
            // §6.1: chunked must be the final coding, once, or the body's end cannot be known.
            if transferCodings.last != "chunked" || transferCodings.filter({ $0 == "chunked" }).count != 1 {
                return framingError(
                    400, "chunked_not_final", "The request's Transfer-Encoding must end with chunked, given once.", header: "Transfer-Encoding")
            }
            if transferCodings.count > 1 {
                return framingError(
                    501, "unsupported_transfer_encoding", "Only the chunked transfer coding is supported, not \(transferCodings.dropLast().joined(separator: ", ")).",
                    header: "Transfer-Encoding")
            }
        }
        // §3.2: an HTTP/1.1 request has exactly one Host; one of HTTP/1.0 has at most one.
        if hosts > 1 || (hosts == 0 && http11) {
            return framingError(400, "host_required", "The request must have exactly one Host header.", header: "Host")
        }
        return nil
    }
}

/// A JSON:API error document refusing a request for its framing; the connection is closed after it.
private func framingError(_ status: Int, _ code: String, _ detail: String, header: String) -> HTTPResponse {
    HTTPResponse(
        status: status, contentType: "application/vnd.api+json",
        body: #"{"jsonapi":{"version":"1.0"},"errors":[{"status":"\#(status)","code":"\#(code)","title":"\#(status == 501 ? "Not Implemented" : "Bad Request")","#
            + #""detail":"\#(detail)","source":{"header":"\#(header)"}}]}"#,
        headers: [("Connection", "close")])
}

private func tooLargeResponse(_ limit: Int) -> HTTPResponse {
    HTTPResponse(
        status: 413, contentType: "application/vnd.api+json",
        body: #"{"jsonapi":{"version":"1.0"},"errors":[{"status":"413","code":"body_too_large","title":"Content Too Large","#
            + #""detail":"The request body is larger than \#(limit) bytes.","source":{"pointer":""}}]}"#)
}

private func send(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
    let made: OpaquePointer?
    if let file = response.file {
        // libmicrohttpd closes the descriptor when it destroys the response.
        guard let descriptor = file.take() else { return .NO }
        made = MHD_create_response_from_fd64(UInt64(file.size), descriptor)
        if made == nil { close(descriptor) }
    } else {
        made = response.body.withUnsafeBufferPointer { buffer in
            MHD_create_response_from_buffer(buffer.count, UnsafeMutableRawPointer(mutating: buffer.baseAddress), .RESPMEM_MUST_COPY)
        }
    }
    guard let made else { return .NO }
    defer { MHD_destroy_response(made) }
    for (name, value) in response.headers {
        // libmicrohttpd refuses header text with line breaks; such a header is dropped, not sent.
        _ = MHD_add_response_header(made, name, value)
    }
    return MHD_queue_response(connection, UInt32(response.status), made)
}

private func clientIPv4(_ connection: OpaquePointer) -> UInt32? {
    let address = wristler_mhd_client_ipv4(connection)
    return address == 0 ? nil : address
}

/// Whether the request asked `Expect: 100-continue`: its client sends no body before an answer.
private func expectsContinue(_ connection: OpaquePointer) -> Bool {
    headerValue(connection, "Expect")?.trimmingCharacters(in: .whitespaces).lowercased() == "100-continue"
}

private func headerValue(_ connection: OpaquePointer, _ name: String) -> String? {
    MHD_lookup_connection_value(connection, .HEADER_KIND, name).map { String(cString: $0) }
}

private func headers(_ connection: OpaquePointer) -> [String: String] {
    var result: [String: String] = [:]
    for (name, value) in values(connection, kind: .HEADER_KIND) {
        let key = name.lowercased()
        if let existing = result[key] { result[key] = existing + ", " + (value ?? "") } else { result[key] = value ?? "" }
    }
    return result
}

/// Collects name/value pairs of one kind (headers, query arguments) in the order they came.
private final class PairCollector {
    var pairs: [(String, String?)] = []
}

private func values(_ connection: OpaquePointer, kind: MHD_ValueKind) -> [(String, String?)] {
    let collector = PairCollector()
    let context = Unmanaged.passUnretained(collector).toOpaque()
    _ = MHD_get_connection_values(
        connection, kind,
        { context, _, key, value in
            guard let context, let key else { return .YES }
            let collector = Unmanaged<PairCollector>.fromOpaque(context).takeUnretainedValue()
            collector.pairs.append((String(cString: key), value.map { String(cString: $0) }))
            return .YES
        }, context)
    return withExtendedLifetime(collector) { collector.pairs }
}
