import Crypto
import Foundation
import Identity
import PasswordHashing

/// The identity role's settings (docs/identity.md): who may ask for tokens and for what, what a
/// password costs to hash, the sign-in's limits, and Apple and Google.
extension InboxConfiguration {
    static let identitySettings: [Setting] = [
        identity(
            "INBOX_IDENTITY_KEYS_DIR", "--identity-keys-dir", default: "(unset: <INBOX_DATA_DIR>/identity-keys)",
            meaning: "folder of the ES256 keys access tokens are signed with, <kid>.pem each (made with one key when empty); every one is published at /.well-known/jwks.json"
        ) { _ in },
        identity(
            "INBOX_SECRETS_KEY_FILE", "--secrets-key-file", default: "(unset: keys in INBOX_IDENTITY_KEYS_DIR)",
            meaning: "file of the key (32 random bytes, raw, hex or base64) that seals the signing keys kept in PostgreSQL, shared by every node; the same file on every node (docs/identity.md)"
        ) { path in _ = try SecretsKey.load(path: path) },
        identity(
            "INBOX_IDENTITY_SIGNING_KID", "--identity-signing-kid", default: "(unset: the folder's only key)",
            meaning: "the kid of the key that signs, required when the folder holds several (rotation: docs/identity.md)"
        ) { kid in
            guard (1...100).contains(kid.utf8.count), kid.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "/") }) else {
                throw Invalid(description: "INBOX_IDENTITY_SIGNING_KID (--identity-signing-kid) must be a key's file name without .pem, not \"\(kid)\".")
            }
        },
        identity(
            "INBOX_IDENTITY_CLIENTS", "--identity-clients", default: "wristler-app=<the app's scopes>",
            meaning: "the token endpoint's clients and the scopes each may ask for: id=scope scope ...;id=scope ... (others: invalid_scope)"
        ) { text in
            do { _ = try OAuthClients.parse(text) } catch { throw Invalid(description: "INBOX_IDENTITY_CLIENTS (--identity-clients): \(error)") }
        },
        identityNumber(
            "INBOX_PASSWORD_HASH_MEMORY_KIB", "--password-hash-memory-kib", 1024...4_194_304, default: Int(Argon2Cost.owasp.memoryKiB),
            meaning: "memory of one Argon2id password hash, in KiB (OWASP's 19456; RFC 9106's 65536); existing hashes are redone at their next sign-in (1024-4194304)"),
        identityNumber(
            "INBOX_PASSWORD_HASH_ITERATIONS", "--password-hash-iterations", 1...100, default: Int(Argon2Cost.owasp.iterations),
            meaning: "passes of one Argon2id password hash over its memory (1-100)"),
        identityNumber(
            "INBOX_PASSWORD_HASH_CONCURRENCY", "--password-hash-concurrency", 1...256, default: ProcessInfo.processInfo.activeProcessorCount,
            meaning: "password hashes at once (memory: this times the hash's); more sign-ins wait, up to 10 s, then 503 (1-256; default: the cores)"),
        identity(
            "INBOX_IDENTITY_CONTACT_URL", "--identity-contact-url", default: "https://wristler.eu/contact",
            meaning: "where a blocked person is sent (contact_url of account_blocked)"
        ) { try requireURL($0, "INBOX_IDENTITY_CONTACT_URL", "--identity-contact-url") },
        identityLimit(
            "INBOX_SIGN_IN_ADDRESS_LIMIT", "--sign-in-address-limit", default: "30/300",
            meaning: "sign-in attempts (password, code, Apple and Google) per client address: N/SECONDS, N at once refilled N per SECONDS; past it 429 with Retry-After"),
        identityLimit(
            "INBOX_SIGN_IN_ACCOUNT_LIMIT", "--sign-in-account-limit", default: "10/300",
            meaning: "password and code attempts per account (the address typed, whether it has an account or not): N/SECONDS"),
        identityLimit(
            "INBOX_GUEST_ADDRESS_LIMIT", "--guest-address-limit", default: "60/3600", meaning: "guest tokens per client address: N/SECONDS"),
        identityLimit(
            "INBOX_REFRESH_ADDRESS_LIMIT", "--refresh-address-limit", default: "600/60", meaning: "refreshes per client address: N/SECONDS"),
        identity(
            "INBOX_TRUSTED_PROXIES", "--trusted-proxies", default: "(unset: the connection's address)",
            meaning: "IPv4 addresses of the proxies in front, comma-separated: a sign-in from one is counted against the rightmost other address of X-Forwarded-For"
        ) { text in
            for address in text.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
                var parsed = in_addr()
                guard inet_pton(AF_INET, address, &parsed) == 1 else {
                    throw Invalid(description: "INBOX_TRUSTED_PROXIES (--trusted-proxies) must be IPv4 addresses separated by commas, not \"\(address)\".")
                }
            }
        },
        identity(
            "INBOX_APPLE_CLIENT_IDS", "--apple-client-ids", default: "(unset: no Sign in with Apple)",
            meaning: "our client ids at Apple, comma-separated: the app's bundle id and the Services ID of the web flow (an ID token's aud)"
        ) { _ in },
        identity("INBOX_APPLE_KEYS_URL", "--apple-keys-url", default: "https://appleid.apple.com/auth/keys", meaning: "Apple's JWKS of ID-token keys") {
            try requireURL($0, "INBOX_APPLE_KEYS_URL", "--apple-keys-url")
        },
        identity(
            "INBOX_APPLE_RETURN_URL", "--apple-return-url", default: "(unset: no /oauth/apple/return)",
            meaning: "the app's App Link that /oauth/apple/return sends the browser to, with handoff and state"
        ) { try requireURL($0, "INBOX_APPLE_RETURN_URL", "--apple-return-url") },
        identity(
            "INBOX_APPLE_TEAM_ID", "--apple-team-id", default: "(unset: Apple's codes are not exchanged)",
            meaning: "the team id of the Sign in with Apple key (with INBOX_APPLE_KEY_ID and INBOX_APPLE_KEY_FILE)"
        ) { _ in },
        identity("INBOX_APPLE_KEY_ID", "--apple-key-id", default: "(unset)", meaning: "the Sign in with Apple key's id") { _ in },
        identity(
            "INBOX_APPLE_KEY_FILE", "--apple-key-file", default: "(unset)",
            meaning: "the Sign in with Apple key (.p8) that signs the client secret exchanging authorization codes for Apple's refresh tokens"
        ) { _ in },
        identity("INBOX_APPLE_TOKEN_URL", "--apple-token-url", default: "https://appleid.apple.com/auth/token", meaning: "Apple's token endpoint") {
            try requireURL($0, "INBOX_APPLE_TOKEN_URL", "--apple-token-url")
        },
        identity(
            "INBOX_APPLE_REVOKE_URL", "--apple-revoke-url", default: "https://appleid.apple.com/auth/revoke",
            meaning: "Apple's revoke endpoint: a closed account's Apple refresh tokens are revoked there"
        ) {
            try requireURL($0, "INBOX_APPLE_REVOKE_URL", "--apple-revoke-url")
        },
        identity(
            "INBOX_GOOGLE_CLIENT_IDS", "--google-client-ids", default: "(unset: no Sign in with Google)",
            meaning: "our OAuth client ids at Google, comma-separated (iOS, Android, web): an ID token's aud"
        ) { _ in },
        identity(
            "INBOX_GOOGLE_KEYS_URL", "--google-keys-url", default: "https://www.googleapis.com/oauth2/v3/certs", meaning: "Google's JWKS of ID-token keys"
        ) { try requireURL($0, "INBOX_GOOGLE_KEYS_URL", "--google-keys-url") },
    ]

    private static func identity(
        _ variable: String, _ flag: String, default defaultValue: String, meaning: String, check: @escaping @Sendable (String) throws -> Void
    ) -> Setting {
        Setting(variable: variable, flag: flag, defaultValue: defaultValue, meaning: meaning) { configuration, text in
            try check(text)
            configuration.identityValues[variable] = text
        }
    }

    private static func identityNumber(_ variable: String, _ flag: String, _ range: ClosedRange<Int>, default defaultValue: Int, meaning: String) -> Setting {
        identity(variable, flag, default: String(defaultValue), meaning: meaning) { text in
            guard let number = Int(text), range.contains(number) else {
                throw Invalid(description: "\(variable) (\(flag)) must be a whole number from \(range.lowerBound) to \(range.upperBound), not \"\(text)\".")
            }
        }
    }

    private static func identityLimit(_ variable: String, _ flag: String, default defaultValue: String, meaning: String) -> Setting {
        identity(variable, flag, default: defaultValue, meaning: meaning) { text in
            guard AttemptLimit(text: text) != nil else {
                throw Invalid(description: "\(variable) (\(flag)) must be N/SECONDS, such as 30/300 (N from 1, SECONDS from 1 to 604800), not \"\(text)\".")
            }
        }
    }

    private static func requireURL(_ text: String, _ variable: String, _ flag: String) throws {
        guard let components = URLComponents(string: text), ["http", "https"].contains(components.scheme ?? ""), components.host?.isEmpty == false else {
            throw Invalid(description: "\(variable) (\(flag)) must be an http:// or https:// URL with a host, not \"\(text)\".")
        }
    }

    /// The identity keys' folder in use.
    var identityKeysDirectory: String {
        identityValues["INBOX_IDENTITY_KEYS_DIR"] ?? (dataDirectory as NSString).appendingPathComponent("identity-keys")
    }

    var identitySigningKid: String? { identityValues["INBOX_IDENTITY_SIGNING_KID"] }

    /// The key-encryption key of `INBOX_SECRETS_KEY_FILE`; nil without it.
    func secretsKey() throws -> SecretsKey? {
        guard let path = identityValues["INBOX_SECRETS_KEY_FILE"] else { return nil }
        do {
            return try SecretsKey.load(path: path)
        } catch {
            throw Invalid(description: "INBOX_SECRETS_KEY_FILE (--secrets-key-file): \(error)")
        }
    }

    /// The identity settings as one value. Throws a sentence naming a setting that is missing its
    /// companions (an Apple key without its team id) or a file that cannot be read.
    func identityConfiguration() throws -> IdentityConfiguration {
        var identity = IdentityConfiguration()
        let values = identityValues
        if let clients = values["INBOX_IDENTITY_CLIENTS"] { identity.clients = try OAuthClients.parse(clients) }
        identity.passwordCost = Argon2Cost(
            memoryKiB: UInt32(values["INBOX_PASSWORD_HASH_MEMORY_KIB"].flatMap { Int($0) } ?? Int(Argon2Cost.owasp.memoryKiB)),
            iterations: UInt32(values["INBOX_PASSWORD_HASH_ITERATIONS"].flatMap { Int($0) } ?? Int(Argon2Cost.owasp.iterations)))
        if let concurrency = values["INBOX_PASSWORD_HASH_CONCURRENCY"].flatMap({ Int($0) }) { identity.hashConcurrency = concurrency }
        if let url = values["INBOX_IDENTITY_CONTACT_URL"] { identity.contactURL = url }
        if let limit = values["INBOX_SIGN_IN_ADDRESS_LIMIT"].flatMap({ AttemptLimit(text: $0) }) { identity.signInPerAddress = limit }
        if let limit = values["INBOX_SIGN_IN_ACCOUNT_LIMIT"].flatMap({ AttemptLimit(text: $0) }) { identity.signInPerAccount = limit }
        if let limit = values["INBOX_GUEST_ADDRESS_LIMIT"].flatMap({ AttemptLimit(text: $0) }) { identity.guestPerAddress = limit }
        if let limit = values["INBOX_REFRESH_ADDRESS_LIMIT"].flatMap({ AttemptLimit(text: $0) }) { identity.refreshPerAddress = limit }
        identity.trustedProxies = Set((values["INBOX_TRUSTED_PROXIES"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) })
        identity.issuer = publicURL
        identity.audience = tokenAudience
        identity.caFile = pushCAFile
        func list(_ variable: String) -> Set<String> {
            Set((values[variable] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty })
        }
        let appleIds = list("INBOX_APPLE_CLIENT_IDS")
        if !appleIds.isEmpty {
            identity.apple = .apple(audiences: appleIds, keysURL: values["INBOX_APPLE_KEYS_URL"] ?? "https://appleid.apple.com/auth/keys")
        }
        let googleIds = list("INBOX_GOOGLE_CLIENT_IDS")
        if !googleIds.isEmpty {
            identity.google = .google(audiences: googleIds, keysURL: values["INBOX_GOOGLE_KEYS_URL"] ?? "https://www.googleapis.com/oauth2/v3/certs")
        }
        identity.appleReturnURL = values["INBOX_APPLE_RETURN_URL"]
        if identity.appleReturnURL != nil && identity.apple == nil {
            throw Invalid(description: "INBOX_APPLE_RETURN_URL needs INBOX_APPLE_CLIENT_IDS (the Services ID of the web flow among them).")
        }
        let appleKey = [values["INBOX_APPLE_TEAM_ID"], values["INBOX_APPLE_KEY_ID"], values["INBOX_APPLE_KEY_FILE"]]
        if appleKey.contains(where: { $0 != nil }) {
            guard let team = appleKey[0], let kid = appleKey[1], let file = appleKey[2] else {
                throw Invalid(description: "INBOX_APPLE_TEAM_ID, INBOX_APPLE_KEY_ID and INBOX_APPLE_KEY_FILE go together: set all three or none.")
            }
            let pem: String
            do { pem = try String(contentsOfFile: file, encoding: .utf8) } catch {
                throw Invalid(description: "INBOX_APPLE_KEY_FILE (--apple-key-file): cannot read \(file): \(error.localizedDescription)")
            }
            identity.appleCodeExchange = AppleCodeExchange(
                tokenURL: values["INBOX_APPLE_TOKEN_URL"] ?? "https://appleid.apple.com/auth/token",
                revokeURL: values["INBOX_APPLE_REVOKE_URL"] ?? "https://appleid.apple.com/auth/revoke", teamId: team, keyId: kid, keyPEM: pem,
                redirectURI: publicURL.map { $0 + "/oauth/apple/return" })
        }
        return identity
    }
}
