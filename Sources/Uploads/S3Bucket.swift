import CCurl
import CShims
import Crypto
import Foundation

/// A bucket of an S3-compatible object store, through libcurl, which signs each request itself
/// (AWS Signature Version 4, `CURLOPT_AWS_SIGV4`). Objects are addressed path-style
/// (`<endpoint>/<bucket>/<key>`), which every S3-compatible server takes. Calls block: the API
/// runs them on its blocking threads.
public final class S3Bucket: Sendable {
    public struct Settings: Sendable {
        /// `http(s)://host[:port]/bucket`.
        public var url: String
        public var region: String
        public var accessKeyId: String
        public var secretAccessKey: String
        /// PEM certificates to trust instead of the system's (a private store's own CA).
        public var caFile: String?
        public var timeout: Duration

        public init(url: String, region: String = "us-east-1", accessKeyId: String, secretAccessKey: String, caFile: String? = nil, timeout: Duration = .seconds(60)) {
            self.url = url.hasSuffix("/") ? String(url.dropLast()) : url
            self.region = region
            self.accessKeyId = accessKeyId
            self.secretAccessKey = secretAccessKey
            self.caFile = caFile
            self.timeout = timeout
        }

        /// Whether `text` can be a bucket's URL: http or https, a host, and one path segment (the bucket).
        public static func isBucketURL(_ text: String) -> Bool {
            guard let components = URLComponents(string: text), ["http", "https"].contains(components.scheme ?? ""),
                components.host?.isEmpty == false, components.query == nil
            else { return false }
            let segments = components.path.split(separator: "/")
            return segments.count == 1
        }
    }

    /// A request the store refused or could not be reached for.
    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    public let settings: Settings

    public init(settings: Settings) {
        self.settings = settings
    }

