import Crypto
import Encodings
import Foundation
import InboxDomain
import Threads

/// A verified access token: who (`sub`), what they may do (`scope`), and whether it is a guest's.
public struct AccessToken: Sendable, Hashable {
    public var subject: String
    public var scopes: Set<Scope>
    public var isGuest: Bool
    public var issuedAt: Date
    public var expiresAt: Date
    public var id: String
    /// The sign-in session it was issued for (the identity role's `sid`), nil for other issuers'.
    public var sessionId: String? = nil
}

/// The identity tier's public keys, by `kid`.
public struct TokenKeys: Sendable {
    public var keys: [String: ES256PublicKey]

    public init(keys: [String: ES256PublicKey]) {
        self.keys = keys
    }

    /// Loads a JWKS file (`{"keys": [{"kty": "EC", "crv": "P-256", "kid", "x", "y"}]}`), a PEM
    /// file (its `kid` is the file name without `.pem`), or a folder of PEM files.
    public static func load(path: String) throws -> TokenKeys {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw CryptoError("There is no token key file or folder at \(path).")
        }
        if isDirectory.boolValue {
            var keys: [String: ES256PublicKey] = [:]
            for name in try FileManager.default.contentsOfDirectory(atPath: path).sorted() where name.hasSuffix(".pem") {
                keys[String(name.dropLast(4))] = try ES256PublicKey(pem: String(contentsOfFile: path + "/" + name, encoding: .utf8))
            }
            guard !keys.isEmpty else { throw CryptoError("The folder \(path) holds no .pem public key.") }
            return TokenKeys(keys: keys)
        }
        let text = try String(contentsOfFile: path, encoding: .utf8)
        if text.contains("-----BEGIN") {
            let name = (path as NSString).lastPathComponent
            return TokenKeys(keys: [name.hasSuffix(".pem") ? String(name.dropLast(4)) : name: try ES256PublicKey(pem: text)])
        }
        struct JWKS: Decodable {
            struct Key: Decodable {
                let kty: String
                let crv: String?
                let kid: String
                let x: String?
                let y: String?
            }
            let keys: [Key]
        }
        let set = try JSONDecoder().decode(JWKS.self, from: Data(text.utf8))
        var keys: [String: ES256PublicKey] = [:]
        for key in set.keys where key.kty == "EC" && key.crv == "P-256" {
            guard let x = key.x.flatMap(Base64URL.decode), let y = key.y.flatMap(Base64URL.decode) else {
                throw CryptoError("JWKS key \(key.kid) has no valid x and y.")
            }
            keys[key.kid] = try ES256PublicKey(x: x, y: y)
        }
        guard !keys.isEmpty else { throw CryptoError("\(path) holds no P-256 key.") }
        return TokenKeys(keys: keys)
    }
}

/// Where an access token must come from and be meant for (docs/tokens.md): a key that signs
/// tokens for another audience, or that another issuer shares, must not open this API. nil: not
/// checked.
public struct TokenExpectations: Sendable, Hashable {
    /// The `aud` every token must name (as a string, or among an array's).
    public var audience: String?
    /// The `iss` every token must carry.
    public var issuer: String?
    /// The OAuth clients a token may have been issued to: a token naming another `client_id` is
    /// refused; one naming none is taken (an issuer that does not name clients).
    public var clients: Set<String>?

    /// The audience the identity role writes and the API requires by default (`INBOX_TOKEN_AUDIENCE`).
    public static let defaultAudience = "wristler-inbox"

    public init(audience: String? = nil, issuer: String? = nil, clients: Set<String>? = nil) {
        self.audience = audience
        self.issuer = issuer
        self.clients = clients
    }
}

/// Checks `Authorization: Bearer <JWT>`: ES256 only, a known `kid`, a valid signature, not expired
/// (30 s of leeway for clocks), meant for this API and from its issuer (`TokenExpectations`), and
/// the claims this tier needs.
public struct TokenVerifier: Sendable {
    public let keys: TokenKeys
    public let leeway: TimeInterval
    public let expectations: TokenExpectations
    private let now: @Sendable () -> Date
    private let cache: VerifiedTokens
    /// Keys besides `keys`, asked by kid at each signature checked: the identity role's in the same
    /// process, which it reads again as they rotate.
    private let moreKeys: (@Sendable (String) -> ES256PublicKey?)?

    /// `cacheBytes` bounds the memory of the tokens remembered after their signature verified.
    public init(
        keys: TokenKeys, leeway: TimeInterval = 30, cacheBytes: Int = VerifiedTokens.defaultBytes, expecting expectations: TokenExpectations = TokenExpectations(),
        now: @escaping @Sendable () -> Date = { Date() }, moreKeys: (@Sendable (String) -> ES256PublicKey?)? = nil
    ) {
        self.expectations = expectations
        self.moreKeys = moreKeys
        self.keys = keys
        self.leeway = leeway
        self.now = now
        cache = VerifiedTokens(bytes: cacheBytes)
    }

