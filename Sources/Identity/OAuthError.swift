import HTTPServer
import InboxAPI
import InboxDomain

/// An answer of the token endpoint that is not a token: RFC 6749 §5.2's shape (`error`,
/// `error_description`) plus the members the app guide adds to some (`challenge`,
/// `attempts_remaining`, `contact_url`). Never a JSON:API document: `/oauth/token` is OAuth's.
public struct OAuthError: Error, Sendable {
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        // RFC 6749 §5.2.
        public static let invalidRequest = Code("invalid_request")
        public static let invalidClient = Code("invalid_client")
        public static let invalidGrant = Code("invalid_grant")
        public static let unsupportedGrantType = Code("unsupported_grant_type")
        /// RFC 7009 §2.2.1: a token of a type this server does not revoke.
        public static let unsupportedTokenType = Code("unsupported_token_type")
        public static let invalidScope = Code("invalid_scope")
        // RFC 6749 §4.1.2.1, used beyond the authorization endpoint by most servers.
        public static let serverError = Code("server_error")
        public static let temporarilyUnavailable = Code("temporarily_unavailable")
        // The app guide's.
        public static let mfaRequired = Code("mfa_required")
        public static let invalidOTP = Code("invalid_otp")
        public static let accountBlocked = Code("account_blocked")
        public static let tooManyRequests = Code("too_many_requests")
        public static let appUpdateRequired = Code("app_update_required")
    }

    public var status: Int
    public var code: Code
    public var description: String?
    /// Members besides `error` and `error_description`.
    public var members: [String: JSONValue]
    public var headers: [(name: String, value: String)]
    /// What caused it, for the request's log line only.
    public var cause: String?

    public init(
        _ status: Int, _ code: Code, _ description: String? = nil, members: [String: JSONValue] = [:], headers: [(name: String, value: String)] = [],
        cause: String? = nil
    ) {
        self.status = status
        self.code = code
        self.description = description
        self.members = members
        self.headers = headers
        self.cause = cause
    }

    public static func invalidRequest(_ description: String) -> OAuthError { OAuthError(400, .invalidRequest, description) }

    /// The one answer to every credential that does not sign anybody in: the same bytes for a wrong
    /// password, an unknown address, a blocked account with a wrong password, an expired challenge.
    public static let wrongCredentials = OAuthError(400, .invalidGrant, "The email address or the password is not right.")
    /// A refresh token, challenge or handoff that is unknown, used, expired or of a session that is over.
    public static func invalidGrant(_ description: String) -> OAuthError { OAuthError(400, .invalidGrant, description) }

    public static func tooManyRequests(retryAfter seconds: Int) -> OAuthError {
        OAuthError(
            429, .tooManyRequests, "Too many attempts; try again in \(seconds) s.", members: [:], headers: [("Retry-After", String(seconds))])
    }

    /// `403 account_blocked` in the language of `Accept-Language`, with where to turn.
    public static func accountBlocked(language: Language, contactURL: String) -> OAuthError {
        OAuthError(
            403, .accountBlocked, IdentityTexts.accountBlocked(language), members: ["contact_url": .string(contactURL)],
            headers: [("Content-Language", language.rawValue)])
    }

    /// The JSON object of the answer.
    public var document: JSONValue {
        var object = members
        object["error"] = .string(code.rawValue)
        if let description { object["error_description"] = .string(description) }
        return .object(object)
    }

    /// RFC 6749 §5.1 and §5.2: JSON, never cached.
    public var response: HTTPResponse {
        HTTPResponse(status: status, headers: OAuthResponse.headers + headers, body: JSONAPI.bytes(document))
    }
}

/// What every answer of the token endpoint carries.
public enum OAuthResponse {
    public static let headers: [(name: String, value: String)] = [
        ("Content-Type", "application/json;charset=UTF-8"), ("Cache-Control", "no-store"), ("Pragma", "no-cache"),
    ]

    public static func json(_ status: Int = 200, _ value: JSONValue, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, headers: Self.headers + headers, body: JSONAPI.bytes(value))
    }
}

/// The texts a person reads from the identity role, in each of the tier's languages.
public enum IdentityTexts {
    public static func accountBlocked(_ language: Language) -> String {
        switch language {
        case .en: "Your account has been blocked by Wristler. Please contact us if you believe this is a mistake."
        case .nl: "Je account is geblokkeerd door Wristler. Neem contact met ons op als je denkt dat dit een vergissing is."
        case .de: "Dein Konto wurde von Wristler gesperrt. Bitte kontaktiere uns, wenn du glaubst, dass es sich um einen Fehler handelt."
        case .fr: "Votre compte a été bloqué par Wristler. Veuillez nous contacter si vous pensez qu'il s'agit d'une erreur."
        }
    }
}