    /// Stores `bytes` under `key`.
    public func put(_ bytes: [UInt8], key: String, contentType: String) throws {
        let status = try bytes.withUnsafeBufferPointer { body in
            try perform("PUT", key: key, headers: ["Content-Type: \(contentType)"], payloadSHA256: SHA256.hexDigest(bytes)) { handle in
                _ = wristler_curl_easy_setopt_pointer(handle, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: UnsafeRawPointer(body.baseAddress) ?? UnsafeRawPointer(bitPattern: 1)!))
                _ = wristler_curl_easy_setopt_off_t(handle, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count))
            }
        }
        guard (200..<300).contains(status) else { throw Failure(description: "The object store answered \(status) to storing \(key).") }
    }

    /// Writes the object `key` to `descriptor`, at most `limit` bytes; false when there is no such object.
    public func get(key: String, to descriptor: Int32, limit: Int) throws -> Bool {
        let sink = Sink(descriptor: descriptor, limit: limit)
        let status = try withExtendedLifetime(sink) {
            try perform("GET", key: key) { handle in
                _ = wristler_curl_easy_setopt_pointer(handle, CURLOPT_WRITEFUNCTION, unsafeBitCast(onObjectBytes, to: UnsafeMutableRawPointer.self))
                _ = wristler_curl_easy_setopt_pointer(handle, CURLOPT_WRITEDATA, Unmanaged.passUnretained(sink).toOpaque())
            }
        }
        if sink.failed { throw Failure(description: "The object \(key) is larger than \(limit) bytes, or could not be written down.") }
        if status == 404 { return false }
        guard (200..<300).contains(status) else { throw Failure(description: "The object store answered \(status) to reading \(key).") }
        return true
    }

    /// Makes the bucket (an operator's first step, and the tests').
    public func create() throws {
        let status = try perform("PUT", key: "") { handle in
            // An empty body, copied by libcurl.
            _ = wristler_curl_easy_setopt_string(handle, CURLOPT_COPYPOSTFIELDS, "")
        }
        guard (200..<300).contains(status) else { throw Failure(description: "The object store answered \(status) to making the bucket.") }
    }

    /// Deletes the object `key` (none there is no failure).
    public func delete(key: String) throws {
        let status = try perform("DELETE", key: key) { _ in }
        guard (200..<300).contains(status) || status == 404 else { throw Failure(description: "The object store answered \(status) to deleting \(key).") }
    }

    /// One signed request; returns the status. `configure` adds what the method needs.
    /// The payload's SHA-256 goes in `x-amz-content-sha256`, which S3 requires and libcurl then
    /// signs with the request (as the payload's hash) rather than hashing the body itself.
    private func perform(
        _ method: String, key: String, headers: [String] = [], payloadSHA256: String = SHA256.hexDigest([UInt8]()),
        configure: (UnsafeMutableRawPointer) -> Void
    ) throws -> Int {
        guard Self.globalInit == 0, let handle = curl_easy_init() else { throw Failure(description: "libcurl cannot start.") }
        defer { curl_easy_cleanup(handle) }
        var list: UnsafeMutablePointer<curl_slist>?
        for header in headers + ["x-amz-content-sha256: \(payloadSHA256)"] { list = curl_slist_append(list, header) }
        defer { curl_slist_free_all(list) }
        func set(_ option: CURLoption, _ value: Int) { _ = wristler_curl_easy_setopt_long(handle, option, value) }
        func set(_ option: CURLoption, string: String) { _ = wristler_curl_easy_setopt_string(handle, option, string) }
        set(CURLOPT_URL, string: settings.url + "/" + key)
        set(CURLOPT_PROTOCOLS_STR, string: "http,https")
        set(CURLOPT_CUSTOMREQUEST, string: method)
        if method == "GET" { set(CURLOPT_HTTPGET, 1) }
        if method == "DELETE" { set(CURLOPT_NOBODY, 0) }
        set(CURLOPT_AWS_SIGV4, string: "aws:amz:\(settings.region):s3")
        set(CURLOPT_USERNAME, string: settings.accessKeyId)
        set(CURLOPT_PASSWORD, string: settings.secretAccessKey)
        set(CURLOPT_TIMEOUT_MS, Int(settings.timeout.components.seconds * 1000))
        set(CURLOPT_CONNECTTIMEOUT_MS, 10_000)
        set(CURLOPT_NOSIGNAL, 1)
        set(CURLOPT_PROXY, string: "")
        if let caFile = settings.caFile { set(CURLOPT_CAINFO, string: caFile) }
        if method != "GET" {
            // Answers to PUT and DELETE are short XML, read and dropped.
            _ = wristler_curl_easy_setopt_pointer(handle, CURLOPT_WRITEFUNCTION, unsafeBitCast(dropBytes, to: UnsafeMutableRawPointer.self))
        }
        _ = wristler_curl_easy_setopt_pointer(handle, CURLOPT_HTTPHEADER, list.map { UnsafeMutableRawPointer($0) })
        configure(handle)
        let code = curl_easy_perform(handle)
        guard code == CURLE_OK || code == CURLE_WRITE_ERROR else {
            throw Failure(description: "The object store at \(settings.url) cannot be reached: \(String(cString: curl_easy_strerror(code))).")
        }
        var status = 0
        _ = wristler_curl_easy_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        return status
    }

    private static let globalInit: Int32 = Int32(curl_global_init(Int(CURL_GLOBAL_DEFAULT)).rawValue)
}

/// Where a GET's body goes: a file, never more than `limit` bytes, only for a 2xx answer's body
/// (an error's XML is dropped).
final class Sink {
    let descriptor: Int32
    let limit: Int
    var written = 0
    var failed = false

    init(descriptor: Int32, limit: Int) {
        self.descriptor = descriptor
        self.limit = limit
    }
}

private let onObjectBytes: curl_write_callback = { data, size, count, state in
    guard let data, let state else { return 0 }
    let sink = Unmanaged<Sink>.fromOpaque(state).takeUnretainedValue()
    let length = size * count
    guard sink.written + length <= sink.limit else {
        sink.failed = true
        return 0
    }
    var offset = 0
    while offset < length {
        let done = write(sink.descriptor, data + offset, length - offset)
        if done <= 0 {
            sink.failed = true
            return 0
        }
        offset += done
    }
    sink.written += length
    return length
}

private let dropBytes: curl_write_callback = { _, size, count, _ in size * count }
