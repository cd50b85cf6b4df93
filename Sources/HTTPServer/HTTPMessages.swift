import Foundation
import Synchronization

/// A request as the server read it: method, path (percent-decoded by libmicrohttpd), query
/// arguments in order, headers by lower-case name, and the whole body.
public struct HTTPRequest: Sendable {
    public var method: HTTPMethod
    public var path: String
    public var query: [QueryArgument]
    /// Header values by lower-case name; a repeated header's values joined with ", ".
    public var headers: [String: String]
    public var body: [UInt8]
    /// The address the connection came from (IPv4, in network byte order as the socket had it);
    /// nil when unknown, as in a request a test makes by hand. `clientAddress` writes it down.
    public var clientIPv4: UInt32?

    public struct QueryArgument: Sendable, Hashable {
        public var name: String
        /// Nil for an argument without `=` (`?flag`).
        public var value: String?

        public init(name: String, value: String?) {
            self.name = name
            self.value = value
        }
    }

    public init(
        method: HTTPMethod, path: String, query: [QueryArgument] = [], headers: [String: String] = [:], body: [UInt8] = [],
        clientIPv4: UInt32? = nil
    ) {
        self.method = method
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body
        self.clientIPv4 = clientIPv4
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }

    /// The client's address in dotted form (`203.0.113.7`), written only when asked for: most
    /// requests never need it.
    public var clientAddress: String? {
        guard let address = clientIPv4 else { return nil }
        let bytes = withUnsafeBytes(of: address) { Array($0) }
        return "\(bytes[0]).\(bytes[1]).\(bytes[2]).\(bytes[3])"
    }
}

/// A response to send: status, headers in order, body.
public struct HTTPResponse: Sendable {
    public var status: Int
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]
    /// A file sent as the body instead of `body`: libmicrohttpd reads it from its descriptor as the
    /// client takes it (with `sendfile` on a plain connection), so a slow reader holds no copy of
    /// it in memory.
    public var file: HTTPFileBody?

    public init(status: Int, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// A response whose body is `file`, sent from its descriptor.
    public init(status: Int, headers: [(name: String, value: String)] = [], file: HTTPFileBody) {
        self.init(status: status, headers: headers)
        self.file = file
    }

    public init(status: Int, contentType: String, body: String, headers: [(name: String, value: String)] = []) {
        self.init(status: status, headers: [("Content-Type", contentType)] + headers, body: Array(body.utf8))
    }

    public func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

/// An open file to send as a response's body, `size` bytes from its start. It owns its descriptor:
/// the server hands it to libmicrohttpd, which closes it when the response is done, and a body
/// never sent closes it when it goes.
public final class HTTPFileBody: Sendable {
    public let size: Int
    private let descriptor: Mutex<Int32?>

    /// Takes ownership of `descriptor`.
    public init(descriptor: Int32, size: Int) {
        self.descriptor = Mutex(descriptor)
        self.size = size
    }

    /// Opens the file at `path` for reading, or throws the reason it cannot.
    public convenience init(path: String) throws {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw CocoaError(.fileReadNoSuchFile, userInfo: [NSFilePathErrorKey: path]) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            close(descriptor)
            throw CocoaError(.fileReadUnknown, userInfo: [NSFilePathErrorKey: path])
        }
        self.init(descriptor: descriptor, size: Int(status.st_size))
    }

    /// The descriptor, once: whoever takes it closes it.
    func take() -> Int32? { descriptor.withLock { taken in defer { taken = nil }; return taken } }

    deinit {
        if let descriptor = descriptor.withLock({ $0 }) { close(descriptor) }
    }
}

/// What a handler gives back: the response now, or work that waits (on a database) to run on one
/// of the server's blocking threads while the connection waits, suspended.
public enum HTTPReply: Sendable {
    case now(HTTPResponse)
    case later(@Sendable () -> HTTPResponse)
}
