import Crypto
import Encodings
import Foundation
import InboxDomain

/// A compact JWS (RFC 7515): base64url header, claims and signature, joined by dots.
enum CompactJWS {
    static func sign(header: [UInt8], claims: [UInt8], _ signer: ([UInt8]) throws -> [UInt8]) throws -> String {
        let signingInput = Base64URL.encode(header) + "." + Base64URL.encode(claims)
        let signature = try signer(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }

    static func unixSeconds(_ date: Date) -> Int64 { Int64(date.timeIntervalSince1970.rounded(.down)) }
}

/// What signs APNs provider tokens: the `.p8` key from Apple's developer account (an ES256 key as
/// PKCS#8 PEM), its key id and the team id.
///
/// A provider token is `{"alg":"ES256","kid":keyId}.{"iss":teamId,"iat":unixSeconds}`, signed.
/// Apple refuses one older than an hour (`ExpiredProviderToken`) and one renewed more often than
/// every 20 minutes (`TooManyProviderTokenUpdates`): when to sign a new one is
/// `ProviderTokenPolicy.APNs`'s to say.
public struct APNsCredentials: Sendable {
    public var keyId: String
    public var teamId: String
    public let key: ES256PrivateKey

    public init(keyId: String, teamId: String, key: ES256PrivateKey) {
        self.keyId = keyId
        self.teamId = teamId
        self.key = key
    }

    /// From the text of the `.p8` file.
    public init(keyId: String, teamId: String, p8: String) throws {
        self.init(keyId: keyId, teamId: teamId, key: try ES256PrivateKey(pem: p8))
    }

