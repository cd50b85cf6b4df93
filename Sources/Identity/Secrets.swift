import Crypto
import Encodings
import Foundation

/// The secrets the identity role hands to clients (refresh tokens, challenges, handoffs): 256
/// random bits as base64url (43 characters). Only their SHA-256 digest is stored: a random secret
/// of this strength needs no salt nor slow hash, and a copy of the tables is no way in.
public struct OpaqueSecret: Sendable, Hashable {
    public let text: String

    public init(text: String) { self.text = text }

    public static func generate() -> OpaqueSecret { OpaqueSecret(text: Base64URL.encode(SecureRandom.bytes(32))) }

    /// The digest stored and looked up; the same for the same text, so a lookup is one index probe.
    public var digest: Data { Data(SHA256.digest(Array(text.utf8))) }

    /// Whether `text` can be one of ours at all (43 base64url characters): anything else is
    /// refused before the database is asked.
    public static func isWellFormed(_ text: String) -> Bool {
        text.utf8.count == 43
            && text.utf8.allSatisfy { byte in
                (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte) || byte == UInt8(ascii: "-") || byte == UInt8(ascii: "_")
            }
    }
}

/// Recovery codes: each works once in place of a TOTP code. 80 random bits, written as four
/// groups of four base32 letters (`k7qm-2xpa-93vd-hh4t`); read forgiving letter case, spaces and
/// dashes. Stored as the SHA-256 digest of the normalized form.
public enum RecoveryCode {
    public static let count = 10

    public static func generate() -> String {
        let letters = Base32.encode(SecureRandom.bytes(10)).lowercased()
        var groups: [Substring] = []
        var rest = Substring(letters)
        while !rest.isEmpty {
            groups.append(rest.prefix(4))
            rest = rest.dropFirst(4)
        }
        return groups.joined(separator: "-")
    }

    /// The 16 letters of `code`, lower case, or nil when it cannot be a recovery code.
    public static func normalized(_ code: String) -> String? {
        let letters = code.lowercased().filter { $0 != "-" && $0 != " " }
        // Bytes, not characters: anything outside ASCII's letters and digits is simply not in the alphabet.
        guard letters.utf8.count == 16,
            letters.utf8.allSatisfy({ byte in Base32.alphabet.contains((97...122).contains(byte) ? byte - 32 : byte) })
        else { return nil }
        return letters
    }

    public static func digest(_ code: String) -> Data? { normalized(code).map { Data(SHA256.digest(Array($0.utf8))) } }
}
