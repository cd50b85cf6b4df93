import CCurl
import CShims
import Encodings
import Foundation

/// Fetches a `sourceUrl` with libcurl's easy interface, blocking the calling thread (a route's
/// blocking thread) for at most `limits.totalTime`.
///
/// Bounds: http and https only, at the start and after every redirect (CURLOPT_PROTOCOLS_STR,
/// CURLOPT_REDIR_PROTOCOLS_STR); at most `limits.redirects` redirects; the body stops at
/// `limits.maximumBytes` (a `Content-Length` over it is refused before any byte is read, and a
/// body that grows past it is cut); connecting and the whole transfer have deadlines, so a slow
/// source is cut off; no proxy from the environment, no decompression (no Accept-Encoding), no
/// cookies. Every connection's address is checked as it is opened (CURLOPT_OPENSOCKETFUNCTION)
/// against `AddressPolicy` unless `allowPrivate`: that is the address actually connected to,
/// after DNS and after every redirect.
public struct SourceFetcher: Sendable {
    public struct Limits: Sendable {
        public var maximumBytes: Int
        public var totalTime: Duration
        public var connectTime: Duration
        public var redirects: Int

        public init(maximumBytes: Int = UploadLimits.maximumFileBytes, totalTime: Duration = .seconds(20), connectTime: Duration = .seconds(5), redirects: Int = 3) {
            self.maximumBytes = maximumBytes
            self.totalTime = totalTime
            self.connectTime = connectTime
            self.redirects = redirects
        }
    }

    /// Why a source gave no file.
    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// Not an http or https URL with a host (or a redirect to another scheme).
        case unsupportedURL
        /// A connection would have gone to an address that is not public.
        case addressNotAllowed(String)
        /// More than `limits.maximumBytes`, declared or sent.
        case tooLarge
        case tooManyRedirects
        case timedOut
        /// The source answered with a status other than 2xx.
        case status(Int)
        /// It could not be reached (name unknown, connection refused, TLS failed).
        case unreachable(String)

