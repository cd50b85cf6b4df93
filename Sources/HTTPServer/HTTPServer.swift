import CMicroHTTPD
import CShims
import Foundation
import Synchronization

/// An HTTP/1.1 server on libmicrohttpd: the library parses requests (keep-alive, pipelining and
/// chunked bodies included) and writes responses; this type collects each request's body within a
/// limit, hands the request to a handler and sends back what it returns.
///
/// Guarantees:
/// - a body over `maximumBodyBytes` is answered 413 (up front when `Content-Length` says so, else
///   as soon as it grows past the limit), never buffered whole;
/// - headers over `maximumHeaderBytes` are refused by libmicrohttpd itself (431);
/// - at most `connectionLimit` connections are open; idle ones close after `idleTimeoutSeconds`;
/// - `shutdown` stops accepting, lets the requests in flight finish (up to a grace period), then
///   closes every connection.
///
/// The handler runs on one of libmicrohttpd's `threads` worker threads, never on Swift's
/// cooperative pool, so it may block (on the database, say); while it does, the other connections
/// of that worker wait, which is why there are several.
public final class HTTPServer: Sendable {
    public struct Configuration: Sendable {
        /// The address to listen on: `127.0.0.1` (loopback) or `0.0.0.0` (every interface).
        public var host: String = "127.0.0.1"
        /// 0 picks a free port (see `port` once started).
        public var port: UInt16 = 8080
        public var threads: Int = 16
        public var maximumBodyBytes: Int = 1 << 20
        public var maximumHeaderBytes: Int = 64 * 1024
        public var connectionLimit: Int = 1024
        public var idleTimeoutSeconds: Int = 30

        public init(
            host: String = "127.0.0.1", port: UInt16 = 8080, threads: Int = 16, maximumBodyBytes: Int = 1 << 20,
            maximumHeaderBytes: Int = 64 * 1024, connectionLimit: Int = 1024, idleTimeoutSeconds: Int = 30
        ) {
            self.host = host
            self.port = port
            self.threads = threads
            self.maximumBodyBytes = maximumBodyBytes
            self.maximumHeaderBytes = maximumHeaderBytes
            self.connectionLimit = connectionLimit
            self.idleTimeoutSeconds = idleTimeoutSeconds
        }
    }

    public typealias Handler = @Sendable (HTTPRequest) -> HTTPResponse

    public struct StartFailure: Error, CustomStringConvertible {
        public var description: String
    }

    public let configuration: Configuration
    /// The port the server listens on.
    public let port: UInt16
    private let core: Core
    private let daemon: Mutex<DaemonHandle?>

