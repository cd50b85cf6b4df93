import COpenSSL
import Foundation

/// Why a key or a signature could not be used.
public struct CryptoError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// An ECDSA P-256 public key, for verifying ES256 signatures (JWTs of the identity tier).
public final class ES256PublicKey: @unchecked Sendable {
    // EVP_PKEY is reference-counted and safe to use for verification from several threads.
    fileprivate let key: OpaquePointer

    fileprivate init(key: OpaquePointer) { self.key = key }

    deinit { EVP_PKEY_free(key) }

    /// From a PEM `-----BEGIN PUBLIC KEY-----` (SubjectPublicKeyInfo) of a P-256 key.
    public convenience init(pem: String) throws {
        guard let key = ES256Signature.readPEM(pem, { PEM_read_bio_PUBKEY($0, nil, nil, nil) }) else {
            throw CryptoError("The PEM text is not a public key.")
        }
        try Self.requireP256(key)
        self.init(key: key)
    }

    /// From a JWK's `x` and `y` (32 bytes each, the P-256 point's coordinates).
    public convenience init(x: [UInt8], y: [UInt8]) throws {
        guard x.count == 32, y.count == 32 else { throw CryptoError("A P-256 key's x and y are 32 bytes each.") }
        // SubjectPublicKeyInfo for id-ecPublicKey on prime256v1, then the uncompressed point.
        let prefix: [UInt8] = [
            0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE, 0x3D,
            0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04,
        ]
        let der = prefix + x + y
        let key: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var pointer: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_PUBKEY(nil, &pointer, buffer.count)
        }
        guard let key else { throw CryptoError("x and y are not a point of P-256.") }
        self.init(key: key)
    }

    static func requireP256(_ key: OpaquePointer) throws {
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_EC, EVP_PKEY_get_bits(key) == 256 else {
            EVP_PKEY_free(key)
            throw CryptoError("The key is not an ECDSA P-256 key (ES256).")
        }
    }

    /// Whether `signature` (64 bytes: r and s, as JWS has it) signs `data` with SHA-256.
    public func verify(signature: [UInt8], data: [UInt8]) -> Bool {
        guard signature.count == 64, let der = ES256Signature.der(fromRaw: signature) else { return false }
        return SHA256Signing.verify(der, of: data, with: key)
    }

    /// The key as PEM (SubjectPublicKeyInfo).
    public var pem: String { ES256Signature.writePEM { PEM_write_bio_PUBKEY($0, key) } }

    /// The point's `x` and `y` (32 bytes each), as a JWK carries them: what a JWKS publishes.
    public var coordinates: (x: [UInt8], y: [UInt8]) {
        get throws {
            let length = i2d_PUBKEY(key, nil)
            guard length == 91 else { throw CryptoError("The key is not an uncompressed P-256 point.") }
            var der = [UInt8](repeating: 0, count: Int(length))
            let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
                var pointer: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
                return i2d_PUBKEY(key, &pointer)
            }
            // SubjectPublicKeyInfo of prime256v1: 26 bytes of header, 0x04, then x and y.
            guard written == length, der[26] == 0x04 else { throw CryptoError("The key is not an uncompressed P-256 point.") }
            return (Array(der[27..<59]), Array(der[59..<91]))
        }
    }
}

/// An ECDSA P-256 private key, for signing ES256 tokens (`inbox token`, tests).
public final class ES256PrivateKey: @unchecked Sendable {
    private let key: OpaquePointer

    private init(key: OpaquePointer) { self.key = key }

    deinit { EVP_PKEY_free(key) }

    /// A new random key.
    public static func generate() throws -> ES256PrivateKey {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { throw CryptoError("OpenSSL has no EC keys.") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
            EVP_PKEY_generate(context, &key) == 1, let key
        else { throw CryptoError("Generating a P-256 key failed.") }
        return ES256PrivateKey(key: key)
    }

    /// From a PEM private key (PKCS#8 or SEC1) of a P-256 key.
    public convenience init(pem: String) throws {
        guard let key = ES256Signature.readPEM(pem, { PEM_read_bio_PrivateKey($0, nil, nil, nil) }) else {
            throw CryptoError("The PEM text is not a private key.")
        }
        try ES256PublicKey.requireP256(key)
        self.init(key: key)
    }

    /// The key as PKCS#8 PEM, unencrypted: for a development key file only.
    public var pem: String { ES256Signature.writePEM { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) } }

    public var publicKey: ES256PublicKey {
        get throws { try ES256PublicKey(pem: publicPEM) }
    }

    private var publicPEM: String { ES256Signature.writePEM { PEM_write_bio_PUBKEY($0, key) } }

    /// The ES256 signature of `data`: 64 bytes, r and s, as JWS has it.
    public func sign(_ data: [UInt8]) throws -> [UInt8] {
        guard let raw = ES256Signature.raw(fromDER: try SHA256Signing.sign(data, with: key)) else { throw CryptoError("Signing failed.") }
        return raw
    }
}

/// The two forms of an ECDSA signature: DER (what OpenSSL makes and checks) and the 64 raw bytes
/// of r and s (what JWS carries).
enum ES256Signature {
    static func der(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard let signature = ECDSA_SIG_new() else { return nil }
        defer { ECDSA_SIG_free(signature) }
        let r = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress, 32, nil) }
        let s = raw.withUnsafeBufferPointer { BN_bin2bn($0.baseAddress! + 32, 32, nil) }
        guard let r, let s, ECDSA_SIG_set0(signature, r, s) == 1 else { return nil }
        let length = i2d_ECDSA_SIG(signature, nil)
        guard length > 0 else { return nil }
        var der = [UInt8](repeating: 0, count: Int(length))
        let written = der.withUnsafeMutableBufferPointer { buffer -> Int32 in
            var pointer: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
            return i2d_ECDSA_SIG(signature, &pointer)
        }
        return written == length ? der : nil
    }

    static func raw(fromDER der: [UInt8]) -> [UInt8]? {
        let signature: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var pointer: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &pointer, buffer.count)
        }
        guard let signature else { return nil }
        defer { ECDSA_SIG_free(signature) }
        var raw = [UInt8](repeating: 0, count: 64)
        let ok = raw.withUnsafeMutableBufferPointer { buffer in
            BN_bn2binpad(ECDSA_SIG_get0_r(signature), buffer.baseAddress, 32) == 32
                && BN_bn2binpad(ECDSA_SIG_get0_s(signature), buffer.baseAddress! + 32, 32) == 32
        }
        return ok ? raw : nil
    }

    /// What `writer` writes into a memory BIO, as text ("" when it fails).
    static func writePEM(_ writer: (OpaquePointer) -> Int32) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        guard writer(bio) == 1 else { return "" }
        return read(bio)
    }

    /// A key read by `reader` from PEM text in a memory BIO.
    static func readPEM(_ pem: String, _ reader: (OpaquePointer) -> OpaquePointer?) -> OpaquePointer? {
        pem.utf8CString.withUnsafeBufferPointer { buffer in
            guard let bio = BIO_new_mem_buf(buffer.baseAddress, Int32(buffer.count - 1)) else { return nil }
            defer { BIO_free(bio) }
            return reader(bio)
        }
    }

    static func read(_ bio: OpaquePointer) -> String {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32($0.count)) }
            if count <= 0 { break }
            bytes.append(contentsOf: buffer[0..<Int(count)])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
