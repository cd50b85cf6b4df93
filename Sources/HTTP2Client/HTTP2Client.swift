/// # HTTP2Client
///
/// An HTTP/2 client for the push fan-out (APNs and FCM): many concurrent streams on few
/// connections. Two engines behind one API, chosen per request:
///
/// - **libnghttp2** (NGHTTP2Engine.swift) for every `https://` URL (TLS by OpenSSL, ALPN `h2`
///   required: a server that does not agree to h2 fails the request, not retryable) and for
///   `http://` with `Configuration.cleartextHTTP2` (h2c, prior knowledge). nghttp2 does the framing,
///   HPACK, flow control, SETTINGS and GOAWAY; one thread per client moves bytes between it, OpenSSL
///   and the sockets (`poll`, an eventfd to wake it). About a tenth of libcurl's CPU per request
///   (docs/fanout.md, "Why libnghttp2").
/// - **libcurl's multi interface** for plain `http://` (HTTP/1.1: the test mocks' control ports), and
///   for everything when `Configuration.engine` is `.libcurl` (the engine before, kept to compare
///   and to fall back on). Its thread starts at the first request that needs it.
///
/// The only module that touches nghttp2, curl or SSL pointers: requests and responses are plain
/// Swift values.
///
/// **Threading.** Only an engine's loop thread calls its C library. `send` puts requests on a queue
/// under a `Locked` (a lock that sleeps, not spins) and wakes the loop once per hand-over, whether
/// one request or a batch of thousands (the eventfd, or `curl_multi_wakeup`). A finished request
/// resumes its caller's continuation, or fills its slot in a batch that resumes once, when its last
/// answer is in. C callbacks run on the loop thread and reach their request's state through an
/// unretained pointer: the loop keeps every request in flight alive in its own tables.
///
/// **HTTP/2 (nghttp2 engine).** At most `maxConnectionsPerHost` connections per host:port, streams
/// spread over them; no stream goes on a connection before the server's first SETTINGS arrive, and
/// never more than min(`maxConcurrentStreams`, SETTINGS_MAX_CONCURRENT_STREAMS) at once (the rest
/// wait in the host's backlog, as plain values). After a GOAWAY a connection takes no new stream;
/// the streams the server did not process (above its last_stream_id, or reset with REFUSED_STREAM)
/// are sent again on another connection, at most 5 times, then fail retryable. A connection that
/// fails fails its streams as retryable. Certificates are checked against `caFile` (or the
/// system's), with the host name (or IP address) and SNI; an untrusted certificate fails the
/// request, not retryable (`curlCode` 60). DNS (`getaddrinfo`) blocks the loop thread once per new
/// connection. Errors carry the libcurl code of the same failure in `curlCode` whichever engine ran
/// (7 refused, 28 timed out, 60 certificate, 92 stream reset, ...).
///
/// **Bounds.** A response body beyond `maxResponseBytes` fails the request (`responseTooLarge`, the
/// stream is reset and the bytes stop at the bound); response headers beyond 64 KiB fail the request
/// (the stream is reset); every request has a timeout counted from `send` (one in flight is reset
/// with RST_STREAM and fails retryable); a connection still being set up after `connectTimeout`
/// fails; the libcurl engine keeps at most `maxTransfers` requests inside libcurl. `shutdown()`
/// fails whatever is queued or in flight with `.shutdown` and frees every handle.
import CCurl
import CShims
import Encodings
import Foundation
import Synchronization
import Threads

// MARK: - Values

/// One request. `timeout` covers everything from `send` to the last byte of the answer.
public struct HTTP2Request: Sendable {
    public var method: String
    public var url: String
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    public var timeout: Duration

    public init(
        method: String = "GET", url: String, headers: [(name: String, value: String)] = [], body: [UInt8] = [],
        timeout: Duration = .seconds(30)
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.timeout = timeout
    }
}

/// One answer: any status the server gave (a 4xx or 5xx is an answer, not an error).
public struct HTTP2Response: Sendable {
    public var status: Int
    /// In the order received, names lower-cased.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// 2 for HTTP/2, 1 for HTTP/1.x, 3 for HTTP/3.
    public var httpVersion: Int

    public init(status: Int, headers: [(name: String, value: String)], body: [UInt8], httpVersion: Int) {
        self.status = status
        self.headers = headers
        self.body = body
        self.httpVersion = httpVersion
    }

    /// The first header of that name (any case), if any.
    public func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name == wanted }?.value
    }
}