        public var description: String {
            switch self {
            case .unsupportedURL: "sourceUrl must be an http or https URL."
            case .addressNotAllowed(let address): "sourceUrl leads to \(address), which is not a public address."
            case .tooLarge: "The file at sourceUrl is larger than \(UploadLimits.maximumFileBytes) bytes."
            case .tooManyRedirects: "sourceUrl redirects too many times."
            case .timedOut: "sourceUrl did not answer in time."
            case .status(let status): "sourceUrl answered with status \(status)."
            case .unreachable(let reason): "sourceUrl cannot be fetched: \(reason)."
            }
        }
    }

    public var limits: Limits
    /// Whether loopback, private and link-local addresses may be fetched from (tests, a closed network).
    public var allowPrivate: Bool
    /// Addresses (as text: `127.0.0.1`) allowed besides the public ones when `allowPrivate` is
    /// off: a test's own source, to show that a redirect elsewhere is still checked.
    public var allowedAddresses: Set<String>

    public init(limits: Limits = Limits(), allowPrivate: Bool = false, allowedAddresses: Set<String> = []) {
        self.limits = limits
        self.allowPrivate = allowPrivate
        self.allowedAddresses = allowedAddresses
    }

    /// Whether `text` is a URL this fetcher will try: http or https, with a host, at most 2048 bytes.
    public static func isSupported(_ text: String) -> Bool {
        guard text.utf8.count <= 2048, let components = URLComponents(string: text),
            let scheme = components.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = components.host, !host.isEmpty
        else { return false }
        return true
    }

    /// The body of `url`, or why there is none.
    public func fetch(_ url: String) -> Result<[UInt8], Failure> {
        guard Self.isSupported(url) else { return .failure(.unsupportedURL) }
        guard Self.globalInit == 0, let handle = curl_easy_init() else { return .failure(.unreachable("libcurl cannot start")) }
        defer { curl_easy_cleanup(handle) }
        let transfer = FetchTransfer(limit: limits.maximumBytes, allowPrivate: allowPrivate, allowedAddresses: allowedAddresses)
        let context = Unmanaged.passUnretained(transfer).toOpaque()
        let code: CURLcode = withExtendedLifetime(transfer) {
            func set(_ option: CURLoption, _ value: Int) { _ = wristler_curl_easy_setopt_long(handle, option, value) }
            func set(_ option: CURLoption, string: String) { _ = wristler_curl_easy_setopt_string(handle, option, string) }
            func set(_ option: CURLoption, pointer: UnsafeMutableRawPointer?) { _ = wristler_curl_easy_setopt_pointer(handle, option, pointer) }
            set(CURLOPT_URL, string: url)
            set(CURLOPT_PROTOCOLS_STR, string: "http,https")
            set(CURLOPT_REDIR_PROTOCOLS_STR, string: "http,https")
            set(CURLOPT_FOLLOWLOCATION, 1)
            set(CURLOPT_MAXREDIRS, limits.redirects)
            set(CURLOPT_TIMEOUT_MS, Int(limits.totalTime.wholeMilliseconds))
            set(CURLOPT_CONNECTTIMEOUT_MS, Int(limits.connectTime.wholeMilliseconds))
            _ = wristler_curl_easy_setopt_off_t(handle, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(limits.maximumBytes))
            set(CURLOPT_NOSIGNAL, 1)
            // No proxy from http_proxy and the like: the address checked must be the source's.
            set(CURLOPT_PROXY, string: "")
            set(CURLOPT_USERAGENT, string: "Wristler-Inbox/1 (uploads)")
            set(CURLOPT_WRITEFUNCTION, pointer: unsafeBitCast(onBody, to: UnsafeMutableRawPointer.self))
            set(CURLOPT_WRITEDATA, pointer: context)
            set(CURLOPT_OPENSOCKETFUNCTION, pointer: unsafeBitCast(onOpenSocket, to: UnsafeMutableRawPointer.self))
            set(CURLOPT_OPENSOCKETDATA, pointer: context)
            return curl_easy_perform(handle)
        }
        if let refused = transfer.refusedAddress { return .failure(.addressNotAllowed(refused)) }
        if transfer.tooLarge || code == CURLE_FILESIZE_EXCEEDED { return .failure(.tooLarge) }
        switch code {
        case CURLE_OK: break
        case CURLE_OPERATION_TIMEDOUT: return .failure(.timedOut)
        case CURLE_TOO_MANY_REDIRECTS: return .failure(.tooManyRedirects)
        case CURLE_UNSUPPORTED_PROTOCOL: return .failure(.unsupportedURL)
        default: return .failure(.unreachable(String(cString: curl_easy_strerror(code))))
        }
        var status = 0
        _ = wristler_curl_easy_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        guard (200..<300).contains(status) else { return .failure(.status(status)) }
        return .success(transfer.body)
    }

    private static let globalInit: Int32 = Int32(curl_global_init(Int(CURL_GLOBAL_DEFAULT)).rawValue)
}

/// One fetch's state, touched only by the thread running it (curl calls back on that thread).
final class FetchTransfer {
    let limit: Int
    let allowPrivate: Bool
    let allowedAddresses: Set<String>
    var body: [UInt8] = []
    var tooLarge = false
    var refusedAddress: String?

    init(limit: Int, allowPrivate: Bool, allowedAddresses: Set<String>) {
        self.limit = limit
        self.allowPrivate = allowPrivate
        self.allowedAddresses = allowedAddresses
    }
}

/// CURLOPT_WRITEFUNCTION: appends up to the limit; past it, stops the transfer (returning less
/// than given makes libcurl fail it with CURLE_WRITE_ERROR).
private let onBody: curl_write_callback = { data, size, count, state in
    guard let data, let state else { return 0 }
    let transfer = Unmanaged<FetchTransfer>.fromOpaque(state).takeUnretainedValue()
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

/// CURLOPT_OPENSOCKETFUNCTION: called with the address of every connection libcurl is about to
/// open, for the first request and each redirect alike. One that is not public is refused (no
/// socket: libcurl fails the connection), unless private sources are allowed.
private let onOpenSocket: curl_opensocket_callback = { state, _, address in
    guard let state, let address else { return -1 }
    let transfer = Unmanaged<FetchTransfer>.fromOpaque(state).takeUnretainedValue()
    let family = address.pointee.family
    if !transfer.allowPrivate {
        let raw = UnsafeRawPointer(address).advanced(by: MemoryLayout<curl_sockaddr>.offset(of: \curl_sockaddr.addr)!)
        let (allowed, text) = AddressPolicy.check(raw, family: family)
        if !allowed && !transfer.allowedAddresses.contains(text) {
            transfer.refusedAddress = text
            return -1
        }
    }
    return socket(family, address.pointee.socktype, address.pointee.protocol)
}
