import Crypto
import EventLog
import Foundation
import HTTPServer
import Identity
import InboxAPI
import InboxDomain
import Lifecycle
import PostgresClient
import Uploads

extension InboxConfiguration {
    /// The identity settings and the key-encryption key, or the usage error that names what is wrong.
    func identitySetup() throws -> (settings: IdentityConfiguration, secrets: SecretsKey?) {
        do {
            return (try identityConfiguration(), try secretsKey())
        } catch let error as InboxConfiguration.Invalid {
            throw UsageError(description: error.description)
        }
    }
}

extension Roles {
    /// The identity role on `client` (a pool of request connections): its keys from
    /// `INBOX_IDENTITY_KEYS_DIR`, its settings, the catalogue's validator for the events it appends.
    static func identity(
        database: Database, client: PostgresClient, gate: AppVersionGate, configuration: InboxConfiguration, log: Logger
    ) throws -> IdentityRole {
        let (settings, secrets) = try configuration.identitySetup()
        return try IdentityRole.make(
            configuration: settings, keysDirectory: configuration.identityKeysDirectory, signingKid: configuration.identitySigningKid, secrets: secrets,
            client: client,
            gate: gate, validator: database.store.validator, log: log.with(["role": "identity"]))
    }

    /// `inbox identity`: the identity role alone, on a server of its own at INBOX_HTTP_HOST:PORT,
    /// with `/healthz` and `/readyz` for its load balancer.
    static func identityServer(database: Database, configuration: InboxConfiguration, log: Logger) async throws -> (members: [ServiceGroup.Member], pool: PostgresClient) {
        let requestClient = try InboxRoutes.requestPool(connection: database.client.configuration.connection, size: configuration.poolSize)
        do {
            let services: ServiceCredentials
            do {
                services = try configuration.serviceCredentials.map(ServiceCredentials.parse) ?? ServiceCredentials()
            } catch {
                throw UsageError(description: "INBOX_SERVICE_CREDENTIALS (--service-credentials): \(error)")
            }
            let identity = try identity(database: database, client: requestClient, gate: AppVersionGate(client: requestClient), configuration: configuration, log: log)
            let metrics = RequestMetrics()
            let logRequest = requestLogLines(to: log)
            let served = identity.routes + OperationsRoutes.routes(client: requestClient, migrator: database.migrator)
            let api = APIServer(
                routes: served + [OpenAPI.route(describing: served)], gate: nil, services: services,
                metrics: metrics, log: logRequest)
            return (
                (identity.keysReload.map { [ServiceGroup.Member("the signing keys' reading", $0, shutdownDeadline: .seconds(5))] } ?? [])
                    + (identity.appleRevocations.map { [ServiceGroup.Member("the Apple revocations", $0, shutdownDeadline: .seconds(20))] } ?? []) + [
                    ServiceGroup.Member("the identity role's housekeeping", identity.maintenance, shutdownDeadline: .seconds(5)),
                    ServiceGroup.Member(
                        "the identity role",
                        APIService(
                            api: api, operations: nil, configuration: configuration, log: log, bodyLimits: IdentityRoutes.bodyLimits,
                            name: "the identity role"),
                        shutdownDeadline: .seconds(15)),
                ], requestClient
            )
        } catch {
            requestClient.close()
            throw error
        }
    }
}

extension Command {
    static let identity = Command(
        name: "identity", synopsis: "identity",
        summary: "Runs the identity role alone: POST /oauth/token (sign-in by password with a second factor, Apple and Google, guest tokens, "
            + "refreshes), /oauth/apple/return, /.well-known/jwks.json and /internal/v1/accounts on INBOX_HTTP_HOST:INBOX_HTTP_PORT, until "
            + "SIGTERM or SIGINT. `inbox run` includes it."
    ) { arguments, configuration, log in
        try expectNoArguments(arguments, command: "identity")
        try await withDatabase(configuration, log: log, migrate: true) { database in
            let (members, pool) = try await Roles.identityServer(database: database, configuration: configuration, log: log)
            defer { pool.close() }
            try await Roles.run(members, database: database, log: log)
        }
    }