/// A request that got no complete answer.
public struct HTTP2ClientError: Error, Sendable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The request failed on its way (connection, TLS, HTTP/2, timeout): `curlCode` (libcurl's
        /// code for that failure, whichever engine ran) and `message` say how.
        case transport
        /// The answer's body was bigger than `Configuration.maxResponseBytes`; the rest was not read.
        case responseTooLarge
        /// The client was shut down (or was already) before the answer came.
        case shutdown
        /// The request cannot be sent as given (a header with a line break, a bad URL).
        case invalidRequest
    }

    public var kind: Kind
    /// libcurl's `CURLcode` for the failure (the nghttp2 engine reports the same codes), 0 when none fits.
    public var curlCode: Int
    public var message: String
    /// Whether sending the same request again may succeed: connection refused or reset, a refused
    /// or cut stream (GOAWAY, REFUSED_STREAM), a timeout, a shutdown. Not a bad certificate, not an
    /// answer too large, not a malformed request.
    public var isRetryable: Bool

    public init(kind: Kind, curlCode: Int = 0, message: String, isRetryable: Bool) {
        self.kind = kind
        self.curlCode = curlCode
        self.message = message
        self.isRetryable = isRetryable
    }

    public var description: String {
        let code = curlCode == 0 ? "" : " (curl \(curlCode))"
        return "HTTP2ClientError.\(kind)\(code): \(message)\(isRetryable ? " [retryable]" : "")"
    }

    /// libcurl codes worth another try: the network or the peer, not the request or the trust.
    static func retryable(_ code: CURLcode) -> Bool {
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_CONNECT, CURLE_OPERATION_TIMEDOUT, CURLE_SEND_ERROR,
            CURLE_RECV_ERROR, CURLE_GOT_NOTHING, CURLE_PARTIAL_FILE, CURLE_HTTP2, CURLE_HTTP2_STREAM,
            CURLE_SSL_CONNECT_ERROR, CURLE_AGAIN:
            return true
        default:
            return false
        }
    }
}

// MARK: - Client

public final class HTTP2Client: Sendable {
    public struct Configuration: Sendable {
        /// A PEM file of certificates to trust instead of the system's (tests' own CA).
        public var caFile: String?
        public var maxConnectionsPerHost: Int
        /// Streams this client opens on one connection at most; the server's SETTINGS may lower it.
        public var maxConcurrentStreams: Int
        public var connectTimeout: Duration
        /// A body past this fails the request with `responseTooLarge`.
        public var maxResponseBytes: Int
        /// libcurl engine only: requests inside libcurl at once (each holds an easy handle); the rest
        /// wait in a backlog.
        /// Default 256 (or fewer when connections × streams is smaller): libcurl 7.88's
        /// `curl_multi_perform` visits every transfer it holds on every call, so thousands of
        /// waiting transfers inside it cost more than they gain (measured: 2,000 about half the
        /// requests a second of 256 against nghttpd).
        public var maxTransfers: Int
        /// `http://` URLs speak HTTP/2 without upgrade (h2c, prior knowledge) instead of HTTP/1.1.
        public var cleartextHTTP2: Bool
        /// Which engine carries HTTP/2 (`https://`, and `http://` with `cleartextHTTP2`): libnghttp2
        /// (the default) or libcurl (the engine before it, kept to compare and to fall back on).
        /// Plain HTTP/1.1 always goes through libcurl.
        public var engine: Engine

        public enum Engine: Sendable, Equatable {
            case nghttp2
            case libcurl
        }

        public init(
            caFile: String? = nil, maxConnectionsPerHost: Int = 2, maxConcurrentStreams: Int = 1000,
            connectTimeout: Duration = .seconds(10), maxResponseBytes: Int = 1 << 20, maxTransfers: Int? = nil,
            cleartextHTTP2: Bool = false, engine: Engine = .nghttp2
        ) {
            self.caFile = caFile
            self.maxConnectionsPerHost = maxConnectionsPerHost
            self.maxConcurrentStreams = maxConcurrentStreams
            self.connectTimeout = connectTimeout
            self.maxResponseBytes = maxResponseBytes
            self.maxTransfers = max(1, maxTransfers ?? min(256, maxConnectionsPerHost * maxConcurrentStreams))
            self.cleartextHTTP2 = cleartextHTTP2
            self.engine = engine
        }
    }

    public let configuration: Configuration
    /// HTTP/2 on libnghttp2; nil when `configuration.engine` is `.libcurl`.
    private let h2: NGHTTP2Engine?
    /// libcurl, made at the first request that needs it (HTTP/1.1, or every request with
    /// `engine: .libcurl`): a push client that speaks only HTTP/2 never starts its thread.
    private let curl: Locked<CurlState>

