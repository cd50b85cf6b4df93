import CCurl
import CJansson
import CLibPQ
import CMagic
import CMicroHTTPD
import CNGHTTP2
import COpenSSL
import CShims

/// What the C libraries the tier links against can do, checked at run time (`inbox version`,
/// and a test that refuses a libcurl without HTTP/2 or not built on OpenSSL).
public enum LinkedLibraries {
    public struct Curl: Sendable {
        public var version: String
        public var sslBackend: String
        public var supportsHTTP2: Bool
    }

    public static var curl: Curl {
        guard let info = curl_version_info(CURLVERSION_ELEVENTH) else {
            return Curl(version: "unknown", sslBackend: "none", supportsHTTP2: false)
        }
        let data = info.pointee
        let http2 = (data.features & Int32(CURL_VERSION_HTTP2)) != 0
        return Curl(
            version: String(cString: data.version),
            sslBackend: data.ssl_version.map { String(cString: $0) } ?? "none",
            supportsHTTP2: http2)
    }

    public static var microhttpdVersion: String {
        MHD_get_version().map { String(cString: $0) } ?? "unknown"
    }

    public static var libpqVersion: Int { Int(PQlibVersion()) }

    /// The commit this binary was built from (`git describe --always --dirty`), "unknown" when
    /// it was built outside `make` and the package's build.
    public static var buildCommit: String { String(cString: wristler_build_commit()) }

    /// libnghttp2's version: the push fan-out's HTTP/2 (docs/fanout.md, "Why libnghttp2").
    public static var nghttp2Version: String {
        nghttp2_version(0).map { String(cString: $0.pointee.version_str) } ?? "unknown"
    }

    /// libmagic's version (5.44 is 544): the type of an upload, read from its bytes.
    public static var magicVersion: Int { Int(magic_version()) }

    /// libjansson's version: the API's and the log's JSON reading (docs/api.md, "Reading JSON").
    public static var janssonVersion: String { jansson_version_str().map { String(cString: $0) } ?? "unknown" }

    public static var openSSLVersion: String { String(cString: OpenSSL_version(OPENSSL_VERSION)) }

    /// Whether the fixed-signature curl shim reaches libcurl: sets an option on a fresh handle.
    public static var curlShimWorks: Bool {
        guard let handle = curl_easy_init() else { return false }
        defer { curl_easy_cleanup(handle) }
        return wristler_curl_easy_setopt_long(handle, CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS)) == CURLE_OK
    }

    /// Whether the fixed-signature microhttpd shim reaches libmicrohttpd: starts a daemon on an
    /// ephemeral loopback port with an option array, then stops it.
    public static var microhttpdShimWorks: Bool {
        var options = [
            MHD_OptionItem(option: .CONNECTION_LIMIT, value: 4, ptr_value: nil),
            MHD_OptionItem(option: .END, value: 0, ptr_value: nil),
        ]
        let daemon = options.withUnsafeMutableBufferPointer { buffer in
            wristler_mhd_start_daemon(
                UInt32(MHD_USE_INTERNAL_POLLING_THREAD.rawValue), 0, nil, nil,
                { _, connection, _, _, _, _, _, _ in
                    MHD_queue_response(connection, 404, MHD_create_response_from_buffer(0, nil, .RESPMEM_PERSISTENT))
                }, nil, buffer.baseAddress)
        }
        guard let daemon else { return false }
        MHD_stop_daemon(daemon)
        return true
    }
}
