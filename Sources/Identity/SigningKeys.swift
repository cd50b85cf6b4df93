import Crypto
import Encodings
import Foundation
import InboxAPI
import InboxDomain

/// The keys the identity role signs access tokens with: a folder of P-256 keys, `<kid>.pem` each
/// (`INBOX_IDENTITY_KEYS_DIR`). Every key of the folder is published (`/.well-known/jwks.json`)
/// and verifies; one signs: the folder's only key, or the one `INBOX_IDENTITY_SIGNING_KID` names.
///
/// Rotation (docs/tokens.md, docs/identity.md): add the new key to the folder and restart, so that
/// it is published and every API node knows it before it signs; then name it the signing key and
/// restart again; remove the old one once its last tokens have expired (an hour). A folder that
/// is missing or holds no key gets one, made here (mode 0600), as the development key is.
/// A `-----BEGIN PUBLIC KEY-----` file is published and verifies, but cannot sign.
public final class SigningKeys: Sendable {
    public let signingKid: String
    private let signingKey: ES256PrivateKey
    /// Every key of the folder, by kid.
    public let publicKeys: [String: ES256PublicKey]

    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    public init(signingKid: String, signingKey: ES256PrivateKey, publicKeys: [String: ES256PublicKey]) {
        self.signingKid = signingKid
        self.signingKey = signingKey
        self.publicKeys = publicKeys
    }

    /// The folder's keys; `created` says which kid was made now (nil: none was).
    public static func load(directory: String, signingKid: String?, now: Date = Date()) throws -> (keys: SigningKeys, created: String?) {
        let files = FileManager.default
        try files.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var names = try files.contentsOfDirectory(atPath: directory).filter { $0.hasSuffix(".pem") }.sorted()
        var created: String?
        if names.isEmpty {
            let kid = newKid(now: now)
            let key = try ES256PrivateKey.generate()
            let path = (directory as NSString).appendingPathComponent("\(kid).pem")
            guard files.createFile(atPath: path, contents: Data(key.pem.utf8), attributes: [.posixPermissions: 0o600]) else {
                throw Invalid(description: "Cannot write a new signing key to \(path).")
            }
            names = ["\(kid).pem"]
            created = kid
        }
        var privateKeys: [String: ES256PrivateKey] = [:]
        var publicKeys: [String: ES256PublicKey] = [:]
        for name in names {
            let kid = String(name.dropLast(4))
            guard isKid(kid) else {
                throw Invalid(description: "\(name) in \(directory): a key's file is <kid>.pem, a kid of letters, digits, '.', '_' and '-'.")
            }
            let text = try String(contentsOfFile: (directory as NSString).appendingPathComponent(name), encoding: .utf8)
            do {
                if text.contains("PUBLIC KEY-----") {
                    publicKeys[kid] = try ES256PublicKey(pem: text)
                } else {
                    let key = try ES256PrivateKey(pem: text)
                    privateKeys[kid] = key
                    publicKeys[kid] = try key.publicKey
                }
            } catch {
                throw Invalid(description: "\(name) in \(directory) is not a P-256 key (ES256): \(error)")
            }
        }
        let kid: String
        if let signingKid {
            kid = signingKid
        } else if privateKeys.count == 1, let only = privateKeys.keys.first {
            kid = only
        } else {
            throw Invalid(
                description: "\(directory) holds \(privateKeys.count) private keys (\(privateKeys.keys.sorted().joined(separator: ", "))): "
                    + "INBOX_IDENTITY_SIGNING_KID must name the one that signs.")
        }
        guard let key = privateKeys[kid] else {
            throw Invalid(description: "INBOX_IDENTITY_SIGNING_KID is \(kid), but \(directory) holds no private key \(kid).pem.")
        }
        return (SigningKeys(signingKid: kid, signingKey: key, publicKeys: publicKeys), created)
    }

    /// `2026-11-30-3fa9`: the day it was made, so a folder lists its keys in age order.
    static func newKid(now: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let day = calendar.dateComponents([.year, .month, .day], from: now)
        func two(_ value: Int?) -> String { value.map { $0 < 10 ? "0\($0)" : "\($0)" } ?? "00" }
        return "\(day.year ?? 0)-\(two(day.month))-\(two(day.day))-\(Hex.encode(SecureRandom.bytes(2)))"
    }

    static func isKid(_ text: String) -> Bool { ScopeList.isClientId(text) }

    /// The keys as the API's verifier takes them.
    public var tokenKeys: TokenKeys { TokenKeys(keys: publicKeys) }

    /// The JWKS (RFC 7517) of every key: what `/.well-known/jwks.json` answers.
    public var jwks: JSONValue {
        get throws {
            var keys: [JSONValue] = []
            for (kid, key) in publicKeys.sorted(by: { $0.key < $1.key }) {
                let (x, y) = try key.coordinates
                keys.append(
                    .object([
                        "kty": .string("EC"), "crv": .string("P-256"), "kid": .string(kid), "use": .string("sig"), "alg": .string("ES256"),
                        "x": .string(Base64URL.encode(x)), "y": .string(Base64URL.encode(y)),
                    ]))
            }
            return .object(["keys": .array(keys)])
        }
    }

    /// An access token (docs/tokens.md): ES256, `kid`, and the claims the API reads, plus
    /// `client_id` and `sid` (RFC 9068 §2.2, the session it belongs to) and `iss` when configured.
    public func accessToken(
        subject: String?, scopes: [Scope], clientId: String, sessionId: UUID?, guest: Bool, lifetime: TimeInterval, issuer: String?, now: Date
    ) throws -> String {
        let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
        var claims: [String: JSONValue] = [
            "scope": .string(ScopeList.text(scopes)), "iat": .integer(issuedAt), "exp": .integer(issuedAt + Int64(lifetime)),
            "jti": .string(Base64URL.encode(SecureRandom.bytes(16))), "client_id": .string(clientId),
        ]
        if let subject { claims["sub"] = .string(subject) }
        if guest { claims["guest"] = .bool(true) }
        if let sessionId { claims["sid"] = .string(sessionId.uuidString.lowercased()) }
        if let issuer { claims["iss"] = .string(issuer) }
        let header = Base64URL.encode(JSONAPI.bytes(.object(["alg": .string("ES256"), "kid": .string(signingKid), "typ": .string("at+jwt")])))
        let payload = Base64URL.encode(JSONAPI.bytes(.object(claims)))
        let signature = try signingKey.sign(Array("\(header).\(payload)".utf8))
        return "\(header).\(payload).\(Base64URL.encode(signature))"
    }
}