    static let account = Command(
        name: "account",
        synopsis: "account create --email E [--given-name N] [--family-name N] [--verified] [--person-id ID] [--no-password] | "
            + "account show|verify|unblock --email E | account password --email E | account block --email E [--reason TEXT] | "
            + "account second-factor --email E on|off",
        summary: "Operator's changes to accounts, each with its security event. A password is read from the first line of standard input, "
            + "never from the arguments. `second-factor on` prints the otpauth:// URI and the ten recovery codes, once."
    ) { arguments, configuration, log in
        try await AccountCommand.run(arguments, configuration: configuration, log: log)
    }
}

extension Command {
    static let keys = Command(
        name: "keys",
        synopsis: "keys list | keys rotate [--overlap-seconds N]",
        summary: "The identity role's signing keys kept in PostgreSQL (with INBOX_SECRETS_KEY_FILE). `rotate` adds a key that signs after the "
            + "overlap (default 3600 s; every node reads the keys each minute, so each publishes it before any signs with it) and retires the "
            + "keys replaced more than an hour ago, when their last access tokens have expired."
    ) { arguments, configuration, log in
        try await KeysCommand.run(arguments, configuration: configuration, log: log)
    }
}

/// `inbox keys ...`.
enum KeysCommand {
    static func run(_ arguments: [String], configuration: InboxConfiguration, log: Logger) async throws {
        let secrets: SecretsKey
        do {
            guard let key = try configuration.secretsKey() else {
                throw UsageError(
                    description: "inbox keys works on the signing keys kept in PostgreSQL: set INBOX_SECRETS_KEY_FILE (docs/identity.md); "
                        + "the keys of INBOX_IDENTITY_KEYS_DIR are files.")
            }
            secrets = key
        } catch let error as InboxConfiguration.Invalid {
            throw UsageError(description: error.description)
        }
        var overlap: TimeInterval = 3600
        switch arguments.first {
        case "list" where arguments.count == 1: break
        case "rotate":
            var rest = Array(arguments.dropFirst())
            if rest.first == "--overlap-seconds" {
                guard rest.count >= 2, let seconds = Int(rest[1]), (0...604_800).contains(seconds) else {
                    throw UsageError(description: "--overlap-seconds needs a whole number of seconds from 0 to 604800 (more than 60: the nodes read the keys each minute).")
                }
                overlap = TimeInterval(seconds)
                rest.removeFirst(2)
            }
            guard rest.isEmpty else { throw UsageError(description: "inbox keys rotate takes only --overlap-seconds, not \(rest[0]).") }
        default:
            throw UsageError(description: "inbox keys needs list or rotate; `inbox keys --help` says more.")
        }
        let action = arguments[0]
        let overlapSeconds = overlap
        try await withDatabase(configuration, log: log, migrate: true) { database in
            let client = database.client
            try await BlockingThread.run {
                if action == "rotate" {
                    let (added, retired) = try SigningKeys.rotate(client: client, secrets: secrets, overlap: overlapSeconds, tokenLifetime: 3600 + 300)
                    print("added \(added), signing in \(Int(overlapSeconds)) s; every node reads it within a minute")
                    for kid in retired { print("retired \(kid)") }
                }
                let now = Date()
                let listed = try SigningKeys.list(client: client)
                let signing = listed.last { $0.retiredAt == nil && $0.signsFrom <= now }?.kid
                for key in listed {
                    let state = key.retiredAt.map { "retired \($0.formatted(.iso8601))" } ?? (key.kid == signing ? "signing" : key.signsFrom > now ? "published, signs from \(key.signsFrom.formatted(.iso8601))" : "published")
                    print("\(key.kid)  \(state)")
                }
            }
        }
    }
}

