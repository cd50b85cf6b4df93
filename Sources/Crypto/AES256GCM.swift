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
        var sealed: [UInt8] = []
        sealed.reserveCapacity(1 + nonceBytes + plaintext.count + tagBytes)
        try plaintext.withUnsafeBytes { plaintext in
            try key.withUnsafeBytes { key in
                try associatedData.withUnsafeBytes { associatedData in
                    try nonce.withUnsafeBytes { try Session().seal(plaintext, key: key, associatedData: associatedData, nonce: $0, to: &sealed) }
                }
            }
        }
        return sealed
    }

    /// The plaintext of `sealed`, or an error when the key, the associated data or a byte of it is
    /// not what sealed it.
    public static func open(_ sealed: [UInt8], key: [UInt8], associatedData: [UInt8]) throws -> [UInt8] {
        var plaintext: [UInt8] = []
        try sealed.withUnsafeBytes { sealed in
            try key.withUnsafeBytes { key in
                try associatedData.withUnsafeBytes { try Session().open(sealed, key: key, associatedData: $0, to: &plaintext) }
            }
        }
        return plaintext
    }
}

/// An OpenSSL object fetched once and never freed, shared by every thread (fetched algorithms are
/// immutable and thread-safe in OpenSSL 3).
struct Fetched: @unchecked Sendable {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

extension AES256GCM {
    /// One OpenSSL cipher context kept for many seals and opens on one thread: making a context and
    /// setting its cipher cost more than sealing a short text (`inbox-bench sealing`, `seal-only`).
    /// Each call sets its own key and nonce, so nothing of one value carries into the next.
    public final class Session {
        private let context: OpaquePointer

        public init() throws {
            guard let context = EVP_CIPHER_CTX_new() else { throw CryptoError("OpenSSL could not make a cipher context.") }
            // The nonce length is GCM's default, 12 bytes (`nonceBytes`).
            guard EVP_CipherInit_ex(context, AES256GCM.cipher.pointer, nil, nil, nil, 1) == 1 else {
                EVP_CIPHER_CTX_free(context)
                throw CryptoError("OpenSSL could not set up AES-256-GCM.")
            }
            self.context = context
        }

        deinit { EVP_CIPHER_CTX_free(context) }

        /// Appends the sealed form of `plaintext` (as `AES256GCM.seal` writes it) to `output`.
        public func seal(
            _ plaintext: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, associatedData: UnsafeRawBufferPointer,
            nonce: UnsafeRawBufferPointer, to output: inout [UInt8]
        ) throws {
            guard key.count == keyBytes, nonce.count == nonceBytes else { throw CryptoError("An AES-256-GCM key is 32 bytes and its nonce 12 here.") }
            let start = output.count
            output.append(format)
            output.append(contentsOf: nonce)
            output.append(contentsOf: repeatElement(0, count: plaintext.count + tagBytes))
            let context = context
            let sealed = output.withUnsafeMutableBufferPointer { out -> Bool in
                let body = out.baseAddress! + start + 1 + nonceBytes
                var length: Int32 = 0
                guard EVP_CipherInit_ex(context, nil, nil, key.baseAddress, nonce.baseAddress, 1) == 1,
                    associatedData.isEmpty
                        || EVP_CipherUpdate(context, nil, &length, associatedData.baseAddress, Int32(associatedData.count)) == 1,
                    plaintext.isEmpty || EVP_CipherUpdate(context, body, &length, plaintext.baseAddress, Int32(plaintext.count)) == 1,
                    plaintext.isEmpty || Int(length) == plaintext.count,
                    EVP_CipherFinal_ex(context, body + plaintext.count, &length) == 1, length == 0
                else { return false }
                return EVP_CIPHER_CTX_ctrl(context, getTag, Int32(tagBytes), body + plaintext.count) == 1
            }
            guard sealed else {
                output.removeSubrange(start...)
                throw CryptoError("OpenSSL could not seal the value (AES-256-GCM).")
            }
        }

        /// Appends the plaintext of `sealed` to `output`; an error when the key, the associated data
        /// or a byte of it is not what sealed it (nothing is appended then).
        public func open(_ sealed: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, associatedData: UnsafeRawBufferPointer, to output: inout [UInt8]) throws {
            guard key.count == keyBytes else { throw CryptoError("An AES-256-GCM key is 32 bytes, not \(key.count).") }
            guard sealed.count >= 1 + nonceBytes + tagBytes, sealed[0] == format else { throw CryptoError("The sealed value is not one this release wrote.") }
            let textCount = sealed.count - 1 - nonceBytes - tagBytes
            let start = output.count
            output.append(contentsOf: repeatElement(0, count: textCount))
            let context = context
            let opened = output.withUnsafeMutableBufferPointer { out -> Bool in
                let text = out.baseAddress! + start
                let nonce = sealed.baseAddress! + 1
                let ciphertext = nonce + nonceBytes
                var length: Int32 = 0
                guard EVP_CipherInit_ex(context, nil, nil, key.baseAddress, nonce, 0) == 1,
                    associatedData.isEmpty
                        || EVP_CipherUpdate(context, nil, &length, associatedData.baseAddress, Int32(associatedData.count)) == 1,
                    textCount == 0 || EVP_CipherUpdate(context, text, &length, ciphertext, Int32(textCount)) == 1,
                    textCount == 0 || Int(length) == textCount,
                    EVP_CIPHER_CTX_ctrl(context, setTag, Int32(tagBytes), UnsafeMutableRawPointer(mutating: ciphertext + textCount)) == 1
                else { return false }
                return EVP_CipherFinal_ex(context, text + textCount, &length) == 1 && length == 0
            }
            guard opened else {
                output.removeSubrange(start...)
                throw CryptoError("The sealed value does not open with this key (a wrong key-encryption key, or a value changed or moved).")
            }
        }
    }
}
