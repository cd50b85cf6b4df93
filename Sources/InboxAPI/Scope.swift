/// A scope of an access token (the app guide's Scopes): what the token's holder may do. Extensible:
/// the identity tier may grant scopes this tier has no name for; they are kept and simply match
/// no route.
public struct Scope: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }

    public static let accountRead = Scope("account:read")
    public static let accountWrite = Scope("account:write")
    public static let accountSecurityWrite = Scope("account-security:write")
    public static let checkoutWrite = Scope("checkout:write")
    public static let catalogueRead = Scope("catalogue:read")
    public static let contentRead = Scope("content:read")
    public static let messagesRead = Scope("messages:read")
    public static let messagesWrite = Scope("messages:write")
    public static let uploadsWrite = Scope("uploads:write")

    /// What the app asks for when a person signs in (app guide, section 6).
    public static let app: [Scope] = [
        .accountRead, .accountWrite, .accountSecurityWrite, .checkoutWrite, .catalogueRead, .contentRead, .messagesRead, .messagesWrite,
        .uploadsWrite,
    ]
    /// What a guest token carries.
    public static let guest: [Scope] = [.catalogueRead, .contentRead]
}
