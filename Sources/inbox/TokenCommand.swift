import Crypto
import Foundation
import Identity
import InboxAPI
import Lifecycle

/// The development signing key: `<INBOX_DATA_DIR>/dev-token-key.pem`, made on first use. `inbox
/// token` signs with it, and `inbox serve` verifies with it when `INBOX_TOKEN_KEYS` is not set.
enum DevelopmentKey {
    static let kid = "dev"

    static func load(dataDirectory: String) throws -> ES256PrivateKey {
        let path = URL(fileURLWithPath: dataDirectory).appendingPathComponent("dev-token-key.pem").path
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        // Made once under the folder's lock, so that `inbox run` and `inbox token` started at once
        // sign and verify with the same key.
        return try FileLock.exclusive(path + ".lock") {
            if FileManager.default.fileExists(atPath: path) {
                return try ES256PrivateKey(pem: String(contentsOfFile: path, encoding: .utf8))
            }
            let key = try ES256PrivateKey.generate()
            guard FileManager.default.createFile(atPath: path, contents: Data(key.pem.utf8), attributes: [.posixPermissions: 0o600]) else {
                throw CryptoError("Cannot write the development key to \(path).")
            }
            return key
        }
    }

    /// The verifier `serve` uses: the identity tier's keys (`INBOX_TOKEN_KEYS`), or the development
    /// key; and, in either case, `identityKeys`, the keys of the identity role running in the
    /// same process (`inbox run`), so that its tokens verify with no setting.
    /// The identity role's keys are asked at each verification, not copied: it reads PostgreSQL's
    /// again as they rotate.
    static func verifier(_ configuration: InboxConfiguration, log: Logger, identityKeys: SigningKeys? = nil) throws -> TokenVerifier {
        var moreKeys: (@Sendable (String) -> ES256PublicKey?)?
        if let identityKeys {
            moreKeys = { kid in identityKeys.publicKeys[kid] }
        }
        if let identityKeys {
            log.info("verifying the identity role's access tokens", metadata: ["kids": .string(identityKeys.publicKeys.keys.sorted().joined(separator: ","))])
        }
        if let path = configuration.tokenKeysPath {
            let keys = try TokenKeys.load(path: path)
            log.info("verifying access tokens with the identity tier's keys", metadata: ["path": .string(path), "kids": .string(keys.keys.keys.sorted().joined(separator: ","))])
            return TokenVerifier(keys: keys, expecting: try configuration.tokenExpectations(), moreKeys: moreKeys)
        }
        let key = try load(dataDirectory: configuration.dataDirectory)
        log.info("verifying access tokens with the development key (set INBOX_TOKEN_KEYS in production)", metadata: [
            "path": .string(configuration.dataDirectory + "/dev-token-key.pem"),
        ])
        return TokenVerifier(keys: TokenKeys(keys: [kid: try key.publicKey]), expecting: try configuration.tokenExpectations(), moreKeys: moreKeys)
    }
}

/// `inbox token`: mints an access token with the development key, for local use and tests.
enum TokenCommand {
    static func run(_ arguments: [String], configuration: InboxConfiguration) throws {
        var person: String?
        var scopes: [Scope] = []
        var guest = false
        var lifetime: TimeInterval = 3600
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            func value() throws -> String {
                guard index + 1 < arguments.count else { throw UsageError(description: "\(argument) needs a value.") }
                index += 1
                return arguments[index]
            }
            switch argument {
            case "--person": person = try value()
            case "--scope": scopes += try value().split(separator: " ").map { Scope(String($0)) }
            case "--guest": guest = true
            case "--ttl":
                let text = try value()
                guard let seconds = TimeInterval(text), seconds >= 1, seconds <= 86_400 * 90 else {
                    throw UsageError(description: "--ttl must be a number of seconds from 1 to 7776000, not \"\(text)\".")
                }
                lifetime = seconds
            default:
                throw UsageError(description: "inbox token has no argument \"\(argument)\"; it takes --person ID, --scope \"S ...\", --guest and --ttl SECONDS.")
            }
            index += 1
        }
        if guest && person != nil { throw UsageError(description: "a guest token belongs to nobody: leave out --person.") }
        if !guest && (person ?? "").isEmpty { throw UsageError(description: "inbox token needs --person ID (or --guest).") }
        let key = try DevelopmentKey.load(dataDirectory: configuration.dataDirectory)
        let token = try TokenSigner(key: key, kid: DevelopmentKey.kid).mint(
            subject: person ?? "", scopes: scopes.isEmpty ? (guest ? Scope.guest : Scope.app) : scopes, guest: guest, lifetime: lifetime,
            audience: configuration.tokenAudience, issuer: configuration.tokenIssuer ?? configuration.publicURL)
        print(token)
    }
}
