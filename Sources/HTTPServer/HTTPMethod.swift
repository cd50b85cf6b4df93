/// A request's method. Extensible: the methods the API routes have names; any other token a client
/// sends (`PROPFIND`) is still a method value, which no route has, so it answers 405 or 404 instead
/// of failing to parse.
public struct HTTPMethod: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public static let get = HTTPMethod("GET")
    public static let head = HTTPMethod("HEAD")
    public static let post = HTTPMethod("POST")
    public static let put = HTTPMethod("PUT")
    public static let patch = HTTPMethod("PATCH")
    public static let delete = HTTPMethod("DELETE")
    public static let options = HTTPMethod("OPTIONS")

    /// The named methods, for reading a request without a new string per known method.
    static let known: [HTTPMethod] = [.get, .post, .patch, .delete, .head, .put, .options]

    /// The method of a request line as libmicrohttpd hands it over (a NUL-terminated token it has
    /// already bounded by its own limits): a named method when it is one, else its text, cut to
    /// `maximumLength` bytes so an absurd token costs no more than a short one.
    init(bytes: UnsafeBufferPointer<UInt8>) {
        for method in Self.known where method.rawValue.utf8.elementsEqual(bytes) {
            self = method
            return
        }
        self.init(String(decoding: bytes.prefix(Self.maximumLength), as: UTF8.self))
    }

    static let maximumLength = 32

    public var description: String { rawValue }

    public static func < (lhs: HTTPMethod, rhs: HTTPMethod) -> Bool { lhs.rawValue < rhs.rawValue }
}
