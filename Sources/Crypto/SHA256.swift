import COpenSSL
import Encodings
import Foundation

/// SHA-256 from OpenSSL's libcrypto.
public enum SHA256 {
    /// The digest of `bytes` as 32 bytes.
    public static func digest(_ bytes: some Collection<UInt8>) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
        let input = Array(bytes)
        input.withUnsafeBufferPointer { buffer in
            output.withUnsafeMutableBufferPointer { out in
                var length: UInt32 = 0
                // EVP_Digest cannot fail for SHA-256 on valid buffers; a failure leaves zeros, which never matches.
                _ = EVP_Digest(buffer.baseAddress, buffer.count, out.baseAddress, &length, algorithm.pointer, nil)
            }
        }
        return output
    }

    /// SHA-256 fetched from the default provider once: given `EVP_sha256()`, OpenSSL 3 fetches it
    /// again at every digest (half the time of hashing a Message-ID's name).
    static let algorithm = Fetched(EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()!)

    /// The digest as lower-case hex, the form migration checksums are recorded in.
    public static func hexDigest(_ bytes: some Collection<UInt8>) -> String { Hex.encode(digest(bytes)) }

    public static func hexDigest(_ text: String) -> String { hexDigest(Array(text.utf8)) }

    /// A UUID derived from `name`: the first 16 bytes of its SHA-256 digest, stamped version 8
    /// (RFC 9562's custom UUIDs: version 5 would claim SHA-1) with the RFC variant, in lower case.
    /// The same name is always the same UUID; a different name collides only as SHA-256 does.
    public static func uuidString(naming name: some Collection<UInt8>) -> String {
        var bytes = digest(name)
        bytes.removeLast(bytes.count - 16)
        bytes[6] = bytes[6] & 0x0F | 0x80  // version 8
        bytes[8] = bytes[8] & 0x3F | 0x80  // variant 10: RFC 9562
        return Hex.uuidString(bytes)
    }
}

/// The OpenSSL library the process is linked with.
public enum OpenSSLLibrary {
    public static var version: String { String(cString: OpenSSL_version(OPENSSL_VERSION)) }
}