    private struct CurlState {
        var engine: CurlEngine?
        var stopped = false
    }

    public init(configuration: Configuration = .init()) throws {
        self.configuration = configuration
        self.h2 = configuration.engine == .nghttp2 ? try NGHTTP2Engine(configuration: configuration) : nil
        // On `.libcurl` every request goes there: made now, so that a libcurl that cannot start
        // fails here, as before.
        self.curl = Locked(CurlState(engine: configuration.engine == .libcurl ? try CurlEngine(configuration: configuration) : nil))
    }

    deinit { shutdown() }

    /// Connections opened so far, over both engines.
    public var connectionsOpened: Int {
        (h2?.connectionsOpened ?? 0) + (curl.withLock { $0.engine }?.connectionsOpened ?? 0)
    }

    public func send(_ request: HTTP2Request) async throws -> HTTP2Response {
        try await withCheckedThrowingContinuation { continuation in
            let item = Pending(request: request, completion: .single(continuation), enqueued: .now)
            if !hand([item], toHTTP2: usesHTTP2Engine(request.url)) {
                continuation.resume(throwing: HTTP2ClientError.shutDown)
            }
        }
    }

    /// Many requests handed over at once (one wake-up of each engine's loop); the answers in the same order.
    public func send(_ requests: [HTTP2Request]) async -> [Result<HTTP2Response, HTTP2ClientError>] {
        await send(requests, answered: nil)
    }

    /// Many requests handed over at once; each answer is also handed to `answered` (with the
    /// request's index) as soon as it is in, on the engine's loop thread, so it must be quick.
    public func send(
        _ requests: [HTTP2Request], answered: (@Sendable (Int, Result<HTTP2Response, HTTP2ClientError>) -> Void)?
    ) async -> [Result<HTTP2Response, HTTP2ClientError>] {
        if requests.isEmpty { return [] }
        return await withCheckedContinuation { continuation in
            let batch = Batch(count: requests.count, answered: answered, continuation: continuation)
            let now = ContinuousClock.now
            var h2Items: [Pending] = []
            var curlItems: [Pending] = []
            h2Items.reserveCapacity(requests.count)
            for (index, request) in requests.enumerated() {
                let item = Pending(request: request, completion: .batch(batch, index), enqueued: now)
                if usesHTTP2Engine(request.url) { h2Items.append(item) } else { curlItems.append(item) }
            }
            for (items, toHTTP2) in [(h2Items, true), (curlItems, false)] where !items.isEmpty {
                if !hand(items, toHTTP2: toHTTP2) {
                    for item in items { item.completion.finish(.failure(HTTP2ClientError.shutDown)) }
                }
            }
        }
    }

    /// Ends the loop threads and frees every handle; what is queued or in flight fails with
    /// `.shutdown`. Returns once the threads are gone. Safe to call more than once, from any thread.
    public func shutdown() {
        h2?.shutdown()
        let engine = curl.withLock { state -> CurlEngine? in
            state.stopped = true
            return state.engine
        }
        engine?.shutdown()
    }

    /// `https://`, and `http://` with `cleartextHTTP2`, go to libnghttp2 (unless the configuration
    /// asks for libcurl); the rest (HTTP/1.1) to libcurl.
    private func usesHTTP2Engine(_ url: String) -> Bool {
        guard h2 != nil else { return false }
        let bytes = url.utf8
        if startsCaseInsensitive(bytes, "https://") { return true }
        return configuration.cleartextHTTP2 && startsCaseInsensitive(bytes, "http://")
    }

    private func hand(_ items: [Pending], toHTTP2: Bool) -> Bool {
        if toHTTP2, let h2 { return h2.hand(items) }
        let engine = curl.withLock { state -> CurlEngine? in
            if state.stopped { return nil }
            if state.engine == nil { state.engine = try? CurlEngine(configuration: configuration) }
            return state.engine
        }
        guard let engine else { return false }
        return engine.hand(items)
    }
}

func startsCaseInsensitive(_ bytes: String.UTF8View, _ prefix: StaticString) -> Bool {
    var iterator = bytes.makeIterator()
    let count = prefix.utf8CodeUnitCount
    let start = prefix.utf8Start
    for index in 0..<count {
        guard let byte = iterator.next() else { return false }
        let lower = byte >= 65 && byte <= 90 ? byte + 32 : byte
        if lower != start[index] { return false }
    }
    return true
}

