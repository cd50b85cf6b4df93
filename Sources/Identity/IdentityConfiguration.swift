import Crypto
import Foundation
import InboxAPI
import PasswordHashing

/// A client of the token endpoint: the app (a public client: no secret, app guide section 3) and
/// what it may ask for. A scope outside `scopes` is `invalid_scope`, never silently dropped.
public struct OAuthClient: Sendable, Hashable {
    public var id: String
    public var scopes: Set<Scope>

    public init(id: String, scopes: Set<Scope>) {
        self.id = id
        self.scopes = scopes
    }
}

/// The clients, from configuration (`INBOX_IDENTITY_CLIENTS`): `id=scope scope ...;id=scope ...`.
public struct OAuthClients: Sendable {
    public var clients: [String: OAuthClient]

    public init(_ clients: [OAuthClient]) {
        self.clients = Dictionary(clients.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
    }

    /// The development default: one client, `wristler-app`, with what the app asks for (app
    /// guide section 6).
    public static let development = OAuthClients([OAuthClient(id: "wristler-app", scopes: Set(Scope.app))])

    public struct Invalid: Error, CustomStringConvertible {
        public var description: String
    }

    public static func parse(_ text: String) throws -> OAuthClients {
        var clients: [OAuthClient] = []
        for entry in text.split(separator: ";").map({ $0.trimmingCharacters(in: .whitespaces) }) where !entry.isEmpty {
            let parts = entry.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, ScopeList.isClientId(parts[0]) else {
                throw Invalid(description: "each client is id=scope scope ... (an id of letters, digits, '.', '_' and '-'), not \"\(entry)\"")
            }
            let scopes = parts[1].split(separator: " ").map { Scope(String($0)) }
            guard let bad = scopes.first(where: { !ScopeList.isScopeToken($0.rawValue) }) else {
                clients.append(OAuthClient(id: parts[0], scopes: Set(scopes)))
                continue
            }
            throw Invalid(description: "\"\(bad)\" of client \(parts[0]) is not a scope (RFC 6749 §3.3)")
        }
        guard !clients.isEmpty else { throw Invalid(description: "no client is named") }
        return OAuthClients(clients)
    }

    public subscript(id: String) -> OAuthClient? { clients[id] }
}

/// A limit of attempts: `count` at once, refilled at `count` per `seconds` (a token bucket).
public struct AttemptLimit: Sendable, Hashable, CustomStringConvertible {
    public var count: Double
    public var seconds: Double

    public init(_ count: Double, per seconds: Double) {
        self.count = count
        self.seconds = seconds
    }

    public var perSecond: Double { count / seconds }
    public var description: String { "\(Int(count))/\(Int(seconds))" }

    /// `N/SECONDS`, such as `30/300`.
    public init?(text: String) {
        let parts = text.split(separator: "/")
        guard parts.count == 2, let count = Double(parts[0]), let seconds = Double(parts[1]), count >= 1, count <= 1_000_000, seconds >= 1,
            seconds <= 86_400 * 7
        else { return nil }
        self.init(count, per: seconds)
    }
}

/// Sign in with Apple or Google: whose ID tokens are accepted and where their keys are.
public struct SocialProviderConfiguration: Sendable {
    public var provider: SocialProvider
    /// The `iss` the provider's tokens carry.
    public var issuers: Set<String>
    /// Our client ids at the provider, any of which a token's `aud` may be (Apple: the app's
    /// bundle id and the Services ID of the web flow; Google: the iOS, Android and web client ids).
    public var audiences: Set<String>
    /// Where the provider publishes its signing keys (JWKS).
    public var keysURL: String

    public init(provider: SocialProvider, issuers: Set<String>, audiences: Set<String>, keysURL: String) {
        self.provider = provider
        self.issuers = issuers
        self.audiences = audiences
        self.keysURL = keysURL
    }

    public static func apple(audiences: Set<String>, keysURL: String = "https://appleid.apple.com/auth/keys") -> SocialProviderConfiguration {
        SocialProviderConfiguration(provider: .apple, issuers: ["https://appleid.apple.com"], audiences: audiences, keysURL: keysURL)
    }

    public static func google(audiences: Set<String>, keysURL: String = "https://www.googleapis.com/oauth2/v3/certs") -> SocialProviderConfiguration {
        SocialProviderConfiguration(
            provider: .google, issuers: ["https://accounts.google.com", "accounts.google.com"], audiences: audiences, keysURL: keysURL)
    }
}

public enum SocialProvider: String, Sendable, Hashable, CaseIterable {
    case apple, google
}

/// Exchanging Apple's `authorization_code` for the refresh token Apple revokes when an account
/// is deleted: our team's Sign in with Apple key signs the client secret (an ES256 JWT).
public struct AppleCodeExchange: Sendable {
    public var tokenURL: String
    /// Apple's revoke endpoint, where a closed account's refresh tokens are revoked.
    public var revokeURL: String
    public var teamId: String
    public var keyId: String
    public var keyPEM: String
    /// The `redirect_uri` of the web flow (`<public URL>/oauth/apple/return`), sent with its codes.
    public var redirectURI: String?