    /// A provider token issued at `issuedAt`, for `authorization: bearer …`.
    public func providerToken(issuedAt: Date) throws -> String {
        var header: [UInt8] = []
        header.appendRaw(#"{"alg":"ES256","kid":"#)
        header.appendJSON(keyId)
        header.appendRaw("}")
        var claims: [UInt8] = []
        claims.appendRaw(#"{"iss":"#)
        claims.appendJSON(teamId)
        claims.appendRaw(#","iat":"#)
        claims.append(contentsOf: String(CompactJWS.unixSeconds(issuedAt)).utf8)
        claims.appendRaw("}")
        return try CompactJWS.sign(header: header, claims: claims) { try key.sign($0) }
    }
}

/// Why a service-account file cannot be used; each case names what to fix.
public enum FCMServiceAccountError: Error, Sendable, Hashable, CustomStringConvertible {
    case notJSON
    case missingField(String)
    case unreadablePrivateKey(String)

    public var description: String {
        switch self {
        case .notJSON: "The FCM service account file is not a JSON object."
        case .missingField(let name): "The FCM service account file has no \"\(name)\" (a string)."
        case .unreadablePrivateKey(let why): "The FCM service account's \"private_key\" cannot be used: \(why)"
        }
    }
}

/// A Google service account, from the JSON file Firebase hands out, for the OAuth2 JWT grant
/// (RFC 7523) that buys an FCM access token.
public struct FCMServiceAccount: Sendable {
    public var projectId: String
    public var clientEmail: String
    /// Where the assertion is exchanged for an access token (`https://oauth2.googleapis.com/token`).
    public var tokenURI: String
    public let privateKey: RS256PrivateKey

    /// The one scope FCM HTTP v1 needs.
    public static let scope = "https://www.googleapis.com/auth/firebase.messaging"

    /// How long an assertion is valid: an hour, the most Google accepts.
    public static let assertionLifetime: Int64 = 3600

    public init(projectId: String, clientEmail: String, tokenURI: String, privateKey: RS256PrivateKey) {
        self.projectId = projectId
        self.clientEmail = clientEmail
        self.tokenURI = tokenURI
        self.privateKey = privateKey
    }

    /// From the file's bytes: `project_id`, `client_email`, `private_key` (PKCS#8 PEM) and
    /// `token_uri` are required; the rest of the file is ignored.
    public init(json: [UInt8]) throws(FCMServiceAccountError) {
        guard let document = JSONValue.parse(json), case .object = document else { throw .notJSON }
        func field(_ name: String) throws(FCMServiceAccountError) -> String {
            guard let value = document[name]?.stringValue, !value.isEmpty else { throw .missingField(name) }
            return value
        }
        let projectId = try field("project_id")
        let clientEmail = try field("client_email")
        let pem = try field("private_key")
        let tokenURI = try field("token_uri")
        let key: RS256PrivateKey
        do { key = try RS256PrivateKey(pem: pem) } catch { throw .unreadablePrivateKey(String(describing: error)) }
        self.init(projectId: projectId, clientEmail: clientEmail, tokenURI: tokenURI, privateKey: key)
    }

    /// The signed grant assertion: `{"alg":"RS256","typ":"JWT"}` and
    /// `{"iss":client_email,"scope":…,"aud":token_uri,"iat":…,"exp":iat+3600}`.
    public func assertion(issuedAt: Date) throws -> String {
        let iat = CompactJWS.unixSeconds(issuedAt)
        var claims: [UInt8] = []
        claims.appendRaw(#"{"iss":"#)
        claims.appendJSON(clientEmail)
        claims.appendRaw(#","scope":"#)
        claims.appendJSON(Self.scope)
        claims.appendRaw(#","aud":"#)
        claims.appendJSON(tokenURI)
        claims.appendRaw(#","iat":"#)
        claims.append(contentsOf: String(iat).utf8)
        claims.appendRaw(#","exp":"#)
        claims.append(contentsOf: String(iat + Self.assertionLifetime).utf8)
        claims.appendRaw("}")
        return try CompactJWS.sign(header: Array(#"{"alg":"RS256","typ":"JWT"}"#.utf8), claims: claims) { try privateKey.sign($0) }
    }
}

/// An FCM access token and how long Google said it lasts.
public struct FCMAccessToken: Sendable, Hashable {
    public var accessToken: String
    public var expiresIn: Duration

    public init(accessToken: String, expiresIn: Duration) {
        self.accessToken = accessToken
        self.expiresIn = expiresIn
    }
}

/// Why the token endpoint's answer gave no access token.
public struct FCMTokenError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Google's `error` (`invalid_grant`, …) or what was missing.
    public var code: String
    public var detail: String

    public init(code: String, detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { detail.isEmpty ? code : code + ": " + detail }
}

/// The exchange at the service account's `token_uri`: a form `POST` with the assertion, and a JSON
/// answer with `access_token` and `expires_in`.
public enum FCMTokenExchange {
    public static let contentType = "application/x-www-form-urlencoded"

    /// The form body. The assertion is base64url and dots, which a form carries as they are.
    public static func requestBody(assertion: String) -> [UInt8] {
        Array(("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion).utf8)
    }

    /// The access token in the endpoint's answer, or why there is none.
    public static func parseAnswer(_ body: [UInt8]) throws(FCMTokenError) -> FCMAccessToken {
        guard let document = JSONValue.parse(body) else { throw FCMTokenError(code: "not_json", detail: "") }
        if let error = document["error"]?.stringValue {
            throw FCMTokenError(code: error, detail: document["error_description"]?.stringValue ?? "")
        }
        guard let token = document["access_token"]?.stringValue, !token.isEmpty else {
            throw FCMTokenError(code: "missing_access_token", detail: "the answer has no access_token")
        }
        guard case .integer(let seconds)? = document["expires_in"], seconds > 0 else {
            throw FCMTokenError(code: "missing_expires_in", detail: "the answer has no positive whole expires_in")
        }
        return FCMAccessToken(accessToken: token, expiresIn: .seconds(seconds))
    }
}

/// When to sign or fetch a new provider token. Pure: the times are passed in.
public enum ProviderTokenPolicy {
    /// APNs: one token per key, reused until about 50 minutes old (Apple refuses one past an
    /// hour), and never renewed less than 20 minutes after the last (Apple answers
    /// `TooManyProviderTokenUpdates`) — not even after `ExpiredProviderToken`, which then waits.
    public struct APNs: Sendable, Hashable {
        public var reuseFor: Duration
        public var minimumInterval: Duration

        public init(reuseFor: Duration = .seconds(50 * 60), minimumInterval: Duration = .seconds(20 * 60)) {
            self.reuseFor = reuseFor
            self.minimumInterval = minimumInterval
        }

        public enum Decision: Sendable, Hashable {
            /// Keep sending with the current token.
            case reuse
            /// Sign a new one now.
            case renew
            /// A renewal was asked for too soon after the last: not before `until`.
            case refused(until: Date)
        }

        /// What to do with the token issued at `issuedAt` (nil: none yet) at `now`; `rejected`
        /// when APNs just answered `ExpiredProviderToken` for it. A token issued in the future (the
        /// wall clock stepped back) is renewed: Apple would refuse it.
        public func decide(issuedAt: Date?, now: Date, rejected: Bool = false) -> Decision {
            guard let issuedAt else { return .renew }
            let age = Duration.seconds(now.timeIntervalSince(issuedAt))
            if age < .zero { return .renew }
            if age >= reuseFor { return .renew }
            guard rejected else { return .reuse }
            if age >= minimumInterval { return .renew }
            return .refused(until: issuedAt.addingTimeInterval(Double(minimumInterval.components.seconds)))
        }
    }

    /// FCM: an access token is kept until `refreshBefore` (5 minutes) before it expires, so no push
    /// goes out with one that dies on the way; after `UNAUTHENTICATED` it is fetched again at once.
    public struct FCM: Sendable, Hashable {
        public var refreshBefore: Duration

        public init(refreshBefore: Duration = .seconds(5 * 60)) { self.refreshBefore = refreshBefore }

        /// When a token obtained at `obtainedAt` should be replaced.
        public func refreshAt(_ token: FCMAccessToken, obtainedAt: Date) -> Date {
            let keep = max(token.expiresIn - refreshBefore, .zero)
            return obtainedAt.addingTimeInterval(Double(keep.components.seconds))
        }

        /// Whether to fetch a new token at `now` (nil: none yet; `rejected`: FCM said
        /// `UNAUTHENTICATED`).
        public func needsRefresh(_ token: FCMAccessToken?, obtainedAt: Date, now: Date, rejected: Bool = false) -> Bool {
            guard let token, !rejected else { return true }
            return now >= refreshAt(token, obtainedAt: obtainedAt) || now < obtainedAt
        }
    }
}