/// HTTP/2 or HTTP/1.1 on libcurl's multi interface: one multi handle, one thread.
final class CurlEngine: Sendable {
    typealias Configuration = HTTP2Client.Configuration
    private let inbox: Locked<Inbox>
    private let multi: MultiHandle
    private let finished: Latch
    private let counters: Counters
    init(configuration: Configuration) throws {
        guard Self.globalInit == 0 else {
            throw HTTP2ClientError(
                kind: .transport, curlCode: Int(Self.globalInit), message: "curl_global_init failed", isRetryable: false)
        }
        guard let multi = curl_multi_init() else {
            throw HTTP2ClientError(kind: .transport, message: "curl_multi_init failed", isRetryable: false)
        }
        let settings: [(CURLMoption, Int)] = [
            (CURLMOPT_PIPELINING, Int(CURLPIPE_MULTIPLEX)),
            (CURLMOPT_MAX_HOST_CONNECTIONS, max(1, configuration.maxConnectionsPerHost)),
            (CURLMOPT_MAX_CONCURRENT_STREAMS, max(1, configuration.maxConcurrentStreams)),
        ]
        for (option, value) in settings {
            let code = wristler_curl_multi_setopt_long(multi, option, value)
            guard code == CURLM_OK else {
                curl_multi_cleanup(multi)
                throw HTTP2ClientError(
                    kind: .transport, curlCode: Int(code.rawValue),
                    message: "curl_multi_setopt \(option.rawValue): \(String(cString: curl_multi_strerror(code)))",
                    isRetryable: false)
            }
        }
        self.inbox = Locked(Inbox())
        self.multi = MultiHandle(pointer: multi)
        self.finished = Latch()
        self.counters = Counters()
        let loop = Loop(
            multi: multi, configuration: configuration, inbox: inbox, finished: finished, counters: counters)
        // Named from inside: on Linux a name set before start does not reach the thread.
        let thread = Thread {
            Thread.current.name = "http2-client"
            loop.run()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    deinit { shutdown() }

    /// Connections opened so far (libcurl's `CURLINFO_NUM_CONNECTS`, summed over finished transfers).
    var connectionsOpened: Int { counters.connectionsOpened.load(ordering: .relaxed) }

    /// Ends the loop thread and frees every handle; what is queued or in flight fails with
    /// `.shutdown`. Returns once the thread is gone. Safe to call more than once, from any thread.
    func shutdown() {
        if inbox.withLock({ $0.stop() }) { _ = curl_multi_wakeup(multi.pointer) }
        finished.wait()
    }

    /// Queues `items` and wakes the loop unless a wake-up is already on its way; false once stopping.
    func hand(_ items: [Pending]) -> Bool {
        guard let wake = inbox.withLock({ $0.add(items) }) else { return false }
        if wake { _ = curl_multi_wakeup(multi.pointer) }
        return true
    }

    private static let globalInit: Int32 = Int32(curl_global_init(Int(CURL_GLOBAL_DEFAULT)).rawValue)
}

extension HTTP2ClientError {
    static let shutDown = HTTP2ClientError(kind: .shutdown, message: "the HTTP/2 client was shut down", isRetryable: true)
}

// MARK: - Between callers and the loop

/// The multi handle, shared with callers only for `curl_multi_wakeup` (thread-safe in libcurl).
struct MultiHandle: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer
}

final class Counters: Sendable {
    let connectionsOpened = Atomic<Int>(0)
}

/// Requests waiting for the loop, under the client's lock.
/// Requests waiting for an engine's loop thread (under the engine's lock): the hand-over both
/// engines share, each with its own way to wake its loop.
struct Inbox {
    var pending: [Pending] = []
    /// A wake-up was sent since the loop last took `pending`.
    var wakeupSent = false
    var stopping = false

    /// Queues `items`: nil once stopping, else whether the caller must wake the loop (no wake-up
    /// is on its way yet).
    mutating func add(_ items: [Pending]) -> Bool? {
        if stopping { return nil }
        pending.append(contentsOf: items)
        if wakeupSent { return false }
        wakeupSent = true
        return true
    }

    /// Marks the engine stopping: whether the caller must wake the loop (the first call only).
    mutating func stop() -> Bool {
        if stopping { return false }
        stopping = true
        return true
    }

    /// What the loop takes each turn: the queued requests into `taken`, and whether to stop.
    mutating func take(into taken: inout [Pending]) -> Bool {
        swap(&taken, &pending)
        wakeupSent = false
        return stopping
    }