    /// An app sends the same token with every request for an hour: a token whose signature was
    /// checked is remembered (by the token itself, however the header spells `Bearer`), and only
    /// its expiry is checked again.
    public func verify(authorization: String?) throws(APIError) -> AccessToken {
        let token = try Self.bearerToken(authorization)
        if let known = cache.token(for: token) {
            guard known.expiresAt.timeIntervalSince1970 + leeway > now().timeIntervalSince1970 else {
                throw Self.unauthorized(.tokenExpired, "The access token has expired; refresh it.")
            }
            return known
        }
        let verified = try verifySignature(token: token)
        cache.remember(verified, for: token)
        return verified
    }

    /// The tokens remembered now and the bytes they are counted as (never more than the bound).
    public var cached: (count: Int, bytes: Int) { cache.usage }

    /// The token of `Bearer <token>`: the scheme in any letter case, then one or more spaces
    /// (RFC 9110 §11.1, §11.4); spaces and tabs around the header are not part of it.
    static func bearerToken(_ authorization: String?) throws(APIError) -> String {
        guard let authorization, !authorization.isEmpty else {
            throw Self.unauthorized(.missingToken, "This needs a signed-in access token: Authorization: Bearer <token>.")
        }
        let parts = authorization.trimmingSpaces.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw Self.unauthorized(.invalidToken, "The Authorization header must be Bearer <token>.")
        }
        let token = parts[1].trimmingSpaces
        guard !token.isEmpty else { throw Self.unauthorized(.invalidToken, "The Authorization header must be Bearer <token>.") }
        return token
    }

    private func verifySignature(token: String) throws(APIError) -> AccessToken {
        let segments = token.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, let headerBytes = Base64URL.decode(String(segments[0])),
            let payloadBytes = Base64URL.decode(String(segments[1])), let signature = Base64URL.decode(String(segments[2]))
        else { throw Self.unauthorized(.invalidToken, "The access token is not a JWT.") }
        struct Header: Decodable {
            let alg: String
            let kid: String?
        }
        guard let header = try? JSONDecoder().decode(Header.self, from: Data(headerBytes)) else {
            throw Self.unauthorized(.invalidToken, "The access token's header is not JSON.")
        }
        guard header.alg == "ES256" else { throw Self.unauthorized(.invalidToken, "The access token is not signed with ES256.") }
        guard let kid = header.kid, let key = keys.keys[kid] ?? moreKeys?(kid) else {
            throw Self.unauthorized(.invalidToken, "The access token is signed with a key this server does not know.")
        }
        let signed = Array("\(segments[0]).\(segments[1])".utf8)
        guard key.verify(signature: signature, data: signed) else {
            throw Self.unauthorized(.invalidToken, "The access token's signature does not verify.")
        }
        /// `aud`: one string or an array of them (RFC 7519 §4.1.3).
        struct Audience: Decodable {
            let values: [String]
            init(from decoder: any Decoder) throws {
                let container = try decoder.singleValueContainer()
                if let one = try? container.decode(String.self) { values = [one] } else { values = try container.decode([String].self) }
            }
        }
        struct Claims: Decodable {
            let sub: String?
            let scope: String?
            let exp: Double
            let iat: Double?
            let jti: String?
            let guest: Bool?
            let sid: String?
            let iss: String?
            let aud: Audience?
            let client_id: String?
        }
        guard let claims = try? JSONDecoder().decode(Claims.self, from: Data(payloadBytes)) else {
            throw Self.unauthorized(.invalidToken, "The access token's claims are not what this tier needs (exp is required).")
        }
        if let audience = expectations.audience, !(claims.aud?.values.contains(audience) ?? false) {
            throw Self.unauthorized(.invalidToken, "The access token is not meant for this API (its aud does not name \(audience)).")
        }
        if let issuer = expectations.issuer, claims.iss != issuer {
            throw Self.unauthorized(.invalidToken, "The access token was not issued by \(issuer) (iss).")
        }
        if let clients = expectations.clients, let client = claims.client_id, !clients.contains(client) {
            throw Self.unauthorized(.invalidToken, "The access token was issued to a client this API does not know (client_id).")
        }
        let current = now().timeIntervalSince1970
        guard claims.exp + leeway > current else { throw Self.unauthorized(.tokenExpired, "The access token has expired; refresh it.") }
        let isGuest = claims.guest ?? false
        guard isGuest || !(claims.sub ?? "").isEmpty else {
            throw Self.unauthorized(.invalidToken, "The access token names nobody (sub).")
        }
        return AccessToken(
            subject: claims.sub ?? "", scopes: Set((claims.scope ?? "").split(separator: " ").map { Scope(String($0)) }), isGuest: isGuest,
            issuedAt: Date(timeIntervalSince1970: claims.iat ?? current), expiresAt: Date(timeIntervalSince1970: claims.exp),
            id: claims.jti ?? "", sessionId: claims.sid.map { String($0.prefix(64)) })
    }

    static func unauthorized(_ code: APIError.Code, _ detail: String) -> APIError {
        APIError(status: 401, code: code, detail: detail, source: .header("Authorization"), headers: [("WWW-Authenticate", "Bearer")])
    }
}

