import COpenSSL

/// HMAC (RFC 2104) from OpenSSL's libcrypto: SHA-1 for TOTP codes (RFC 6238's default, which every
/// authenticator app computes), SHA-256 for everything this tier chooses itself.
public enum HMAC {
    public enum Hash: Sendable {
        case sha1, sha256

        var length: Int {
            switch self {
            case .sha1: 20
            case .sha256: 32
            }
        }
    }

    /// The digests fetched once (an implicit fetch at every use is slow in OpenSSL 3).
    static let sha1 = Fetched(EVP_MD_fetch(nil, "SHA1", nil) ?? EVP_sha1()!)
    static let sha256 = Fetched(EVP_MD_fetch(nil, "SHA256", nil) ?? EVP_sha256()!)

    /// The MAC of `data` under `key`.
    public static func mac(_ hash: Hash, key: [UInt8], data: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: hash.length)
        var length: UInt32 = 0
        let digest = hash == .sha1 ? Self.sha1.pointer : Self.sha256.pointer
        let computed = key.withUnsafeBufferPointer { key in
            data.withUnsafeBufferPointer { input in
                output.withUnsafeMutableBufferPointer { out in
                    COpenSSL.HMAC(digest, key.baseAddress, Int32(key.count), input.baseAddress, input.count, out.baseAddress, &length) != nil
                }
            }
        }
        // HMAC does not fail on valid buffers; if it ever did, random bytes match nothing (zeros
        // would match each other).
        guard computed, Int(length) == hash.length else { return SecureRandom.bytes(hash.length) }
        return output
    }
}

/// Random bytes from OpenSSL's CSPRNG (seeded from the kernel): secrets, salts, token ids.
public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        let filled = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) == 1 }
        if !filled {
            // RAND_bytes fails only when it cannot be seeded; the system generator (getrandom) then.
            var generator = SystemRandomNumberGenerator()
            for index in bytes.indices { bytes[index] = generator.next() }
        }
        return bytes
    }
}

/// Comparisons whose time does not depend on where the inputs differ.
public enum ConstantTime {
    /// Whether `a` and `b` hold the same bytes. Lengths are compared first (a length is not a secret
    /// here: every value compared has a fixed, public length).
    public static func equal(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        if a.isEmpty { return true }
        return a.withUnsafeBytes { a in b.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, a.count) == 0 } }
    }
}
