import Crypto
import Encodings
import Foundation
import InboxAPI
import InboxDomain
import Lifecycle
import PostgresClient
import Synchronization

/// The keys the identity role signs access tokens with: a folder of P-256 keys, `<kid>.pem` each
/// (`INBOX_IDENTITY_KEYS_DIR`). Every key of the folder is published (`/.well-known/jwks.json`)
/// and verifies; one signs: the folder's only key, or the one `INBOX_IDENTITY_SIGNING_KID` names.
///
/// Rotation (docs/tokens.md, docs/identity.md): add the new key to the folder and restart, so that
/// it is published and every API node knows it before it signs; then name it the signing key and
/// restart again; remove the old one once its last tokens have expired (an hour). A folder that
/// is missing or holds no key gets one, made here (mode 0600), as the development key is.
/// A `-----BEGIN PUBLIC KEY-----` file is published and verifies, but cannot sign.
///
/// With `INBOX_SECRETS_KEY_FILE` the keys are PostgreSQL's instead (`load(client:secrets:now:)`,
/// `identity_signing_keys`), sealed under the key-encryption key, so that every node signs and
/// verifies with the same ones.
public final class SigningKeys: Sendable {
    typealias Signers = [(from: Date, kid: String, key: ES256PrivateKey)]

    private struct Keys {
        /// The keys that sign, each from its time on, oldest first: a token is signed by the last
        /// whose time has come (the first before any has).
        var signers: Signers
        /// Every key published, by kid.
        var publicKeys: [String: ES256PublicKey]
    }

    /// The keys now: fixed for a folder's, read again by `reload` for PostgreSQL's.
    private let keys: Mutex<Keys>
    /// Where `reload` reads them: PostgreSQL's table, opened with the key-encryption key.
    private let source: (client: PostgresClient, secrets: SecretsKey)?

    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    public init(signingKid: String, signingKey: ES256PrivateKey, publicKeys: [String: ES256PublicKey]) {
        keys = Mutex(Keys(signers: [(Date.distantPast, signingKid, signingKey)], publicKeys: publicKeys))
        source = nil
    }

    init(signers: Signers, publicKeys: [String: ES256PublicKey], source: (client: PostgresClient, secrets: SecretsKey)?) {
        keys = Mutex(Keys(signers: signers, publicKeys: publicKeys))
        self.source = source
    }

    /// The key that signs now.
    public var signingKid: String { keys.withLock { Self.signer(of: $0.signers, at: Date()).kid } }

    /// Every key published and verifying now, by kid.
    public var publicKeys: [String: ES256PublicKey] { keys.withLock { $0.publicKeys } }

    /// Whether `reload` reads anything (PostgreSQL's keys).
    public var reloads: Bool { source != nil }

    /// Reads PostgreSQL's keys again (a key added by `inbox keys rotate` is published and verifies
    /// from then on, a retired one no longer); nothing for a folder's. Returns whether they changed.
    @discardableResult
    public func reload() throws -> Bool {
        guard let source else { return false }
        let (signers, publicKeys) = try Self.read(client: source.client, secrets: source.secrets)
        return keys.withLock { current in
            let changed = Set(current.publicKeys.keys) != Set(publicKeys.keys) || current.signers.map(\.from) != signers.map(\.from)
            current = Keys(signers: signers, publicKeys: publicKeys)
            return changed
        }
    }

    private static func signer(of signers: Signers, at now: Date) -> (from: Date, kid: String, key: ES256PrivateKey) {
        signers.last { $0.from <= now } ?? signers[0]
    }

    /// What seals a key's PEM in `identity_signing_keys`: the table and the kid.
    static func purpose(_ kid: String) -> String { "identity_signing_keys/\(kid)" }

