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

    /// A context per hash with its digest set and no key, made once and copied for each session:
    /// OpenSSL 3's one-shot `HMAC()` fetches the MAC and its digest by name at every call, which
    /// cost more than the MAC of a short text.
    static let sha1 = Template("SHA1")
    static let sha256 = Template("SHA256")

    /// The MAC of `data` under `key`.
    public static func mac(_ hash: Hash, key: [UInt8], data: [UInt8]) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: hash.length)
        let session = Session(hash)
        let computed = key.withUnsafeBytes { session.begin(key: $0) } && data.withUnsafeBytes { session.update($0) }
            && output.withUnsafeMutableBytes { session.finish(into: $0) }
        // HMAC does not fail on valid buffers; if it ever did, random bytes match nothing (zeros
        // would match each other).
        guard computed else { return SecureRandom.bytes(hash.length) }
        return output
    }

    /// One HMAC context kept for many MACs on one thread (`begin`, `update`..., `finish`): copying
    /// the template's context for each MAC cost as much as the MAC of a short text.
    public final class Session {
        private let context: OpaquePointer?
        public let hash: Hash

        public init(_ hash: Hash) {
            self.hash = hash
            context = EVP_MAC_CTX_dup(hash == .sha1 ? HMAC.sha1.context : HMAC.sha256.context)
        }

        deinit { EVP_MAC_CTX_free(context) }

        /// Starts a MAC under `key`. An empty key is the same as one byte of zero (both are padded
        /// with zeros, RFC 2104), which OpenSSL takes where it refuses an empty one.
        public func begin(key: UnsafeRawBufferPointer) -> Bool {
            guard let context else { return false }
            if key.isEmpty {
                var zero: UInt8 = 0
                return EVP_MAC_init(context, &zero, 1, nil) == 1
            }
            return EVP_MAC_init(context, key.baseAddress, key.count, nil) == 1
        }

        public func update(_ bytes: UnsafeRawBufferPointer) -> Bool {
            guard let context else { return false }
            return bytes.isEmpty || EVP_MAC_update(context, bytes.baseAddress, bytes.count) == 1
        }

        /// Writes the MAC (`hash.length` bytes) to `output`.
        public func finish(into output: UnsafeMutableRawBufferPointer) -> Bool {
            guard let context, output.count >= hash.length else { return false }
            var length = 0
            return EVP_MAC_final(context, output.baseAddress, &length, output.count) == 1 && length == hash.length
        }
    }

    /// An HMAC context with its digest set, never given a key itself (only its copies are).
    final class Template: @unchecked Sendable {
        let context: OpaquePointer

        init(_ digest: String) {
            let mac = EVP_MAC_fetch(nil, "HMAC", nil)!
            defer { EVP_MAC_free(mac) }
            context = EVP_MAC_CTX_new(mac)!
            let set = "digest".withCString { name in
                digest.withCString { value in
                    var parameters = [
                        OSSL_PARAM_construct_utf8_string(name, UnsafeMutablePointer(mutating: value), 0), OSSL_PARAM_construct_end(),
                    ]
                    return EVP_MAC_CTX_set_params(context, &parameters) == 1
                }
            }
            precondition(set, "OpenSSL has no HMAC-\(digest)")
        }
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