    public init(
        tokenURL: String = "https://appleid.apple.com/auth/token", revokeURL: String = "https://appleid.apple.com/auth/revoke", teamId: String,
        keyId: String, keyPEM: String, redirectURI: String?
    ) {
        self.tokenURL = tokenURL
        self.revokeURL = revokeURL
        self.teamId = teamId
        self.keyId = keyId
        self.keyPEM = keyPEM
        self.redirectURI = redirectURI
    }
}

/// Everything the identity role is told. Plain values with the defaults a careful provider uses
/// (docs/identity.md explains each).
public struct IdentityConfiguration: Sendable {
    public var clients: OAuthClients = .development
    /// The key-encryption key of `INBOX_SECRETS_KEY_FILE`: the signing keys are PostgreSQL's and the
    /// TOTP secrets are sealed under it; nil: a folder of keys, secrets in the clear.
    public var secrets: SecretsKey?
    public var passwordCost: Argon2Cost = .owasp
    /// Hashes at once (memory: this × `passwordCost.memoryKiB`).
    public var hashConcurrency: Int = max(1, ProcessInfo.processInfo.activeProcessorCount)
    public var accessTokenLifetime: TimeInterval = 3600
    public var guestTokenLifetime: TimeInterval = 3600
    public var refreshTokenLifetime: TimeInterval = 90 * 86_400
    public var challengeLifetime: TimeInterval = 300
    public var challengeAttempts = 5
    public var handoffLifetime: TimeInterval = 300
    /// The `iss` of the access tokens; nil: none.
    public var issuer: String?
    /// The `aud` of the access tokens: the API they are for (`INBOX_TOKEN_AUDIENCE`).
    public var audience = TokenExpectations.defaultAudience
    /// Where a blocked person is sent (`contact_url`).
    public var contactURL = "https://wristler.eu/contact"
    /// Per client address, the password step, the code step and the social grant together.
    public var signInPerAddress = AttemptLimit(30, per: 300)
    /// Per account (the address typed, known or not), the password step and the code step.
    public var signInPerAccount = AttemptLimit(10, per: 300)
    /// Guest tokens per client address.
    public var guestPerAddress = AttemptLimit(60, per: 3600)
    /// Refreshes per client address: refresh tokens cannot be guessed, this only bounds the load.
    public var refreshPerAddress = AttemptLimit(600, per: 60)
    public var apple: SocialProviderConfiguration?
    public var google: SocialProviderConfiguration?
    public var appleCodeExchange: AppleCodeExchange?
    /// The app's App Link that `/oauth/apple/return` sends the browser to with the handoff.
    public var appleReturnURL: String?
    /// Trusted for the providers' key sets and Apple's token endpoint besides the system's (tests).
    public var caFile: String?
    /// Addresses of the proxies in front (a load balancer): a request from one of them is counted
    /// against the address its `X-Forwarded-For` names, the rightmost one that is not a proxy.
    /// Empty: the connection's own address, and `X-Forwarded-For` is never read (anybody can send it).
    public var trustedProxies: Set<String> = []

    public init() {}

    func provider(_ provider: SocialProvider) -> SocialProviderConfiguration? {
        switch provider {
        case .apple: apple
        case .google: google
        }
    }
}

/// RFC 6749's syntax of scopes and client ids.
enum ScopeList {
    /// `scope-token = 1*( %x21 / %x23-5B / %x5D-7E )` (RFC 6749 §3.3), at most 64 bytes here.
    static func isScopeToken(_ text: String) -> Bool {
        (1...64).contains(text.utf8.count) && text.utf8.allSatisfy { $0 == 0x21 || (0x23...0x5B).contains($0) || (0x5D...0x7E).contains($0) }
    }

    static func isClientId(_ text: String) -> Bool {
        (1...100).contains(text.utf8.count)
            && text.utf8.allSatisfy { byte in
                (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte) || [45, 46, 95].contains(byte)
            }
    }

    /// The scopes of a `scope` field: space-separated tokens, at most 32, each once.
    static func parse(_ text: String?) throws(OAuthError) -> [Scope] {
        guard let text else { return [] }
        var scopes: [Scope] = []
        for token in text.split(separator: " ") {
            guard isScopeToken(String(token)) else { throw OAuthError(400, .invalidScope, "\"\(token.prefix(64))\" is not a scope.") }
            let scope = Scope(String(token))
            if !scopes.contains(scope) { scopes.append(scope) }
            guard scopes.count <= 32 else { throw OAuthError(400, .invalidScope, "At most 32 scopes may be asked for.") }
        }
        return scopes
    }

    static func text(_ scopes: [Scope]) -> String { scopes.map(\.rawValue).joined(separator: " ") }

    static func from(text: String) -> [Scope] { text.split(separator: " ").map { Scope(String($0)) } }
}