    /// The keys of `identity_signing_keys` that are not retired, opened with `secrets`; when there
    /// is none, one is made (under a lock, so that nodes starting together make one between them).
    /// `created` says which kid was made now.
    public static func load(client: PostgresClient, secrets: SecretsKey, now: Date = Date()) throws -> (keys: SigningKeys, created: String?) {
        let (rows, created) = try client.transactionBlocking { connection -> ([(String, Data, Date)], String?) in
            try connection.execute("SELECT pg_advisory_xact_lock(hashtext('identity_signing_keys'))")
            let rows = try sealedRows(on: connection)
            if !rows.isEmpty { return (rows, nil) }
            let kid = try add(signingFrom: now, on: connection, secrets: secrets, now: now)
            return (try sealedRows(on: connection), kid)
        }
        let (signers, publicKeys) = try open(rows, secrets: secrets)
        return (SigningKeys(signers: signers, publicKeys: publicKeys, source: (client, secrets)), created)
    }

    /// The keys of the table that are not retired, sealed, in the order they sign.
    private static func sealedRows(on connection: PostgresConnection) throws -> [(String, Data, Date)] {
        try connection.query(
            "SELECT kid, sealed_private, signs_from FROM identity_signing_keys WHERE retired_at IS NULL ORDER BY signs_from, kid"
        ).map { (try $0.decode(String.self, "kid"), try $0.decode(Data.self, "sealed_private"), try $0.decode(Date.self, "signs_from")) }
    }