/// `inbox account ...`.
enum AccountCommand {
    static func run(_ arguments: [String], configuration: InboxConfiguration, log: Logger) async throws {
        guard let action = arguments.first else { throw UsageError(description: "inbox account needs an action; `inbox account --help` lists them.") }
        let options = try Options(arguments.dropFirst())
        guard let email = options.email else { throw UsageError(description: "inbox account \(action) needs --email.") }
        let (given, family, reason, personId, verified, rest) = (options.given, options.family, options.reason, options.personId, options.verified, options.rest)
        let noPassword = options.noPassword
        let (settings, secrets) = try configuration.identitySetup()
        let needsPassword = (action == "create" && !noPassword) || action == "password"
        let password = needsPassword ? try readPassword() : nil
        try await withDatabase(configuration, log: log, migrate: true) { database in
            let hasher = try PasswordHasher(cost: settings.passwordCost, concurrency: 1)
            let administration = AccountAdministration(
                client: database.client, hasher: hasher, validator: database.store.validator, secrets: secrets, service: "operator")
            try await BlockingThread.run {
                func existing() throws -> Account {
                    guard let account = try administration.find(email: email) else { throw UsageError(description: "there is no account with \(email).") }
                    return account
                }
                do {
                    switch (action, rest) {
                    case ("create", []):
                        let account = try administration.create(
                            email: email, password: password, givenName: given, familyName: family, emailVerified: verified, personId: personId, origin: "api")
                        print("created account \(account.personId) for \(account.email)")
                    case ("show", []):
                        let account = try existing()
                        print("person:        \(account.personId)")
                        print("email:         \(account.email) (\(account.emailVerified ? "verified" : "not verified"))")
                        print("name:          \(account.givenName) \(account.familyName)")
                        print("password:      \(account.passwordHash == nil ? "none" : "set")")
                        print("second factor: \(account.hasSecondFactor ? "on" : "off")")
                        print("blocked:       \(account.blockedAt.map { "since \($0)" } ?? "no")")
                    case ("verify", []): try administration.setEmailVerified(personId: try existing().personId, true)
                    case ("password", []): try administration.setPassword(personId: try existing().personId, password: password ?? "")
                    case ("block", []): try administration.block(personId: try existing().personId, reason: reason)
                    case ("unblock", []): try administration.unblock(personId: try existing().personId)
                    case ("second-factor", ["on"]):
                        let account = try existing()
                        let (totp, codes) = try administration.enableSecondFactor(personId: account.personId)
                        print(totp.uri(account: account.email))
                        for code in codes { print(code) }
                    case ("second-factor", ["off"]): try administration.disableSecondFactor(personId: try existing().personId)
                    default:
                        throw UsageError(description: "inbox account has no action \(([action] + rest).joined(separator: " ")); `inbox account --help` lists them.")
                    }
                } catch let error as AccountError {
                    throw UsageError(description: error.description)
                }
            }
        }
    }

    struct Options {
        var email: String?
        var given = "", family = ""
        var reason: String?, personId: String?
        var verified = false, noPassword = false
        var rest: [String] = []

        init(_ arguments: ArraySlice<String>) throws {
            var iterator = arguments.makeIterator()
            while let argument = iterator.next() {
                func value() throws -> String {
                    guard let value = iterator.next() else { throw UsageError(description: "\(argument) needs a value.") }
                    return value
                }
                switch argument {
                case "--email": email = try value()
                case "--given-name": given = try value()
                case "--family-name": family = try value()
                case "--reason": reason = try value()
                case "--person-id": personId = try value()
                case "--verified": verified = true
                case "--no-password": noPassword = true
                default:
                    guard !argument.hasPrefix("--") else { throw UsageError(description: "inbox account has no flag \(argument).") }
                    rest.append(argument)
                }
            }
        }
    }

    /// The first line of standard input, without its line break.
    static func readPassword() throws -> String {
        guard let line = readLine(strippingNewline: true), !line.isEmpty else {
            throw UsageError(description: "the password is read from the first line of standard input, which is empty.")
        }
        return line
    }
}