    /// Starts listening.
    public init(configuration: Configuration, handler: @escaping Handler) throws {
        self.configuration = configuration
        let core = Core(handler: handler, maximumBodyBytes: configuration.maximumBodyBytes)
        self.core = core
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = configuration.port.bigEndian
        guard inet_pton(AF_INET, configuration.host, &address.sin_addr) == 1 else {
            throw StartFailure(description: "\"\(configuration.host)\" is not an IPv4 address to listen on.")
        }
        let context = Unmanaged.passUnretained(core).toOpaque()
        let flags = UInt32(MHD_USE_EPOLL_INTERNAL_THREAD.rawValue) | UInt32(MHD_USE_ITC.rawValue)
        let started: OpaquePointer? = withUnsafePointer(to: &address) { addressPointer in
            let options = [
                MHD_OptionItem(option: .SOCK_ADDR, value: 0, ptr_value: UnsafeMutableRawPointer(mutating: addressPointer)),
                MHD_OptionItem(option: .THREAD_POOL_SIZE, value: max(1, configuration.threads), ptr_value: nil),
                MHD_OptionItem(option: .CONNECTION_LIMIT, value: max(1, configuration.connectionLimit), ptr_value: nil),
                MHD_OptionItem(option: .CONNECTION_TIMEOUT, value: max(1, configuration.idleTimeoutSeconds), ptr_value: nil),
                MHD_OptionItem(option: .CONNECTION_MEMORY_LIMIT, value: max(4096, configuration.maximumHeaderBytes), ptr_value: nil),
                MHD_OptionItem(
                    option: .NOTIFY_COMPLETED, value: unsafeBitCast(requestCompleted, to: Int.self), ptr_value: context),
                // The path and query are decoded here (URLDecoding), once: libmicrohttpd's own
                // unescaping is switched off so nothing is decoded twice.
                MHD_OptionItem(option: .UNESCAPE_CALLBACK, value: unsafeBitCast(keepEscaped, to: Int.self), ptr_value: nil),
                MHD_OptionItem(option: .END, value: 0, ptr_value: nil),
            ]
            return options.withUnsafeBufferPointer { buffer in
                wristler_mhd_start_daemon(flags, configuration.port, nil, nil, accessHandler, context, buffer.baseAddress)
            }
        }
        guard let started else {
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
        MHD_stop_daemon(running)
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
    let inFlight = Atomic<Int>(0)

    init(handler: @escaping HTTPServer.Handler, maximumBodyBytes: Int) {
        self.handler = handler
        self.maximumBodyBytes = maximumBodyBytes
    }
}

/// One request's body as it arrives. Touched only by the worker thread of its connection.
final class RequestState {
    var body: [UInt8] = []
    var tooLarge = false
}

private let accessHandler: MHD_AccessHandlerCallback = { context, connection, url, method, _, uploadData, uploadDataSize, stateSlot in
    guard let context, let connection, let stateSlot, let uploadDataSize else { return .NO }
    let core = Unmanaged<Core>.fromOpaque(context).takeUnretainedValue()
    // First call: the headers are in; the body (if any) comes in the calls after.
    guard let rawState = stateSlot.pointee else {
        let state = RequestState()
        core.inFlight.add(1, ordering: .relaxed)
        stateSlot.pointee = Unmanaged.passRetained(state).toOpaque()
        if let length = headerValue(connection, "Content-Length").flatMap(Int.init), length > core.maximumBodyBytes {
            state.tooLarge = true
            return send(tooLargeResponse(core.maximumBodyBytes), on: connection)
        }
        return .YES
    }
    let state = Unmanaged<RequestState>.fromOpaque(rawState).takeUnretainedValue()
    if uploadDataSize.pointee > 0 {
        let count = uploadDataSize.pointee
        if !state.tooLarge, let uploadData {
            if state.body.count + count > core.maximumBodyBytes {
                state.tooLarge = true
                state.body = []
            } else {
                uploadData.withMemoryRebound(to: UInt8.self, capacity: count) { bytes in
                    state.body.append(contentsOf: UnsafeBufferPointer(start: bytes, count: count))
                }
            }
        }
        uploadDataSize.pointee = 0
        return .YES
    }
    if state.tooLarge { return send(tooLargeResponse(core.maximumBodyBytes), on: connection) }
    let request = HTTPRequest(
        method: method.map { String(cString: $0) } ?? "GET",
        path: URLDecoding.decode(url.map { String(cString: $0) } ?? "/", plusIsSpace: false),
        query: values(connection, kind: .GET_ARGUMENT_KIND).map {
            HTTPRequest.QueryArgument(
                name: URLDecoding.decode($0.0, plusIsSpace: true), value: $0.1.map { URLDecoding.decode($0, plusIsSpace: true) })
        },
        headers: headers(connection), body: state.body)
    state.body = []
    return send(core.handler(request), on: connection)
}

private let keepEscaped: @convention(c) (UnsafeMutableRawPointer?, OpaquePointer?, UnsafeMutablePointer<CChar>?) -> Int = { _, _, text in
    text.map { strlen($0) } ?? 0
}

private let requestCompleted: MHD_RequestCompletedCallback = { context, _, stateSlot, _ in
    guard let context, let stateSlot, let rawState = stateSlot.pointee else { return }
    Unmanaged<RequestState>.fromOpaque(rawState).release()
    stateSlot.pointee = nil
    Unmanaged<Core>.fromOpaque(context).takeUnretainedValue().inFlight.subtract(1, ordering: .releasing)
}

private func tooLargeResponse(_ limit: Int) -> HTTPResponse {
    HTTPResponse(
        status: 413, contentType: "application/vnd.api+json",
        body: #"{"jsonapi":{"version":"1.0"},"errors":[{"status":"413","code":"body_too_large","title":"Content Too Large","#
            + #""detail":"The request body is larger than \#(limit) bytes.","source":{"pointer":""}}]}"#)
}

private func send(_ response: HTTPResponse, on connection: OpaquePointer) -> MHD_Result {
    let made = response.body.withUnsafeBufferPointer { buffer in
        MHD_create_response_from_buffer(buffer.count, UnsafeMutableRawPointer(mutating: buffer.baseAddress), .RESPMEM_MUST_COPY)
    }
    guard let made else { return .NO }
    defer { MHD_destroy_response(made) }
    for (name, value) in response.headers {
        // libmicrohttpd refuses header text with line breaks; such a header is dropped, not sent.
        _ = MHD_add_response_header(made, name, value)
    }
    return MHD_queue_response(connection, UInt32(response.status), made)
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
