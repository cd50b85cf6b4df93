import COpenSSL
import Crypto
import Encodings
import Foundation

/// Signs and checks the token of a one-click unsubscribe link (RFC 8058): who (a person id),
/// from what (a category) and when it was issued, so that the API can turn that category's
/// `email` off for that person without a login.
///
/// A token is `v<version>.<payload>.<mac>`: `payload` is base64url (no padding) of
/// `<personId>|<category>|<issued-at, Unix seconds>`, `mac` is base64url of HMAC-SHA256 with the
/// key of that version over the ASCII text `wristler-unsubscribe.v<version>.<payload>`. The
/// version names the key, so keys can rotate: sign with a new one, keep the old ones to verify
/// links already mailed. Checking is bounded and constant-time: a token over 512 bytes is refused
/// before anything else, and MACs are compared with `CRYPTO_memcmp`.
public struct UnsubscribeLink: Sendable {
    /// A signing key and the version it is known by in tokens.
    public struct Key: Sendable {
        public let version: Int
        let secret: [UInt8]

        /// `version` from 1 to 9999; `secret` at least 32 bytes (HMAC-SHA256's own strength).
        public init(version: Int, secret: [UInt8]) throws {
            guard (1...9999).contains(version) else {
                throw MailError(.invalidSetting, "An unsubscribe key's version must be a number from 1 to 9999, not \(version).")
            }
            guard secret.count >= 32 else {
                throw MailError(.invalidSetting, "The unsubscribe key of version \(version) has \(secret.count) bytes; it needs at least 32.")
            }
            self.version = version
            self.secret = secret
        }
    }

    /// What a valid token says.
    public struct Unsubscribe: Sendable, Equatable {
        public let personId: String
        public let category: String
        public let issuedAt: Date
    }

    /// Why a token was not accepted.
    public enum Rejection: Error, Sendable, Equatable, CustomStringConvertible {
        /// Longer than `maximumTokenLength` bytes.
        case tooLong
        /// Not `v<n>.<payload>.<mac>` in base64url, or a payload that is not `person|category|seconds`.
        case malformed
        /// Signed with a key version this process does not have (retired, or never issued).
        case unknownVersion(Int)
        /// The MAC does not match: altered, or not made with our key.
        case badSignature

        public var description: String {
            switch self {
            case .tooLong: "The unsubscribe token is longer than \(UnsubscribeLink.maximumTokenLength) bytes."
            case .malformed: "The unsubscribe token is not in the form v<version>.<payload>.<signature>."
            case .unknownVersion(let version): "The unsubscribe token was signed with key version \(version), which is not known here."
            case .badSignature: "The unsubscribe token's signature does not match: it was altered or not issued here."
            }
        }
    }

    public static let maximumTokenLength = 512
    /// Person ids and categories are at most this long, and of `A-Z a-z 0-9 - _ . :` only.
    public static let maximumFieldLength = 128

    private let keys: [Int: Key]
    /// The key new tokens are signed with.
    public let current: Int

    public init(keys: [Key], current: Int) throws {
        var table: [Int: Key] = [:]
        for key in keys {
            guard table[key.version] == nil else { throw MailError(.invalidSetting, "Unsubscribe key version \(key.version) is given twice.") }
            table[key.version] = key
        }
        guard table[current] != nil else { throw MailError(.invalidSetting, "There is no unsubscribe key of version \(current) to sign with.") }
        self.keys = table
        self.current = current
    }

    /// Reads `INBOX_UNSUBSCRIBE_KEYS`' form: `<version>:<base64url secret>,...`; the first signs,
    /// all verify.
    public init(setting: String, name: String = "INBOX_UNSUBSCRIBE_KEYS") throws {
        var keys: [Key] = []
        for entry in setting.split(separator: ",") {
            let parts = entry.trimmingCharacters(in: .whitespaces).split(separator: ":", maxSplits: 1)
            guard parts.count == 2, let version = Int(parts[0]), let secret = Base64URL.decode(parts[1]) else {
                throw MailError(.invalidSetting, "\(name) must be a list of <version>:<base64url secret> separated by commas, such as 2:..., 1:...; an entry is not.")
            }
            guard !keys.contains(where: { $0.version == version }) else {
                throw MailError(.invalidSetting, "\(name) gives key version \(version) twice.")
            }
            do {
                keys.append(try Key(version: version, secret: secret))
            } catch let error as MailError {
                throw MailError(.invalidSetting, "\(name): \(error.description)")
            }
        }
        guard let first = keys.first else { throw MailError(.invalidSetting, "\(name) holds no key.") }
        try self.init(keys: keys, current: first.version)
    }

