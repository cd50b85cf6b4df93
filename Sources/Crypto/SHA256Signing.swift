import COpenSSL

/// Signing and verifying over SHA-256 with any OpenSSL key (EVP): the part ES256 and RS256 share.
/// What differs is the key and the signature's encoding, which each keeps.
enum SHA256Signing {
    /// The signature of `data` by `key`, as OpenSSL writes it (DER for ECDSA, raw for RSA).
    static func sign(_ data: [UInt8], with key: OpaquePointer) throws -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw CryptoError("Out of memory.") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, key) == 1 else { throw CryptoError("Signing failed.") }
        var length = 0
        guard data.withUnsafeBufferPointer({ EVP_DigestSign(context, nil, &length, $0.baseAddress, $0.count) }) == 1 else {
            throw CryptoError("Signing failed.")
        }
        var signature = [UInt8](repeating: 0, count: length)
        let signed = data.withUnsafeBufferPointer { message in
            signature.withUnsafeMutableBufferPointer { EVP_DigestSign(context, $0.baseAddress, &length, message.baseAddress, message.count) }
        }
        guard signed == 1 else { throw CryptoError("Signing failed.") }
        return Array(signature.prefix(length))
    }

    /// Whether `signature` (in OpenSSL's encoding) signs `data` with `key`.
    static func verify(_ signature: [UInt8], of data: [UInt8], with key: OpaquePointer) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, EVP_sha256(), nil, key) == 1 else { return false }
        let result = data.withUnsafeBufferPointer { message in
            signature.withUnsafeBufferPointer { EVP_DigestVerify(context, $0.baseAddress, $0.count, message.baseAddress, message.count) }
        }
        return result == 1
    }
}
