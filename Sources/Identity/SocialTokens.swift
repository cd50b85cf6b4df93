import Crypto
import Encodings
import Foundation
import HTTP2Client
import InboxDomain
import PostgresClient
import Threads

/// What a verified ID token of Apple or Google says about the person.
public struct SocialClaims: Sendable, Hashable {
    public var provider: SocialProvider
    /// The provider's own id of the person (`sub`): what an account is linked by.
    public var subject: String
    /// Which of our client ids the token was made for.
    public var audience: String
    public var email: String?
    /// Whether the provider vouches for the address.
    public var emailVerified: Bool
    public var nonce: String?
    /// Google puts the names in the token; Apple never does (the app passes them on).
    public var givenName: String
    public var familyName: String
    /// When the provider issued it (`iat`), if it says: how fresh a sign-in it proves.
    public var issuedAt: Date?
    /// When it expires (`exp`): until then it is remembered once used (`UsedIDTokens`).
    public var expiresAt: Date?

    public init(
        provider: SocialProvider, subject: String, audience: String, email: String?, emailVerified: Bool, nonce: String?, givenName: String = "",
        familyName: String = "", issuedAt: Date? = nil, expiresAt: Date? = nil
    ) {
        self.expiresAt = expiresAt
        self.provider = provider
        self.subject = subject
        self.audience = audience
        self.email = email
        self.emailVerified = emailVerified
        self.nonce = nonce
        self.givenName = givenName
        self.familyName = familyName
        self.issuedAt = issuedAt
    }
}

/// Verifies ID tokens of Apple and Google (OpenID Connect Core §3.1.3.7): RS256 by a key of the
/// provider's published set, `iss` the provider's, `aud` one of our client ids, not expired (a
/// minute of leeway for clocks), issued no later than a minute from now, `sub` present. The nonce
/// is the caller's to compare (it comes with the request, or with a handoff).
///
/// The provider's key sets are fetched with libcurl (`HTTP2Client`'s libcurl engine), cached for
/// as long as their `Cache-Control: max-age` says (an hour when it says nothing, at least a minute
/// and at most a day), and fetched again early when a token names a key the cached set lacks (a
/// provider rotated), at most once per `refetchInterval` so that tokens with made-up key ids
/// cannot make us hammer the provider. When a fetch fails, the keys already known stay in use.
public final class SocialTokenVerifier: Sendable {
    public static let maximumTokenBytes = 8192
    let providers: [SocialProvider: SocialProviderConfiguration]
    let leeway: TimeInterval = 60
    let refetchInterval: Duration
    private let http: HTTP2Client
    private let cache = Locked<[SocialProvider: KeySet]>([:])

    struct KeySet {
        var keys: [String: RS256PublicKey] = [:]
        var fetchedAt: ContinuousClock.Instant?
        var maxAge: Duration = .seconds(3600)
        var lastAttempt: ContinuousClock.Instant?
    }

    public init(providers: [SocialProviderConfiguration], caFile: String?, refetchInterval: Duration = .seconds(30)) throws {
        self.providers = Dictionary(providers.map { ($0.provider, $0) }, uniquingKeysWith: { $1 })
        self.refetchInterval = refetchInterval
        http = try HTTP2Client(configuration: .init(caFile: caFile, connectTimeout: .seconds(5), maxResponseBytes: 256 << 10, engine: .libcurl))
    }

    deinit { http.shutdown() }

    public func isConfigured(_ provider: SocialProvider) -> Bool { providers[provider] != nil }