    /// The token for `personId` leaving `category`, signed with the current key.
    public func token(personId: String, category: String, issuedAt: Date = Date()) throws -> String {
        for (what, value) in [("person id", personId), ("category", category)] {
            guard Self.isValidField(value) else {
                throw MailError(
                    .invalidHeaderValue, "An unsubscribe \(what) must be 1 to \(Self.maximumFieldLength) characters of A-Z, a-z, 0-9, -, _, . and :.")
            }
        }
        let seconds = Int64(issuedAt.timeIntervalSince1970.rounded(.down))
        let payload = Base64URL.encode(Array("\(personId)|\(category)|\(seconds)".utf8))
        let signed = "v\(current).\(payload)"
        return "\(signed).\(Base64URL.encode(mac(signed, key: keys[current]!)))"
    }

    /// `base` (the API's unsubscribe endpoint) with the token as its `token` query parameter.
    public func url(base: String, personId: String, category: String, issuedAt: Date = Date()) throws -> String {
        let token = try token(personId: personId, category: category, issuedAt: issuedAt)
        return "\(base)\(base.utf8.contains(UInt8(ascii: "?")) ? "&" : "?")token=\(token)"
    }

    /// Who and what `token` unsubscribes, or why it is refused. The age is left to the caller:
    /// links in old mails should keep working, so none is enforced here.
    public func verify(_ token: String) -> Result<Unsubscribe, Rejection> {
        let bytes = Array(token.utf8)
        guard bytes.count <= Self.maximumTokenLength else { return .failure(.tooLong) }
        let parts = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count >= 2, parts[0].first == UInt8(ascii: "v"), parts[0].count <= 5,
            parts[0].dropFirst().allSatisfy({ (48...57).contains($0) }), parts[0].dropFirst().first != UInt8(ascii: "0"),
            let version = Int(String(decoding: parts[0].dropFirst(), as: UTF8.self)),
            let payload = Base64URL.decode(String(decoding: parts[1], as: UTF8.self)),
            let signature = Base64URL.decode(String(decoding: parts[2], as: UTF8.self)), signature.count == 32
        else { return .failure(.malformed) }
        guard let key = keys[version] else { return .failure(.unknownVersion(version)) }
        let expected = mac(String(decoding: bytes[0..<(parts[0].count + 1 + parts[1].count)], as: UTF8.self), key: key)
        let same = expected.withUnsafeBytes { a in signature.withUnsafeBytes { b in CRYPTO_memcmp(a.baseAddress, b.baseAddress, 32) } }
        guard same == 0 else { return .failure(.badSignature) }
        // Signed by us, so well formed unless a key was used for something else: still checked.
        let fields = payload.split(separator: UInt8(ascii: "|"), omittingEmptySubsequences: false)
        guard fields.count == 3, fields[0].allSatisfy(Self.isFieldByte), fields[1].allSatisfy(Self.isFieldByte), !fields[0].isEmpty,
            !fields[1].isEmpty, let seconds = Int64(String(decoding: fields[2], as: UTF8.self))
        else { return .failure(.malformed) }
        return .success(
            Unsubscribe(
                personId: String(decoding: fields[0], as: UTF8.self), category: String(decoding: fields[1], as: UTF8.self),
                issuedAt: Date(timeIntervalSince1970: TimeInterval(seconds))))
    }

    /// Whether `value` can be a token's person id or category: 1 to `maximumFieldLength`
    /// characters of A-Z, a-z, 0-9, `-`, `_`, `.` and `:`.
    public static func isValidField(_ value: String) -> Bool {
        (1...maximumFieldLength).contains(value.utf8.count) && value.utf8.allSatisfy(isFieldByte)
    }

    private static func isFieldByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        case UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: ":"): true
        default: false
        }
    }

    /// HMAC-SHA256 of the domain-separated `signed` text (`Crypto.HMAC`: its context is made
    /// from a template, where OpenSSL's one-shot `HMAC()` fetched the algorithm at every call).
    private func mac(_ signed: String, key: Key) -> [UInt8] {
        HMAC.mac(.sha256, key: key.secret, data: Array("wristler-unsubscribe.\(signed)".utf8))
    }
}