    /// The keys of the table that are not retired, opened.
    static func read(client: PostgresClient, secrets: SecretsKey) throws -> (Signers, [String: ES256PublicKey]) {
        let rows = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in try sealedRows(on: connection) }
        guard !rows.isEmpty else { throw Invalid(description: "identity_signing_keys holds no key that is not retired.") }
        return try open(rows, secrets: secrets)
    }

    private static func open(_ rows: [(String, Data, Date)], secrets: SecretsKey) throws -> (Signers, [String: ES256PublicKey]) {
        var signers: Signers = []
        var publicKeys: [String: ES256PublicKey] = [:]
        for (kid, sealed, from) in rows {
            let key: ES256PrivateKey
            do {
                key = try ES256PrivateKey(pem: String(decoding: try secrets.open(Array(sealed), for: purpose(kid)), as: UTF8.self))
            } catch {
                throw Invalid(description: "The signing key \(kid) in identity_signing_keys does not open with INBOX_SECRETS_KEY_FILE's key: \(error)")
            }
            signers.append((from, kid, key))
            publicKeys[kid] = try key.publicKey
        }
        return (signers, publicKeys)
    }

    /// A key of `identity_signing_keys` as `inbox keys list` shows it.
    public struct Listed: Sendable {
        public var kid: String
        public var signsFrom: Date
        public var retiredAt: Date?
    }

    public static func list(client: PostgresClient) throws -> [Listed] {
        try client.withConnectionBlocking { connection in
            try connection.query("SELECT kid, signs_from, retired_at FROM identity_signing_keys ORDER BY signs_from, kid").map {
                Listed(kid: try $0.decode(String.self, "kid"), signsFrom: try $0.decode(Date.self, "signs_from"), retiredAt: try $0.decode(Date?.self, "retired_at"))
            }
        }
    }

    /// Rotation: adds a key that signs from `overlap` after `now` (every node must load it, by a
    /// restart, before then, so that each publishes it before any signs with it), and retires the
    /// keys that a newer one replaced more than `tokenLifetime` ago (their last tokens have
    /// expired). Returns the new kid and the retired ones.
    public static func rotate(
        client: PostgresClient, secrets: SecretsKey, overlap: TimeInterval, tokenLifetime: TimeInterval, now: Date = Date()
    ) throws -> (added: String, retired: [String]) {
        try client.transactionBlocking { connection in
            try connection.execute("SELECT pg_advisory_xact_lock(hashtext('identity_signing_keys'))")
            let retired = try connection.query(
                """
                UPDATE identity_signing_keys k SET retired_at = $1
                WHERE retired_at IS NULL
                  AND EXISTS (SELECT 1 FROM identity_signing_keys newer
                              WHERE newer.retired_at IS NULL AND (newer.signs_from, newer.kid) > (k.signs_from, k.kid) AND newer.signs_from < $2)
                RETURNING kid
                """, now, now.addingTimeInterval(-tokenLifetime)
            ).map { try $0.decode(String.self, "kid") }
            let added = try add(signingFrom: now.addingTimeInterval(overlap), on: connection, secrets: secrets, now: now)
            return (added, retired.sorted())
        }
    }

    /// Adds a new key to `identity_signing_keys` that signs from `signingFrom`; returns its kid.
    @discardableResult
    public static func add(signingFrom: Date, on connection: PostgresConnection, secrets: SecretsKey, now: Date = Date()) throws -> String {
        let kid = newKid(now: now)
        let key = try ES256PrivateKey.generate()
        try connection.query(
            "INSERT INTO identity_signing_keys (kid, sealed_private, signs_from) VALUES ($1, $2, $3)", kid,
            Data(try secrets.seal(Array(key.pem.utf8), for: purpose(kid))), signingFrom)
        return kid
    }

    /// The folder's keys; `created` says which kid was made now (nil: none was).
    public static func load(directory: String, signingKid: String?, now: Date = Date()) throws -> (keys: SigningKeys, created: String?) {
        let files = FileManager.default
        // The folders above it with the usual mode: Foundation would give them this one's 0700.
        try files.createDirectory(atPath: (directory as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try files.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // Two processes started at once on one empty folder make one key, not one each: the
        // second waits on the folder's lock and finds the first one's key.
        return try FileLock.exclusive((directory as NSString).appendingPathComponent(".lock")) {
            try loadLocked(directory: directory, signingKid: signingKid, now: now)
        }
    }

    private static func loadLocked(directory: String, signingKid: String?, now: Date) throws -> (keys: SigningKeys, created: String?) {
        let files = FileManager.default
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
    /// `client_id`, `aud` (the API's audience), `sid` (RFC 9068 §2.2, the session it belongs to)
    /// and `iss` when configured.
    public func accessToken(
        subject: String?, scopes: [Scope], clientId: String, sessionId: UUID?, guest: Bool, lifetime: TimeInterval, issuer: String?,
        audience: String = TokenExpectations.defaultAudience, now: Date
    ) throws -> String {
        let issuedAt = Int64(now.timeIntervalSince1970.rounded(.down))
        var claims: [String: JSONValue] = [
            "scope": .string(ScopeList.text(scopes)), "iat": .integer(issuedAt), "exp": .integer(issuedAt + Int64(lifetime)),
            "jti": .string(Base64URL.encode(SecureRandom.bytes(16))), "client_id": .string(clientId), "aud": .string(audience),
        ]
        if let subject { claims["sub"] = .string(subject) }
        if guest { claims["guest"] = .bool(true) }
        if let sessionId { claims["sid"] = .string(sessionId.uuidString.lowercased()) }
        if let issuer { claims["iss"] = .string(issuer) }
        let signer = keys.withLock { Self.signer(of: $0.signers, at: now) }
        let header = Base64URL.encode(JSONAPI.bytes(.object(["alg": .string("ES256"), "kid": .string(signer.kid), "typ": .string("at+jwt")])))
        let payload = Base64URL.encode(JSONAPI.bytes(.object(claims)))
        let signature = try signer.key.sign(Array("\(header).\(payload)".utf8))
        return "\(header).\(payload).\(Base64URL.encode(signature))"
    }
}

/// Every node reads PostgreSQL's signing keys again every `interval` (a minute), so that a key
/// `inbox keys rotate` added is published and verifies on every node before it signs, and a
/// retired one stops verifying, with no restart.
public struct SigningKeysReload: Service {
    let keys: SigningKeys
    let interval: Duration
    let log: Logger

    public init(keys: SigningKeys, interval: Duration = .seconds(60), log: Logger) {
        self.keys = keys
        self.interval = interval
        self.log = log
    }

    public func run() async throws {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
            let keys = self.keys
            do {
                if try await BlockingThread.run({ try keys.reload() }) {
                    log.info("read the signing keys again", metadata: ["signing": .string(keys.signingKid), "published": .string(keys.publicKeys.keys.sorted().joined(separator: ","))])
                }
            } catch {
                log.warning("the signing keys could not be read again; the ones held go on", metadata: ["error": "\(error)"])
            }
        }
    }
}