    /// The claims of `idToken`, or `invalid_grant` saying what is wrong with it; `503
    /// temporarily_unavailable` when the provider's keys cannot be had at all.
    public func verify(_ idToken: String, provider: SocialProvider, now: Date) throws(OAuthError) -> SocialClaims {
        guard let configuration = providers[provider] else {
            throw OAuthError.invalidRequest("Sign in with \(provider.rawValue) is not configured here.")
        }
        guard idToken.utf8.count <= Self.maximumTokenBytes else { throw OAuthError.invalidGrant("The ID token is too long to be one.") }
        let segments = idToken.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, let headerBytes = Base64URL.decode(String(segments[0])), let payloadBytes = Base64URL.decode(String(segments[1])),
            let signature = Base64URL.decode(String(segments[2]))
        else { throw OAuthError.invalidGrant("The ID token is not a JWT.") }
        guard let header = try? JSONDecoder().decode(JSONValue.self, from: Data(headerBytes)), header["alg"]?.stringValue == "RS256",
            let kid = header["kid"]?.stringValue
        else { throw OAuthError.invalidGrant("The ID token is not signed with RS256 by a named key.") }
        let key = try self.key(kid, of: configuration)
        guard key.verify(signature: signature, data: Array("\(segments[0]).\(segments[1])".utf8)) else {
            throw OAuthError.invalidGrant("The ID token's signature does not verify.")
        }
        guard let claims = try? JSONDecoder().decode(JSONValue.self, from: Data(payloadBytes)), case .object = claims else {
            throw OAuthError.invalidGrant("The ID token's claims are not JSON.")
        }
        guard let issuer = claims["iss"]?.stringValue, configuration.issuers.contains(issuer) else {
            throw OAuthError.invalidGrant("The ID token is not \(provider.rawValue)'s.")
        }
        let audiences: [String] =
            switch claims["aud"] {
            case .string(let one): [one]
            case .array(let many): many.compactMap(\.stringValue)
            default: []
            }
        guard let audience = audiences.first(where: configuration.audiences.contains) else {
            throw OAuthError.invalidGrant("The ID token was made for another app.")
        }
        // With several audiences, the party it was issued to (`azp`) must be ours (OpenID Connect Core §3.1.3.7).
        if audiences.count > 1, !(claims["azp"]?.stringValue.map(configuration.audiences.contains) ?? false) {
            throw OAuthError.invalidGrant("The ID token was issued to another app.")
        }
        let current = now.timeIntervalSince1970
        guard let expiry = claims["exp"]?.doubleValue, expiry + leeway > current else { throw OAuthError.invalidGrant("The ID token has expired.") }
        if let issuedAt = claims["iat"]?.doubleValue, issuedAt > current + leeway {
            throw OAuthError.invalidGrant("The ID token is issued in the future.")
        }
        guard let subject = claims["sub"]?.stringValue, (1...255).contains(subject.utf8.count) else {
            throw OAuthError.invalidGrant("The ID token names nobody (sub).")
        }
        let email = claims["email"]?.stringValue.map(Accounts.normalized)
        // Apple writes booleans as strings ("true") in some tokens.
        let verified: Bool =
            switch claims["email_verified"] {
            case .bool(let value): value
            case .string(let text): text == "true"
            default: false
            }
        return SocialClaims(
            provider: provider, subject: subject, audience: audience, email: email, emailVerified: verified, nonce: claims["nonce"]?.stringValue,
            givenName: claims["given_name"]?.stringValue ?? "", familyName: claims["family_name"]?.stringValue ?? "",
            issuedAt: claims["iat"]?.doubleValue.map(Date.init(timeIntervalSince1970:)),
            expiresAt: Date(timeIntervalSince1970: expiry))
    }

    /// The provider's key `kid`: from the cache while it is fresh and has it, else fetched.
    private func key(_ kid: String, of configuration: SocialProviderConfiguration) throws(OAuthError) -> RS256PublicKey {
        let now = ContinuousClock.now
        let provider = configuration.provider
        let (cached, shouldFetch) = cache.withLock { cache -> (RS256PublicKey?, Bool) in
            var set = cache[provider] ?? KeySet()
            let fresh = set.fetchedAt.map { now - $0 < set.maxAge } ?? false
            let key = set.keys[kid]
            if key != nil && fresh { return (key, false) }
            // Unknown kid or a stale set: fetch, unless a fetch began a moment ago.
            if let last = set.lastAttempt, now - last < refetchInterval { return (key, false) }
            set.lastAttempt = now
            cache[provider] = set
            return (key, true)
        }
        if shouldFetch {
            do {
                let (keys, maxAge) = try fetch(configuration.keysURL)
                cache.withLock { cache in
                    cache[provider] = KeySet(keys: keys, fetchedAt: .now, maxAge: maxAge, lastAttempt: now)
                }
                if let key = keys[kid] { return key }
                throw OAuthError.invalidGrant("The ID token is signed with a key \(provider.rawValue) does not publish.")
            } catch let error as OAuthError {
                throw error
            } catch {
                if let cached { return cached }
                let known = cache.withLock { !($0[provider]?.keys.isEmpty ?? true) }
                if known { throw OAuthError.invalidGrant("The ID token is signed with a key \(provider.rawValue) does not publish.") }
                throw OAuthError(
                    503, .temporarilyUnavailable, "\(provider.rawValue.capitalized)'s keys cannot be fetched just now; try again shortly.",
                    headers: [("Retry-After", "5")], cause: "fetching \(configuration.keysURL): \(error)")
            }
        }
        if let cached { return cached }
        throw OAuthError.invalidGrant("The ID token is signed with a key \(provider.rawValue) does not publish.")
    }

