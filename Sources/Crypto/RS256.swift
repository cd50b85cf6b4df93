import COpenSSL
import Foundation

/// An RSA private key, for signing RS256 tokens (RSASSA-PKCS1-v1_5 with SHA-256, RFC 7518 3.3):
/// the OAuth2 JWT grant a Google service account makes to get an FCM access token.
public final class RS256PrivateKey: @unchecked Sendable {
    // EVP_PKEY is reference-counted; each signature makes its own EVP_MD_CTX, so one key signs
    // from several threads.
    private let key: OpaquePointer

    private init(key: OpaquePointer) { self.key = key }

    deinit { EVP_PKEY_free(key) }

    /// A new random key of `bits` (2048 or more: RFC 7518 refuses smaller RS256 keys). For tests.
    public static func generate(bits: Int = 2048) throws -> RS256PrivateKey {
        guard bits >= 2048 else { throw CryptoError("RS256 keys are 2048 bits or more.") }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "RSA", nil) else { throw CryptoError("OpenSSL has no RSA keys.") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_rsa_keygen_bits(context, Int32(bits)) == 1,
            EVP_PKEY_generate(context, &key) == 1, let key
        else { throw CryptoError("Generating an RSA key failed.") }
        return RS256PrivateKey(key: key)
    }

    /// From a PEM private key: PKCS#8 (`BEGIN PRIVATE KEY`, what a service account's
    /// `private_key` holds) or PKCS#1 (`BEGIN RSA PRIVATE KEY`).
    public convenience init(pem: String) throws {
        guard let key = ES256Signature.readPEM(pem, { PEM_read_bio_PrivateKey($0, nil, nil, nil) }) else {
            throw CryptoError("The PEM text is not a private key.")
        }
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA, EVP_PKEY_get_bits(key) >= 2048 else {
            EVP_PKEY_free(key)
            throw CryptoError("The key is not an RSA key of 2048 bits or more (RS256).")
        }
        self.init(key: key)
    }

    /// The key as PKCS#8 PEM, unencrypted: for tests only.
    public var pem: String { ES256Signature.writePEM { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) } }

    /// The public half as PEM (SubjectPublicKeyInfo), for whoever verifies (tests, mock servers).
    public var publicKeyPEM: String { ES256Signature.writePEM { PEM_write_bio_PUBKEY($0, key) } }

    public var publicKey: RS256PublicKey {
        get throws { try RS256PublicKey(pem: publicKeyPEM) }
    }

    /// The RS256 signature of `data`: PKCS#1 v1.5 over its SHA-256, as many bytes as the modulus.
    public func sign(_ data: [UInt8]) throws -> [UInt8] {
        // PKCS#1 v1.5 is OpenSSL's default padding for an RSA EVP_PKEY, which is what RS256 is.
        try SHA256Signing.sign(data, with: key)
    }
}

/// An RSA public key, for verifying RS256 signatures (tests, and mock token endpoints).
public final class RS256PublicKey: @unchecked Sendable {
    private let key: OpaquePointer

    private init(key: OpaquePointer) { self.key = key }

    deinit { EVP_PKEY_free(key) }

    /// From a PEM `-----BEGIN PUBLIC KEY-----` (SubjectPublicKeyInfo) of an RSA key.
    public convenience init(pem: String) throws {
        guard let key = ES256Signature.readPEM(pem, { PEM_read_bio_PUBKEY($0, nil, nil, nil) }) else {
            throw CryptoError("The PEM text is not a public key.")
        }
        guard EVP_PKEY_get_base_id(key) == EVP_PKEY_RSA else {
            EVP_PKEY_free(key)
            throw CryptoError("The key is not an RSA key (RS256).")
        }
        self.init(key: key)
    }

    /// Whether `signature` is the RS256 signature of `data` by this key's private half.
    public func verify(signature: [UInt8], data: [UInt8]) -> Bool {
        SHA256Signing.verify(signature, of: data, with: key)
    }
}

extension RS256PublicKey {
    /// From a JWK's `n` and `e` (RFC 7518 §6.3.1: the modulus and the exponent, big-endian bytes), as
    /// Apple and Google publish their ID-token keys. A modulus under 2048 bits is refused (RFC 7518 §3.3),
    /// and so is one over 8192 bits (no provider uses one; a bound on what a fetched document costs).
    public convenience init(modulus: [UInt8], exponent: [UInt8]) throws {
        let modulus = Array(modulus.drop { $0 == 0 })
        guard (256...1024).contains(modulus.count), (1...8).contains(exponent.count) else {
            throw CryptoError("An RS256 key's modulus is 2048 to 8192 bits and its exponent at most 8 bytes.")
        }
        guard let n = BN_bin2bn(modulus, Int32(modulus.count), nil) else { throw CryptoError("Out of memory.") }
        defer { BN_free(n) }
        guard let e = BN_bin2bn(exponent, Int32(exponent.count), nil) else { throw CryptoError("Out of memory.") }
        defer { BN_free(e) }
        guard let builder = OSSL_PARAM_BLD_new() else { throw CryptoError("Out of memory.") }
        defer { OSSL_PARAM_BLD_free(builder) }
        // The parameters point at the names they were pushed with (OpenSSL 3.0 copies neither), so
        // the names are C strings of their own that live until the key is made.
        guard let nName = strdup(OSSL_PKEY_PARAM_RSA_N), let eName = strdup(OSSL_PKEY_PARAM_RSA_E) else { throw CryptoError("Out of memory.") }
        defer {
            free(nName)
            free(eName)
        }
        guard OSSL_PARAM_BLD_push_BN(builder, nName, n) == 1, OSSL_PARAM_BLD_push_BN(builder, eName, e) == 1,
            let parameters = OSSL_PARAM_BLD_to_param(builder)
        else { throw CryptoError("The RSA key's parameters cannot be built.") }
        defer { OSSL_PARAM_free(parameters) }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "RSA", nil) else { throw CryptoError("OpenSSL has no RSA keys.") }
        defer { EVP_PKEY_CTX_free(context) }
        var key: OpaquePointer?
        // EVP_PKEY_PUBLIC_KEY: the public key and the key's parameters.
        let selection = Int32(OSSL_KEYMGMT_SELECT_PUBLIC_KEY | OSSL_KEYMGMT_SELECT_ALL_PARAMETERS)
        guard EVP_PKEY_fromdata_init(context) == 1, EVP_PKEY_fromdata(context, &key, selection, parameters) == 1, let key else {
            throw CryptoError("n and e are not an RSA public key.")
        }
        self.init(key: key)
    }

    /// The key's `n` and `e` as a JWK carries them (big-endian, no leading zeros): what a test's
    /// provider publishes in its JWKS.
    public var components: (modulus: [UInt8], exponent: [UInt8]) {
        get throws {
            func parameter(_ name: String) throws -> [UInt8] {
                var number: OpaquePointer?
                guard EVP_PKEY_get_bn_param(key, name, &number) == 1, let number else { throw CryptoError("The key has no \(name).") }
                defer { BN_free(number) }
                var bytes = [UInt8](repeating: 0, count: Int((BN_num_bits(number) + 7) / 8))
                _ = bytes.withUnsafeMutableBufferPointer { BN_bn2bin(number, $0.baseAddress) }
                return bytes
            }
            return (try parameter(OSSL_PKEY_PARAM_RSA_N), try parameter(OSSL_PKEY_PARAM_RSA_E))
        }
    }

    /// The key as PEM (SubjectPublicKeyInfo).
    public var pem: String { ES256Signature.writePEM { PEM_write_bio_PUBKEY($0, key) } }
}
