import CArgon2
import Foundation

/// Why a password could not be hashed or a stored hash could not be read.
public struct PasswordHashingError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The cost of one Argon2id hash: memory in KiB, passes over it, and lanes. A setting
/// (`INBOX_PASSWORD_HASH_MEMORY_KIB`, `INBOX_PASSWORD_HASH_ITERATIONS`): each sign-in by password
/// costs one hash, so this is what bounds sign-ins per second and per core (docs/identity.md).
public struct Argon2Cost: Sendable, Hashable, CustomStringConvertible {
    public var memoryKiB: UInt32
    public var iterations: UInt32
    public var parallelism: UInt32

    /// OWASP's password storage cheat sheet, first Argon2id line: 19 MiB, 2 passes, 1 lane.
    public static let owasp = Argon2Cost(memoryKiB: 19 * 1024, iterations: 2, parallelism: 1)
    /// RFC 9106 §4, the second recommended option (for memory-constrained systems): 64 MiB, 3 passes.
    /// (The RFC names 4 lanes; one lane here, since a request's hash runs on one thread.)
    public static let rfc9106 = Argon2Cost(memoryKiB: 64 * 1024, iterations: 3, parallelism: 1)

    public init(memoryKiB: UInt32, iterations: UInt32, parallelism: UInt32 = 1) {
        self.memoryKiB = memoryKiB
        self.iterations = iterations
        self.parallelism = parallelism
    }

    public var description: String { "m=\(memoryKiB),t=\(iterations),p=\(parallelism)" }
}

/// Argon2id (RFC 9106) from the reference library (Debian's libargon2), in the PHC string format
/// (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`): the salt and the cost travel with each hash,
/// so a stored hash stays verifiable after the cost setting changes.
///
/// Guarantees: a fresh 16-byte salt from the system's generator per hash; a 32-byte tag;
/// comparison of tags in constant time (the library's own `argon2id_verify`); passwords longer
/// than `maximumPasswordBytes` refused before any work (a hash is linear in its input: a
/// megabyte of password must not cost more than a sign-in).
public enum Argon2id {
    public static let maximumPasswordBytes = 1024
    static let saltBytes = 16
    static let tagBytes = 32

    /// The PHC string of `password` hashed at `cost`.
    public static func hash(_ password: String, cost: Argon2Cost) throws -> String {
        let bytes = Array(password.utf8)
        guard bytes.count <= maximumPasswordBytes else { throw PasswordHashingError("A password is at most \(maximumPasswordBytes) bytes.") }
        guard cost.memoryKiB >= 8 * cost.parallelism, cost.iterations >= 1, cost.parallelism >= 1 else {
            throw PasswordHashingError("Argon2 needs at least 1 pass, 1 lane and 8 KiB per lane, not \(cost).")
        }
        var salt = [UInt8](repeating: 0, count: saltBytes)
        var generator = SystemRandomNumberGenerator()
        for index in salt.indices { salt[index] = generator.next() }
        let length = argon2_encodedlen(cost.iterations, cost.memoryKiB, cost.parallelism, UInt32(saltBytes), UInt32(tagBytes), Argon2_id)
        var encoded = [CChar](repeating: 0, count: length + 1)
        let result = bytes.withUnsafeBytes { password in
            salt.withUnsafeBytes { salt in
                encoded.withUnsafeMutableBufferPointer { output in
                    argon2id_hash_encoded(
                        cost.iterations, cost.memoryKiB, cost.parallelism, password.baseAddress, password.count, salt.baseAddress, salt.count,
                        tagBytes, output.baseAddress, output.count)
                }
            }
        }
        guard result == ARGON2_OK.rawValue else { throw PasswordHashingError("Argon2id failed: \(String(cString: argon2_error_message(result))).") }
        return String(decoding: encoded.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether `password` is the one `encoded` was made from. False, never an error, for a
    /// password over the bound or a hash that is not an Argon2id PHC string.
    public static func verify(_ password: String, against encoded: String) -> Bool {
        let bytes = Array(password.utf8)
        guard bytes.count <= maximumPasswordBytes, encoded.hasPrefix("$argon2id$"), encoded.utf8.count < 512 else { return false }
        let result = bytes.withUnsafeBytes { password in argon2id_verify(encoded, password.baseAddress, password.count) }
        return result == ARGON2_OK.rawValue
    }

    /// The cost a stored hash was made with; nil when `encoded` is not an Argon2id PHC string.
    public static func cost(of encoded: String) -> Argon2Cost? {
        // $argon2id$v=19$m=19456,t=2,p=1$salt$hash
        let fields = encoded.split(separator: "$", omittingEmptySubsequences: false)
        guard fields.count == 6, fields[1] == "argon2id" else { return nil }
        var values: [Substring: UInt32] = [:]
        for pair in fields[3].split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let value = UInt32(parts[1]) else { return nil }
            values[parts[0]] = value
        }
        guard let m = values["m"], let t = values["t"], let p = values["p"] else { return nil }
        return Argon2Cost(memoryKiB: m, iterations: t, parallelism: p)
    }

    /// The version of the library's algorithm (0x13: Argon2 1.3, the RFC's).
    public static var algorithmVersion: Int { Int(ARGON2_VERSION_NUMBER.rawValue) }
}