    /// Whatever is still queued, at tear-down.
    mutating func drain() -> [Pending] {
        defer { pending = [] }
        return pending
    }
}

struct Pending: Sendable {
    var request: HTTP2Request
    var completion: Completion
    var enqueued: ContinuousClock.Instant
}

enum Completion: Sendable {
    case single(CheckedContinuation<HTTP2Response, any Error>)
    case batch(Batch, Int)

    func finish(_ result: Result<HTTP2Response, HTTP2ClientError>) {
        switch self {
        case .single(let continuation):
            continuation.resume(with: result.mapError { $0 as any Error })
        case .batch(let batch, let index):
            batch.finish(index, result)
        }
    }
}

/// The answers of one `send([...])`. Filled on the loop threads (two when a batch mixes HTTP/2 and
/// HTTP/1.1 URLs, hence the lock, uncontended otherwise); handed to the caller by the continuation
/// once the last is in.
final class Batch: Sendable {
    private struct State {
        var results: [Result<HTTP2Response, HTTP2ClientError>?]
        var remaining: Int
    }

    private let state: Locked<State>
    private let answered: (@Sendable (Int, Result<HTTP2Response, HTTP2ClientError>) -> Void)?
    private let continuation: CheckedContinuation<[Result<HTTP2Response, HTTP2ClientError>], Never>

    init(
        count: Int, answered: (@Sendable (Int, Result<HTTP2Response, HTTP2ClientError>) -> Void)? = nil,
        continuation: CheckedContinuation<[Result<HTTP2Response, HTTP2ClientError>], Never>
    ) {
        self.state = Locked(State(results: Array(repeating: nil, count: count), remaining: count))
        self.answered = answered
        self.continuation = continuation
    }

    func finish(_ index: Int, _ result: Result<HTTP2Response, HTTP2ClientError>) {
        let (first, complete) = state.withLock { state -> (Bool, [Result<HTTP2Response, HTTP2ClientError>]?) in
            guard case .none = state.results[index] else { return (false, nil) }
            state.results[index] = result
            state.remaining -= 1
            guard state.remaining == 0 else { return (true, nil) }
            defer { state.results = [] }
            return (true, state.results.map { $0! })
        }
        if first { answered?(index, result) }
        if let complete { continuation.resume(returning: complete) }
    }
}

/// Opens once; `wait` returns once it is open.
final class Latch: @unchecked Sendable {
    private let condition = NSCondition()
    private var isOpen = false  // under `condition`

    func open() {
        condition.lock()
        isOpen = true
        condition.broadcast()
        condition.unlock()
    }

    func wait() {
        condition.lock()
        while !isOpen { condition.wait() }
        condition.unlock()
    }
}

// MARK: - The loop thread

/// One transfer: an easy handle and what its callbacks collect. Reused for request after request.
private final class Transfer {
    let easy: UnsafeMutableRawPointer
    let errorBuffer: UnsafeMutablePointer<CChar>
    var headerList: UnsafeMutablePointer<curl_slist>?
    var completion: Completion?
    var headers: [(name: String, value: String)] = []
    var body: [UInt8] = []
    var limit = 0
    var tooLarge = false
    /// Position in the loop's `active` table while in the multi handle.
    var slot = -1

    init?() {
        guard let easy = curl_easy_init() else { return nil }
        self.easy = easy
        self.errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }

    /// Back to idle: what the last request left is dropped, the handle stays.
    func clear() {
        if let headerList { curl_slist_free_all(headerList) }
        headerList = nil
        completion = nil
        headers = []
        body = []
        tooLarge = false
        slot = -1
    }

    deinit {
        if let headerList { curl_slist_free_all(headerList) }
        curl_easy_cleanup(easy)
        errorBuffer.deallocate()
    }
}

/// Touched only by the loop thread once started.
private final class Loop: @unchecked Sendable {
    let multi: UnsafeMutableRawPointer
    let configuration: Configuration
    let inbox: Locked<Inbox>
    let finished: Latch
    let counters: Counters
    typealias Configuration = HTTP2Client.Configuration

    /// Transfers inside the multi handle, kept alive here (callbacks hold unretained pointers).
    var active: [Transfer] = []
    var idle: [Transfer] = []
    /// Requests taken from the inbox, waiting for room (`maxTransfers`).
    var backlog: [Pending] = []
    var backlogHead = 0
    /// Whether a connection of this client has answered since it was made or last failed. Until
    /// then one request goes at a time: the server's SETTINGS (its stream limit; APNs starts some
    /// connections at 1) arrive before its first answer, and libcurl 7.88 would otherwise open a
    /// burst of streams on a new connection before reading them, each refused and retried on yet
    /// another connection.
    var warm = false