/// Tokens whose signature verified, by the token itself, within a bound in bytes that holds
/// whatever the tokens: each entry is counted as its token, subject, id and scopes plus a fixed
/// overhead, and a stripe over its share of the bound forgets its expired tokens, then all of them
/// (a miss costs one signature check).
public final class VerifiedTokens: Sendable {
    public static let defaultBytes = 16 << 20
    /// What an entry costs beyond its strings: the dictionary's slot, the token's fields, the
    /// strings' and the scope set's storage headers.
    static let entryOverhead = 256

    private struct Stripe {
        var tokens: [String: AccessToken] = [:]
        var bytes = 0
    }

    private let stripes = Striped<Stripe>(count: 32) { Stripe() }
    private let bytesPerStripe: Int

    init(bytes: Int) { bytesPerStripe = max(0, bytes) / stripes.count }

    func token(for token: String) -> AccessToken? { stripes.withLock(for: token) { $0.tokens[token] } }

    func remember(_ verified: AccessToken, for token: String) {
        let cost = Self.cost(verified, token: token)
        guard cost <= bytesPerStripe else { return }
        let now = Date()
        stripes.withLock(for: token) { stripe in
            guard stripe.tokens[token] == nil else { return }
            if stripe.bytes + cost > bytesPerStripe {
                for (key, old) in stripe.tokens where old.expiresAt < now {
                    stripe.tokens[key] = nil
                    stripe.bytes -= Self.cost(old, token: key)
                }
            }
            if stripe.bytes + cost > bytesPerStripe {
                stripe.tokens.removeAll(keepingCapacity: true)
                stripe.bytes = 0
            }
            stripe.tokens[token] = verified
            stripe.bytes += cost
        }
    }

    var usage: (count: Int, bytes: Int) {
        var usage = (count: 0, bytes: 0)
        stripes.forEach { stripe in
            usage.count += stripe.tokens.count
            usage.bytes += stripe.bytes
        }
        return usage
    }

    static func cost(_ verified: AccessToken, token: String) -> Int {
        entryOverhead + token.utf8.count + verified.subject.utf8.count + verified.id.utf8.count
            + verified.scopes.reduce(0) { $0 + $1.rawValue.utf8.count + 16 }
    }
}

/// Mints ES256 access tokens: `inbox token` with the development key, and tests.
public struct TokenSigner: Sendable {
    public let key: ES256PrivateKey
    public let kid: String

    public init(key: ES256PrivateKey, kid: String) {
        self.key = key
        self.kid = kid
    }

    public func mint(
        subject: String, scopes: [Scope], guest: Bool = false, lifetime: TimeInterval = 3600, issuedAt: Date = Date(), id: String = UUID().uuidString,
        audience: String? = TokenExpectations.defaultAudience, issuer: String? = nil, clientId: String? = nil
    ) throws -> String {
        var claims: [String: JSONValue] = [
            "sub": .string(subject), "scope": .string(scopes.map(\.rawValue).joined(separator: " ")), "iat": .integer(Int64(issuedAt.timeIntervalSince1970)),
            "exp": .integer(Int64(issuedAt.timeIntervalSince1970 + lifetime)), "jti": .string(id),
        ]
        if guest { claims["guest"] = .bool(true) }
        if let audience { claims["aud"] = .string(audience) }
        if let issuer { claims["iss"] = .string(issuer) }
        if let clientId { claims["client_id"] = .string(clientId) }
        let header = Base64URL.encode(JSONAPI.bytes(.object(["alg": .string("ES256"), "kid": .string(kid), "typ": .string("JWT")])))
        let payload = Base64URL.encode(JSONAPI.bytes(.object(claims)))
        let signature = try key.sign(Array("\(header).\(payload)".utf8))
        return "\(header).\(payload).\(Base64URL.encode(signature))"
    }
}
