import COpenSSL

/// AES-256-GCM through OpenSSL: secrets kept at rest under a key-encryption key. A sealed value
/// is `1` (the format), a random 12-byte nonce, the ciphertext and the 16-byte tag; the associated
/// data (what the value is, and whose) is bound by the tag, so a sealed value moved to another row
/// or column does not open.
public enum AES256GCM {
    /// The cipher fetched once: OpenSSL 3 looks `EVP_aes_256_gcm()` up in its providers again at
    /// every use (an implicit fetch), which cost more than the sealing itself (docs/event-log.md).
    static let cipher = Fetched(EVP_CIPHER_fetch(nil, "AES-256-GCM", nil) ?? EVP_aes_256_gcm()!)

    public static let keyBytes = 32
    static let format: UInt8 = 1
    public static let nonceBytes = 12
    static let tagBytes = 16
    // EVP_CTRL_AEAD_SET_IVLEN, _GET_TAG, _SET_TAG (openssl/evp.h): macros of macros, which Swift
    // does not import.
    static let setNonceLength: Int32 = 0x9
    static let getTag: Int32 = 0x10
    static let setTag: Int32 = 0x11

    /// `plaintext` sealed under `key` (32 bytes) with `associatedData`.
    public static func seal(_ plaintext: [UInt8], key: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        try seal(plaintext, key: key, associatedData: associatedData, nonce: SecureRandom.bytes(nonceBytes))
    }

    /// `seal(_:key:associatedData:)` with a nonce drawn by the caller: 12 bytes of `SecureRandom`,
    /// never given twice (for a caller that draws many at once: OpenSSL's generator costs as much
    /// per call as the sealing).
    public static func seal(_ plaintext: [UInt8], key: [UInt8], associatedData: [UInt8], nonce: [UInt8]) throws -> [UInt8] {
        guard key.count == keyBytes else { throw CryptoError("An AES-256-GCM key is 32 bytes, not \(key.count).") }
        guard nonce.count == nonceBytes else { throw CryptoError("An AES-256-GCM nonce is 12 bytes here, not \(nonce.count).") }
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError("OpenSSL could not make a cipher context.") }
        defer { EVP_CIPHER_CTX_free(context) }
        var ciphertext = [UInt8](repeating: 0, count: plaintext.count + 16)
        var tag = [UInt8](repeating: 0, count: tagBytes)
        var length: Int32 = 0
        var total = 0
        guard EVP_EncryptInit_ex(context, cipher.pointer, nil, nil, nil) == 1,
            EVP_CIPHER_CTX_ctrl(context, setNonceLength, Int32(nonceBytes), nil) == 1,
            EVP_EncryptInit_ex(context, nil, nil, key, nonce) == 1,
            associatedData.isEmpty || EVP_EncryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1,
            ciphertext.withUnsafeMutableBufferPointer({ out in
                guard EVP_EncryptUpdate(context, out.baseAddress, &length, plaintext, Int32(plaintext.count)) == 1 else { return false }
                total = Int(length)
                guard EVP_EncryptFinal_ex(context, out.baseAddress! + total, &length) == 1 else { return false }
                total += Int(length)
                return true
            }),
            EVP_CIPHER_CTX_ctrl(context, getTag, Int32(tagBytes), &tag) == 1
        else { throw CryptoError("OpenSSL could not seal the value (AES-256-GCM).") }
        return [format] + nonce + ciphertext[..<total] + tag
    }

    /// The plaintext of `sealed`, or an error when the key, the associated data or a byte of it is
    /// not what sealed it.
    public static func open(_ sealed: [UInt8], key: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        guard key.count == keyBytes else { throw CryptoError("An AES-256-GCM key is 32 bytes, not \(key.count).") }
        guard sealed.count >= 1 + nonceBytes + tagBytes, sealed[0] == format else { throw CryptoError("The sealed value is not one this release wrote.") }
        let nonce = Array(sealed[1..<(1 + nonceBytes)])
        let ciphertext = Array(sealed[(1 + nonceBytes)..<(sealed.count - tagBytes)])
        var tag = Array(sealed[(sealed.count - tagBytes)...])
        guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError("OpenSSL could not make a cipher context.") }
        defer { EVP_CIPHER_CTX_free(context) }
        var plaintext = [UInt8](repeating: 0, count: ciphertext.count + 16)
        var length: Int32 = 0
        var total = 0
        guard EVP_DecryptInit_ex(context, cipher.pointer, nil, nil, nil) == 1,
            EVP_CIPHER_CTX_ctrl(context, setNonceLength, Int32(nonceBytes), nil) == 1,
            EVP_DecryptInit_ex(context, nil, nil, key, nonce) == 1,
            associatedData.isEmpty || EVP_DecryptUpdate(context, nil, &length, associatedData, Int32(associatedData.count)) == 1,
            plaintext.withUnsafeMutableBufferPointer({ out in
                guard EVP_DecryptUpdate(context, out.baseAddress, &length, ciphertext, Int32(ciphertext.count)) == 1 else { return false }
                total = Int(length)
                return true
            }),
            EVP_CIPHER_CTX_ctrl(context, setTag, Int32(tagBytes), &tag) == 1,
            plaintext.withUnsafeMutableBufferPointer({ out in
                guard EVP_DecryptFinal_ex(context, out.baseAddress! + total, &length) == 1 else { return false }
                total += Int(length)
                return true
            })
        else { throw CryptoError("The sealed value does not open with this key (a wrong key-encryption key, or a value changed or moved).") }
        return Array(plaintext[..<total])
    }
}

/// An OpenSSL object fetched once and never freed, shared by every thread (fetched algorithms are
/// immutable and thread-safe in OpenSSL 3).
struct Fetched: @unchecked Sendable {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}