    init(multi: UnsafeMutableRawPointer, configuration: Configuration, inbox: Locked<Inbox>, finished: Latch, counters: Counters) {
        self.multi = multi
        self.configuration = configuration
        self.inbox = inbox
        self.finished = finished
        self.counters = counters
    }

    func run() {
        var taken: [Pending] = []
        var running: Int32 = 0
        while true {
            let stopping = inbox.withLock { $0.take(into: &taken) }
            if stopping {
                for item in taken { item.completion.finish(.failure(.shutDown)) }
                break
            }
            if !taken.isEmpty {
                backlog.append(contentsOf: taken)
                taken.removeAll(keepingCapacity: true)
            }
            startFromBacklog()
            _ = curl_multi_perform(multi, &running)
            if collectFinished() {
                // Room was made: start the next ones now rather than after a poll.
                startFromBacklog()
                _ = curl_multi_perform(multi, &running)
                _ = collectFinished()
            }
            _ = curl_multi_poll(multi, nil, 0, 1000, nil)
        }
        tearDown()
        finished.open()
    }

    /// Adds queued requests while there is room.
    private func startFromBacklog() {
        while backlogHead < backlog.count && active.count < (warm ? configuration.maxTransfers : 1) {
            let item = backlog[backlogHead]
            backlogHead += 1
            start(item)
        }
        if backlogHead == backlog.count {
            backlog.removeAll(keepingCapacity: backlog.count <= 4096)
            backlogHead = 0
        } else if backlogHead > 4096 && backlogHead * 2 > backlog.count {
            backlog.removeFirst(backlogHead)
            backlogHead = 0
        }
    }

    private func start(_ item: Pending) {
        let waited = ContinuousClock.now - item.enqueued
        let left = item.request.timeout - waited
        guard left > .zero else {
            item.completion.finish(
                .failure(
                    HTTP2ClientError(
                        kind: .transport, curlCode: Int(CURLE_OPERATION_TIMEDOUT.rawValue),
                        message: "timed out after \(waited) waiting for room among \(configuration.maxTransfers) transfers",
                        isRetryable: true)))
            return
        }
        guard let transfer = idle.popLast() ?? Transfer() else {
            item.completion.finish(.failure(HTTP2ClientError(kind: .transport, message: "curl_easy_init failed", isRetryable: true)))
            return
        }
        if let problem = configure(transfer, item.request, timeout: left) {
            transfer.clear()
            idle.append(transfer)
            item.completion.finish(.failure(problem))
            return
        }
        transfer.completion = item.completion
        transfer.slot = active.count
        active.append(transfer)
        let code = curl_multi_add_handle(multi, transfer.easy)
        if code != CURLM_OK {
            release(transfer)
            item.completion.finish(
                .failure(
                    HTTP2ClientError(
                        kind: .transport, curlCode: 0,
                        message: "curl_multi_add_handle: \(String(cString: curl_multi_strerror(code)))", isRetryable: true)))
        }
    }