    struct FetchFailure: Error, CustomStringConvertible {
        var description: String
    }

    /// The RSA keys of a JWKS document by kid, and how long it may be kept.
    private func fetch(_ url: String) throws -> ([String: RS256PublicKey], Duration) {
        let response = try blocking { [http] in try await http.send(HTTP2Request(url: url, headers: [("Accept", "application/json")], timeout: .seconds(10))) }
        guard response.status == 200 else { throw FetchFailure(description: "answered \(response.status)") }
        guard let document = try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)), case .array(let entries)? = document["keys"] else {
            throw FetchFailure(description: "not a JWKS document")
        }
        var keys: [String: RS256PublicKey] = [:]
        for entry in entries.prefix(64) where entry["kty"]?.stringValue == "RSA" && (entry["use"]?.stringValue ?? "sig") == "sig" {
            guard let kid = entry["kid"]?.stringValue, let n = entry["n"]?.stringValue.flatMap(Base64URL.decode),
                let e = entry["e"]?.stringValue.flatMap(Base64URL.decode), let key = try? RS256PublicKey(modulus: n, exponent: e)
            else { continue }
            keys[kid] = key
        }
        guard !keys.isEmpty else { throw FetchFailure(description: "no RSA signing key in the set") }
        return (keys, Self.maxAge(response.header("Cache-Control")))
    }

    /// `max-age` of a `Cache-Control` header, between a minute and a day; an hour when absent.
    static func maxAge(_ header: String?) -> Duration {
        guard let header else { return .seconds(3600) }
        for directive in header.split(separator: ",") {
            let parts = directive.trimmingCharacters(in: .whitespaces).split(separator: "=", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "max-age", let seconds = Int(parts[1]) {
                return .seconds(min(86_400, max(60, seconds)))
            }
        }
        return .seconds(3600)
    }
}

/// Runs `operation` and waits for it on the calling thread: for the token endpoint's handlers,
/// which run on the HTTP server's blocking threads, never on Swift's cooperative pool.
func blocking<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) throws -> T {
    let done = DispatchSemaphore(value: 0)
    let result = Locked<Result<T, any Error>?>(nil)
    Task {
        let outcome: Result<T, any Error>
        do { outcome = .success(try await operation()) } catch { outcome = .failure(error) }
        result.withLock { $0 = outcome }
        done.signal()
    }
    done.wait()
    return try result.withLock { $0! }.get()
}

/// The ID tokens that signed somebody in (`identity_used_id_tokens`), by SHA-256, until they
/// expire: a captured ID token and its nonce do not sign in a second time.
public enum UsedIDTokens {
    /// Remembers `token` as used until `expiresAt` (and the clocks' leeway); false when it was used before.
    static func use(_ token: String, expiresAt: Date, on connection: PostgresConnection) throws -> Bool {
        let digest = RateLimits.digest(token)
        return try connection.query(
            "INSERT INTO identity_used_id_tokens (digest, expires_at) VALUES ($1, $2::timestamptz) ON CONFLICT (digest) DO NOTHING RETURNING digest",
            digest, expiresAt.addingTimeInterval(120)
        ).count == 1
    }

    /// Forgets the tokens expired by `now`: the providers' expiry refuses them from then on.
    public static func purge(before now: Date, on connection: PostgresConnection) throws {
        _ = try connection.query("DELETE FROM identity_used_id_tokens WHERE expires_at < $1::timestamptz", now)
    }
}
