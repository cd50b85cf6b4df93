import Encodings
import Foundation

/// The key-encryption key every node reads from a file (`INBOX_SECRETS_KEY_FILE`): secrets kept in
/// PostgreSQL (the identity role's signing keys) are sealed under it with AES-256-GCM, so a copy of
/// the database or of a backup without the file holds none of them in the clear.
///
/// The file holds 32 random bytes: as they are, as 64 hex digits, or in base64
/// (`openssl rand -base64 32`); a last line break is allowed.
public struct SecretsKey: Sendable {
    let bytes: [UInt8]

    public init(bytes: [UInt8]) throws {
        guard bytes.count == AES256GCM.keyBytes else { throw CryptoError("A secrets key is 32 bytes, not \(bytes.count).") }
        self.bytes = bytes
    }

    /// The key in the file at `path`, or a sentence saying what the file must hold.
    public static func load(path: String) throws -> SecretsKey {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CryptoError("The secrets key file \(path) cannot be read.")
        }
        if data.count == AES256GCM.keyBytes { return try SecretsKey(bytes: Array(data)) }
        let text = String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if text.utf8.count == 64, let bytes = Hex.decode(text) { return try SecretsKey(bytes: bytes) }
        if let decoded = Data(base64Encoded: text), decoded.count == AES256GCM.keyBytes { return try SecretsKey(bytes: Array(decoded)) }
        throw CryptoError(
            "The secrets key file \(path) must hold 32 random bytes: as they are, as 64 hex digits, or in base64 (openssl rand -base64 32).")
    }

    /// `plaintext` sealed for `purpose` (what it is and whose: `identity_signing_keys/<kid>`), which
    /// must be given again to open it.
    public func seal(_ plaintext: [UInt8], for purpose: String) throws -> [UInt8] {
        try AES256GCM.seal(plaintext, key: bytes, associatedData: Array(purpose.utf8))
    }

    /// SHA-256 of the key, in hex: which key it is, without the key.
    public var fingerprint: String { Hex.encode(SHA256.digest(bytes)) }

    public func open(_ sealed: [UInt8], for purpose: String) throws -> [UInt8] {
        try AES256GCM.open(sealed, key: bytes, associatedData: Array(purpose.utf8))
    }
}