    /// Sets every option of one request on a reset handle; an error when the request cannot go.
    private func configure(_ transfer: Transfer, _ request: HTTP2Request, timeout: Duration) -> HTTP2ClientError? {
        let easy = transfer.easy
        curl_easy_reset(easy)
        transfer.limit = configuration.maxResponseBytes
        transfer.errorBuffer[0] = 0
        let isHTTPS = request.url.utf8.starts(with: "https:".utf8)
        let version: Int
        if isHTTPS {
            version = Int(CURL_HTTP_VERSION_2TLS)
        } else {
            version = Int(configuration.cleartextHTTP2 ? CURL_HTTP_VERSION_2_PRIOR_KNOWLEDGE : CURL_HTTP_VERSION_1_1)
        }
        var failed: CURLcode = CURLE_OK
        func set(_ option: CURLoption, _ value: Int) {
            let code = wristler_curl_easy_setopt_long(easy, option, value)
            if code != CURLE_OK && failed == CURLE_OK { failed = code }
        }
        func set(_ option: CURLoption, pointer: UnsafeMutableRawPointer?) {
            let code = wristler_curl_easy_setopt_pointer(easy, option, pointer)
            if code != CURLE_OK && failed == CURLE_OK { failed = code }
        }
        func set(_ option: CURLoption, string: String) {
            let code = wristler_curl_easy_setopt_string(easy, option, string)
            if code != CURLE_OK && failed == CURLE_OK { failed = code }
        }
        set(CURLOPT_URL, string: request.url)
        set(CURLOPT_NOSIGNAL, 1)
        set(CURLOPT_HTTP_VERSION, version)
        set(CURLOPT_PIPEWAIT, 1)
        set(CURLOPT_TIMEOUT_MS, max(1, Int(timeout.wholeMilliseconds)))
        set(CURLOPT_CONNECTTIMEOUT_MS, max(1, Int(configuration.connectTimeout.wholeMilliseconds)))
        if let caFile = configuration.caFile { set(CURLOPT_CAINFO, string: caFile) }
        set(CURLOPT_ERRORBUFFER, pointer: UnsafeMutableRawPointer(transfer.errorBuffer))
        let state = Unmanaged.passUnretained(transfer).toOpaque()
        set(CURLOPT_PRIVATE, pointer: state)
        set(CURLOPT_WRITEFUNCTION, pointer: unsafeBitCast(onBody, to: UnsafeMutableRawPointer.self))
        set(CURLOPT_WRITEDATA, pointer: state)
        set(CURLOPT_HEADERFUNCTION, pointer: unsafeBitCast(onHeader, to: UnsafeMutableRawPointer.self))
        set(CURLOPT_HEADERDATA, pointer: state)
        let fileLimit = wristler_curl_easy_setopt_off_t(easy, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(configuration.maxResponseBytes))
        if fileLimit != CURLE_OK && failed == CURLE_OK { failed = fileLimit }

        // Headers: none may carry a line break (it would be a second header, or a second request).
        var list: UnsafeMutablePointer<curl_slist>? = curl_slist_append(nil, "Expect:")
        for header in request.headers {
            if header.name.isEmpty || header.name.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == 58 })
                || header.value.utf8.contains(where: { $0 == 13 || $0 == 10 })
            {
                if let list { curl_slist_free_all(list) }
                return HTTP2ClientError(kind: .invalidRequest, message: "header \(header.name.debugDescription) cannot be sent", isRetryable: false)
            }
            // "name;" sends a header with an empty value ("name:" would remove it).
            let line = header.value.isEmpty ? "\(header.name);" : "\(header.name): \(header.value)"
            guard let longer = curl_slist_append(list, line) else { break }
            list = longer
        }
        transfer.headerList = list
        set(CURLOPT_HTTPHEADER, pointer: UnsafeMutableRawPointer(list))

