import Crypto
import EventLog
import Foundation
import InboxAPI
import Lifecycle
import PostgresClient

/// The identity role put together: its keys, the token endpoint, the account administration, the
/// routes and the housekeeping service. `inbox identity` serves the routes on a server of its own;
/// `inbox run` beside the API's, whose verifier then knows `keys` with no setting.
public struct IdentityRole: Sendable {
    public let keys: SigningKeys
    public let endpoint: TokenEndpoint
    public let administration: AccountAdministration
    public let routes: [Route]
    public let maintenance: IdentityMaintenance
    /// Revokes closed accounts' Apple refresh tokens; nil without the Sign in with Apple key.
    public let appleRevocations: AppleRevocations?
    /// Reads PostgreSQL's signing keys again now and then; nil for a folder's.
    public let keysReload: SigningKeysReload?

    /// `keysDirectory` and `signingKid`: `SigningKeys.load`; with `secrets` (every node's
    /// key-encryption key) the keys are PostgreSQL's instead, shared by every node. `client`: a
    /// pool of the request threads' (blocking) connections. `gate`: the app's minimum versions (426).
    public static func make(
        configuration: IdentityConfiguration, keysDirectory: String, signingKid: String?, secrets: SecretsKey? = nil, client: PostgresClient,
        gate: AppVersionGate?, validator: EventValidator?, log: Logger, now: @escaping @Sendable () -> Date = { Date() }
    ) throws -> IdentityRole {
        var configuration = configuration
        if let secrets { configuration.secrets = secrets }
        let secrets = configuration.secrets
        let (keys, created) =
            try secrets.map { try SigningKeys.load(client: client, secrets: $0, now: now()) }
            ?? SigningKeys.load(directory: keysDirectory, signingKid: signingKid, now: now())
        if let secrets {
            let sealed = try Accounts.sealPlainSecondFactors(client: client, secrets: secrets)
            if sealed > 0 { log.info("sealed the second factors written in the clear", metadata: ["accounts": .int(sealed)]) }
        }
        if let created {
            log.info(
                "made the identity role's first signing key",
                metadata: ["kid": .string(created), "kept in": .string(secrets == nil ? keysDirectory : "identity_signing_keys, sealed")])
        }
        log.info("signing access tokens", metadata: ["kid": .string(keys.signingKid), "published": .string(keys.publicKeys.keys.sorted().joined(separator: ","))])
        let hasher = try PasswordHasher(cost: configuration.passwordCost, concurrency: configuration.hashConcurrency)
        let providers = [configuration.apple, configuration.google].compactMap { $0 }
        let social = providers.isEmpty ? nil : try SocialTokenVerifier(providers: providers, caFile: configuration.caFile)
        let appleCodes = try configuration.appleCodeExchange.map {
            try AppleCodeExchanger(configuration: $0, client: client, caFile: configuration.caFile, log: log)
        }
        let endpoint = TokenEndpoint(
            configuration: configuration, client: client, keys: keys, hasher: hasher, social: social, appleCodes: appleCodes, gate: gate,
            validator: validator, log: log, now: now)
        let administration = AccountAdministration(client: client, hasher: hasher, validator: validator, secrets: secrets, now: now)
        return IdentityRole(
            keys: keys, endpoint: endpoint, administration: administration,
            routes: try IdentityRoutes.routes(endpoint: endpoint, keys: keys, administration: administration),
            maintenance: IdentityMaintenance(client: client, log: log, now: now),
            appleRevocations: appleCodes.map { AppleRevocations(exchanger: $0, log: log) },
            keysReload: keys.reloads ? SigningKeysReload(keys: keys, log: log) : nil)
    }
}