extension Command {
    static let erase = Command(
        name: "erase", synopsis: "erase --person ID",
        summary: "Erases a person (GDPR article 17): deletes their data key, so their message bodies, sign-in devices and places, "
            + "saved searches' names and blocks' reasons are unreadable in the log and every backup; closes their account, deletes their "
            + "devices, contact and waiting mails; appends person_erased and brings the read models in line (docs/event-log.md). Cannot be undone."
    ) { arguments, configuration, log in
        guard arguments.count == 2, arguments[0] == "--person", !arguments[1].isEmpty, arguments[1].utf8.count <= 200 else {
            throw UsageError(description: "inbox erase takes --person ID (the person's id, 1 to 200 bytes).")
        }
        let person = arguments[1]
        let (settings, _) = try configuration.identitySetup()
        try await withDatabase(configuration, log: log, migrate: true) { database in
            guard PersonalDataKeys.current != nil else {
                throw UsageError(
                    description: "Nothing is sealed without INBOX_PERSONAL_DATA_KEY_FILE: erasing would leave the person's fields readable in the log. "
                        + "Set it (docs/event-log.md, \"Personal data\").")
            }
            let validator = database.store.validator
            let outcome = try await database.client.withConnection { connection in
                try connection.transaction { connection in
                    try PersonErasure.erase(
                        person, metadata: EventMetadata(origin: .api, actor: "operator", service: "inbox"),
                        appleClientId: settings.apple?.audiences.sorted().first, validator: validator, on: connection)
                }
            }
            log.info("erased a person", metadata: ["person": .string(person), "key": outcome.deletedKey ? "deleted" : "none", "account": outcome.closedAccount ? "closed" : "none"])
            print(
                "erased \(person): "
                    + (outcome.deletedKey ? "their data key is deleted" : "no data key was left (nothing sealed of theirs, or erased before)")
                    + (outcome.closedAccount ? "; their account is closed" : "") + "; person_erased appended")
            if outcome.uploads > 0 {
                // Their handles are 404 from the commit on; their files go now, or at the next
                // sweep of an API node when the bucket cannot be reached.
                let folder = URL(fileURLWithPath: configuration.uploadsFolder, isDirectory: true)
                do {
                    let store = UploadStore(client: database.client, directory: folder, bucket: try configuration.uploadsBucket())
                    let swept = try store.sweep()
                    print("\(outcome.uploads) uploads of theirs expired; \(swept) upload records deleted with the files no other record names")
                } catch {
                    print("\(outcome.uploads) uploads of theirs expired; their files could not be deleted now (\(error)): the API nodes' upload sweep deletes them within 10 minutes")
                }
            }
            if outcome.unsealedEvents > 0 {
                print(
                    "\(outcome.unsealedEvents) events of theirs were appended before sealing was on: the log keeps their personal fields in the clear "
                        + "until `inbox personal-data seal-log` copies it sealed (docs/event-log.md, \"Events from before sealing\").")
            }
        }
    }
}

extension Command {
    static let personalData = Command(
        name: "personal-data", synopsis: "personal-data rewrap | seal-log",
        summary: "rewrap: wraps every person's data key again under INBOX_PERSONAL_DATA_KEY_FILE, opening those still wrapped by "
            + "INBOX_PERSONAL_DATA_PREVIOUS_KEY_FILE: the second step of rotating the key-encryption key. seal-log: copies the log into a "
            + "new table with the personal fields of the events appended in the clear (before sealing was on) sealed, while the tier runs, "
            + "and puts it in the log's place (docs/event-log.md)."
    ) { arguments, configuration, log in
        guard arguments == ["rewrap"] || arguments == ["seal-log"] else { throw UsageError(description: "inbox personal-data takes rewrap or seal-log.") }
        try await withDatabase(configuration, log: log, migrate: true) { database in
            guard let keys = PersonalDataKeys.current else {
                throw UsageError(
                    description: arguments == ["rewrap"]
                        ? "inbox personal-data rewrap needs INBOX_PERSONAL_DATA_KEY_FILE (the new key) and INBOX_PERSONAL_DATA_PREVIOUS_KEY_FILE (the old one)."
                        : "inbox personal-data seal-log needs INBOX_PERSONAL_DATA_KEY_FILE: the key-encryption key the fields are sealed under.")
            }
            if arguments == ["seal-log"] {
                let outcome = try await LogSealing(client: database.client, keys: keys, progress: { line in log.info("sealing the log: \(line)") }).run()
                log.info(
                    "sealed the log", metadata: ["copied": .int(outcome.copied), "sealed": .int(outcome.sealed), "leftAsTheyWere": .int(outcome.leftAsTheyWere)])
                if outcome.copied == 0 {
                    print("no event of the log holds personal fields in the clear: nothing to do")
                } else {
                    print(
                        "sealed the log: \(outcome.copied) events copied, \(outcome.sealed) of them with their personal fields sealed now"
                            + (outcome.leftAsTheyWere > 0 ? "; \(outcome.leftAsTheyWere) not of their type's shape, copied as they were" : "")
                            + ". Backups taken before this still hold those fields in the clear (docs/event-log.md).")
                }
                return
            }
            let rewrapped = try await database.client.withConnection { connection in try keys.rewrap(on: connection) }
            log.info("rewrapped the people's data keys", metadata: ["rewrapped": .int(rewrapped)])
            print("rewrapped \(rewrapped) data keys under INBOX_PERSONAL_DATA_KEY_FILE; the previous key file can now be dropped from every node")
        }
    }
}