        switch request.method {
        case "GET" where request.body.isEmpty:
            set(CURLOPT_HTTPGET, 1)
        case "HEAD":
            set(CURLOPT_NOBODY, 1)
        default:
            if request.method != "POST" { set(CURLOPT_CUSTOMREQUEST, string: request.method) }
            if request.method == "POST" || !request.body.isEmpty {
                set(CURLOPT_POST, 1)
                let size = wristler_curl_easy_setopt_off_t(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count))
                if size != CURLE_OK && failed == CURLE_OK { failed = size }
                // Copied by libcurl here, so the request's array need not outlive this call.
                if request.body.isEmpty {
                    var nothing: UInt8 = 0
                    withUnsafeMutableBytes(of: &nothing) { set(CURLOPT_COPYPOSTFIELDS, pointer: $0.baseAddress) }
                } else {
                    request.body.withUnsafeBytes { bytes in
                        set(CURLOPT_COPYPOSTFIELDS, pointer: UnsafeMutableRawPointer(mutating: bytes.baseAddress))
                    }
                }
            }
        }
        if failed != CURLE_OK {
            return HTTP2ClientError(
                kind: .invalidRequest, curlCode: Int(failed.rawValue),
                message: "curl_easy_setopt: \(String(cString: curl_easy_strerror(failed)))", isRetryable: false)
        }
        return nil
    }

    /// Reads every finished transfer and answers its caller; true when any finished.
    private func collectFinished() -> Bool {
        var any = false
        var queued: Int32 = 0
        while let message = curl_multi_info_read(multi, &queued) {
            guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle else { continue }
            let code = message.pointee.data.result
            var pointer: UnsafeMutableRawPointer?
            _ = wristler_curl_easy_getinfo_pointer(easy, CURLINFO_PRIVATE, &pointer)
            guard let pointer else { continue }
            let transfer = Unmanaged<Transfer>.fromOpaque(pointer).takeUnretainedValue()
            any = true
            let result = outcome(transfer, code)
            switch result {
            case .success: warm = true
            case .failure(let error) where error.kind == .transport: warm = false
            case .failure: break
            }
            let completion = transfer.completion
            release(transfer)
            completion?.finish(result)
        }
        return any
    }

    private func outcome(_ transfer: Transfer, _ code: CURLcode) -> Result<HTTP2Response, HTTP2ClientError> {
        let easy = transfer.easy
        var connects = 0
        _ = wristler_curl_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &connects)
        if connects > 0 { counters.connectionsOpened.add(connects, ordering: .relaxed) }
        if transfer.tooLarge || code == CURLE_FILESIZE_EXCEEDED {
            return .failure(
                HTTP2ClientError(
                    kind: .responseTooLarge, curlCode: Int(code.rawValue),
                    message: "the response is larger than maxResponseBytes (\(configuration.maxResponseBytes))",
                    isRetryable: false))
        }
        guard code == CURLE_OK else {
            let detail = String(cString: transfer.errorBuffer)
            let summary = String(cString: curl_easy_strerror(code))
            return .failure(
                HTTP2ClientError(
                    kind: .transport, curlCode: Int(code.rawValue),
                    message: detail.isEmpty ? summary : "\(summary): \(detail)", isRetryable: HTTP2ClientError.retryable(code)))
        }
        var status = 0
        _ = wristler_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        var version = 0
        _ = wristler_curl_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        let httpVersion: Int
        switch version {
        case Int(CURL_HTTP_VERSION_2_0): httpVersion = 2
        case Int(CURL_HTTP_VERSION_3): httpVersion = 3
        default: httpVersion = 1
        }
        return .success(HTTP2Response(status: status, headers: transfer.headers, body: transfer.body, httpVersion: httpVersion))
    }

    /// Out of the multi handle and the active table, back to the free list.
    private func release(_ transfer: Transfer) {
        _ = curl_multi_remove_handle(multi, transfer.easy)
        let slot = transfer.slot
        if slot >= 0 {
            let last = active.removeLast()
            if last !== transfer {
                active[slot] = last
                last.slot = slot
            }
        }
        transfer.clear()
        idle.append(transfer)
    }

    /// Fails everything in flight or waiting, and frees every handle.
    private func tearDown() {
        for transfer in active {
            _ = curl_multi_remove_handle(multi, transfer.easy)
            let completion = transfer.completion
            transfer.clear()
            completion?.finish(.failure(.shutDown))
        }
        active = []
        for item in backlog[backlogHead...] { item.completion.finish(.failure(.shutDown)) }
        backlog = []
        let late = inbox.withLock { $0.drain() }
        for item in late { item.completion.finish(.failure(.shutDown)) }
        idle = []  // deinit cleans up each easy handle
        curl_multi_cleanup(multi)
    }
}

/// CURLOPT_WRITEFUNCTION: appends to the transfer's body up to its bound; past it, stops the
/// transfer (returning less than given makes libcurl fail it with CURLE_WRITE_ERROR).
private let onBody: curl_write_callback = { data, size, count, state in
    guard let data, let state else { return 0 }
    let transfer = Unmanaged<Transfer>.fromOpaque(state).takeUnretainedValue()
    let length = size * count
    if transfer.body.count + length > transfer.limit {
        transfer.tooLarge = true
        return 0
    }
    data.withMemoryRebound(to: UInt8.self, capacity: length) { bytes in
        transfer.body.append(contentsOf: UnsafeBufferPointer(start: bytes, count: length))
    }
    return length
}

/// CURLOPT_HEADERFUNCTION: one header line at a time; a status line starts a new response (after
/// a 100, or a redirect), so only the final response's headers stay.
private let onHeader: curl_write_callback = { data, size, count, state in
    guard let data, let state else { return 0 }
    let transfer = Unmanaged<Transfer>.fromOpaque(state).takeUnretainedValue()
    let length = size * count
    let line = UnsafeRawBufferPointer(start: data, count: length)
    if line.starts(with: "HTTP/".utf8) {
        transfer.headers.removeAll(keepingCapacity: true)
        return length
    }
    guard let colon = line.firstIndex(of: 58) else { return length }  // the blank line ends the headers
    let name = String(decoding: line[..<colon], as: UTF8.self).lowercased()
    var start = colon + 1
    var end = length
    while start < end && (line[start] == 32 || line[start] == 9) { start += 1 }
    while end > start && (line[end - 1] == 10 || line[end - 1] == 13 || line[end - 1] == 32 || line[end - 1] == 9) { end -= 1 }
    transfer.headers.append((name: name, value: String(decoding: line[start..<end], as: UTF8.self)))
    return length
}
