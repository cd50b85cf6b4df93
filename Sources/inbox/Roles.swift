import EventLog
import Foundation
import HTTPServer
import Identity
import InboxAPI
import Lifecycle
import LinkedLibraries
import Mail
import PostgresClient
import Projections
import Uploads

/// The long-running roles of `inbox run`, `serve` and `project`, as members of one `ServiceGroup`.
///
/// A new role is a `Service` (most follow the database on a `LeasedLoop`; see docs/runtime.md),
/// made here and added to the members of the commands that run it. The group starts the members in
/// order and stops them in reverse: the API (and its bell listener) before the projectors.
enum Roles {
    /// One projector per projection, each under its own lease.
    static func projectors(_ projections: [any Projection], database: Database, configuration: InboxConfiguration, log: Logger) -> [ServiceGroup.Member] {
        let options = Projector.Options(
            inMemoryEvents: configuration.replayMemoryEvents, pollInterval: .milliseconds(configuration.pollIntervalMilliseconds),
            readInterval: .milliseconds(configuration.projectorReadIntervalMilliseconds))
        return projections.map { projection in
            let projector = Projector(projection: projection, configuration: database.client.configuration.connection, options: options, logger: log)
            return ServiceGroup.Member("the projector of \(projection.name)", projector, shutdownDeadline: .seconds(30))
        }
    }

    /// The API and, when bell pages are kept in memory, the listener that tells the cache of
    /// changes. Their pool of request connections is closed by `body`'s caller after they stopped.
    /// `withIdentity`: the identity role's routes are served beside the API's (`inbox run`: one
    /// host, as the app guide has it), and the API verifies the tokens it signs with no setting.
    static func api(
        database: Database, configuration: InboxConfiguration, log: Logger, withIdentity: Bool = false
    ) async throws -> (members: [ServiceGroup.Member], pool: PostgresClient) {
        // Requests get a pool of their own whose statements cannot run for ever.
        let requestClient = try InboxRoutes.requestPool(connection: database.client.configuration.connection, size: configuration.poolSize)
        do {
            // An API node can start before any projector has made the read models' tables.
            try await InboxProjections.prepareLiveTables(client: requestClient)
            let services: ServiceCredentials
            do {
                services = try configuration.serviceCredentials.map(ServiceCredentials.parse) ?? ServiceCredentials()
            } catch {
                throw UsageError(description: "INBOX_SERVICE_CREDENTIALS (--service-credentials): \(error)")
            }
            let bellCache = configuration.bellCacheMegabytes > 0 ? BellCache(capacityBytes: configuration.bellCacheMegabytes << 20) : nil
            let conversationCache =
                configuration.conversationCacheMegabytes > 0 ? ConversationListCache(capacityBytes: configuration.conversationCacheMegabytes << 20) : nil
            let store = EventStore(client: requestClient, validator: database.store.validator)
            let metrics = RequestMetrics()
            if let problem = FileType.problem { throw UsageError(description: "Uploads cannot be typed: \(problem).") }
            let bucket: S3Bucket?
            do { bucket = try configuration.uploadsBucket() } catch let error as InboxConfiguration.Invalid { throw UsageError(description: error.description) }
            let uploads = UploadSettings(
                directory: URL(fileURLWithPath: configuration.uploadsFolder, isDirectory: true), bucket: bucket,
                allowPrivateSources: configuration.uploadsAllowPrivateSources)
            let gate = AppVersionGate(client: requestClient)
            let identity = withIdentity ? try Roles.identity(database: database, client: requestClient, gate: gate, configuration: configuration, log: log) : nil
            let routes = InboxRoutes.all(
                client: requestClient, store: store, migrator: database.migrator, metrics: metrics, bellCache: bellCache, conversationCache: conversationCache, uploads: uploads,
                unsubscribe: try configuration.unsubscribeKeys.map { try UnsubscribeLink(setting: $0) },
                // The identity role's routes are served beside these (one host, as the app guide
                // has it) and described in the same document.
                more: try Self.accountRoutes(client: requestClient, validator: database.store.validator, configuration: configuration)
                    + (identity?.routes ?? []),
                build: ["version": "0.1.0", "commit": LinkedLibraries.buildCommit])
            let logRequest = requestLogLines(to: log)
            // With an operations port, /metrics is answered there only: it tells whoever can call
            // it how busy each route and projection is, which the API's public port need not.
            let api = APIServer(
                routes: configuration.opsPort == nil ? routes : routes.filter { $0.pattern != "/metrics" }, gate: gate, verifier: try DevelopmentKey.verifier(configuration, log: log, identityKeys: identity?.keys),
                services: services, metrics: metrics, rateLimiter: RateLimiter(
                    limits: RateLimiter.Limits(
                        personPerSecond: configuration.apiPersonLimit.perSecond, personBurst: configuration.apiPersonLimit.count,
                        guestPerSecond: configuration.apiGuestLimit.perSecond, guestBurst: configuration.apiGuestLimit.count)),
                log: logRequest)
            let operations = configuration.opsPort.map { _ in
                APIServer(routes: InboxRoutes.operations(routes), gate: nil, metrics: metrics, log: logRequest)
            }
            var members: [ServiceGroup.Member] = []
            let caches: [(channel: String, cache: any AnnouncedCache)] =
                (bellCache.map { [(BellChanges.channel, $0)] } ?? []) + (conversationCache.map { [(ThreadChanges.channel, $0)] } ?? [])
            if !caches.isEmpty {
                let listener = CacheListener(caches: caches, configuration: database.client.configuration.connection, logger: log)
                members.append(ServiceGroup.Member("the caches' listener", listener, shutdownDeadline: .seconds(5)))
            }
            members.append(
                ServiceGroup.Member("the upload sweep", UploadSweeper(store: uploads.store(client: requestClient), logger: log), shutdownDeadline: .seconds(5)))
            if let identity {
                members.append(ServiceGroup.Member("the identity role's housekeeping", identity.maintenance, shutdownDeadline: .seconds(5)))
                if let revocations = identity.appleRevocations {
                    members.append(ServiceGroup.Member("the Apple revocations", revocations, shutdownDeadline: .seconds(20)))
                }
                if let reload = identity.keysReload {
                    members.append(ServiceGroup.Member("the signing keys' reading", reload, shutdownDeadline: .seconds(5)))
                }
            }
            members.append(
                ServiceGroup.Member(
                    "the API",
                    APIService(
                        api: api, operations: operations, configuration: configuration, log: log,
                        bodyLimits: InboxRoutes.bodyLimits + (identity == nil ? [] : IdentityRoutes.bodyLimits)),
                    shutdownDeadline: .seconds(15)))
            return (members, requestClient)
        } catch {
            requestClient.close()
            throw error
        }
    }

    /// The person's own account (`/v1/me` and below, Identity): served by every API node, since
    /// they need only PostgreSQL, the key-encryption key and Apple's and Google's keys.
    static func accountRoutes(client: PostgresClient, validator: EventValidator?, configuration: InboxConfiguration) throws -> [Route] {
        let (settings, secrets) = try configuration.identitySetup()
        let providers = [settings.apple, settings.google].compactMap { $0 }
        let social = providers.isEmpty ? nil : try SocialTokenVerifier(providers: providers, caFile: settings.caFile)
        // The verification mail's link: the public address, or this node's own for a tier run on one machine.
        let verification = EmailVerification(publicURL: configuration.publicURL ?? "http://\(configuration.httpHost):\(configuration.httpPort)")
        return MeRoutes.routes(client: client, validator: validator, verification: verification)
            + verification.routes(client: client, validator: validator)
            + SecondFactorRoutes.routes(client: client, secrets: secrets, validator: validator, codeLimit: settings.signInPerAccount)
            + LinkedSignInRoutes.routes(client: client, social: social, validator: validator, limit: settings.signInPerAccount)
            + AccountClosureRoutes.routes(
                client: client, hasher: try PasswordHasher(cost: settings.passwordCost, concurrency: settings.hashConcurrency), social: social,
                secrets: secrets, validator: validator, limit: settings.signInPerAccount, appleClientId: settings.apple?.audiences.sorted().first)
    }

    /// Runs `members` in a group that owns SIGINT and SIGTERM until they stop.
    static func run(_ members: [ServiceGroup.Member], database: Database, log: Logger) async throws {
        var members = members
        // Under systemd (`Type=notify`): ready once every server listens, then the watchdog's
        // pings; the notifier goes last, so it is the first told to stop (`STOPPING=1`).
        if SystemdNotifier.isExpected {
            let servers = members.indices.filter { members[$0].service is APIService }
            let readiness = Readiness(parts: servers.count)
            for index in servers {
                var server = members[index].service as! APIService
                server.listening = readiness
                members[index].service = server
            }
            members.append(.init("the systemd notifier", SystemdNotifier(readiness: readiness, roles: members.map(\.name), log: log), shutdownDeadline: .seconds(1)))
        }
        let group = ServiceGroup(members, logger: log)
        database.signals.handOver()
        do {
            try await group.run()
        } catch is CancellationError {
            // A role stopped as told: not a failure of the command.
        }
    }
}

/// The JSON:API over HTTP, and the operations listener when `INBOX_OPS_PORT` is set. They listen
/// from the start of `run()`; told to stop, they take no new connection and finish the requests
/// in flight within `gracePeriod`.
struct APIService: Service {
    let api: APIServer
    /// `/healthz`, `/readyz` and `/metrics` on a server of their own, whose connections the
    /// API's clients cannot take.
    let operations: APIServer?
    let configuration: InboxConfiguration
    let log: Logger
    /// The body limits of the server besides its own (`HTTPServer.Configuration.bodyLimits`).
    var bodyLimits: [HTTPServer.BodyLimit] = InboxRoutes.bodyLimits
    var gracePeriod: Duration = .seconds(10)
    /// What the start-up line calls the server.
    var name = "the API"
    /// Told once the servers listen (`Roles.run` sets it when systemd waits for readiness).
    var listening: Readiness?

    func run() async throws {
        let api = self.api
        let server = try HTTPServer(
            configuration: .init(
                host: configuration.httpHost, port: configuration.httpPort, blockingThreads: configuration.httpThreads,
                maximumBodyBytes: configuration.httpMaximumBodyBytes, connectionsPerAddress: configuration.httpConnectionsPerAddress,
                requestDeadlineSeconds: configuration.httpRequestDeadlineSeconds, bodyLimits: bodyLimits),
            replying: { request in api.reply(request) })
        let operationsServer: HTTPServer?
        do {
            operationsServer = try operations.map { operations in
                // Few callers (a load balancer, a monitoring system), often from one address: no
                // per-address limit, a few connections, and two threads for what waits on the database.
                try HTTPServer(
                    configuration: .init(
                        host: configuration.httpHost, port: configuration.opsPort ?? 0, threads: 1, blockingThreads: 2,
                        maximumBodyBytes: 1024, connectionLimit: 64, connectionsPerAddress: 0,
                        requestDeadlineSeconds: configuration.httpRequestDeadlineSeconds),
                    replying: { request in operations.reply(request) })
            }
        } catch {
            server.shutdown(gracePeriod: .zero)
            throw error
        }
        announce(name, port: server.port)
        if let operationsServer { announce("the operations listener", port: operationsServer.port) }
        listening?.arrived()
        await waitUntilCancelled()
        log.info("\(name) takes no new connection; finishing the requests in flight", metadata: ["inFlight": .int(server.requestsInFlight)])
        let grace = gracePeriod
        try await BlockingThread.run {
            operationsServer?.shutdown(gracePeriod: grace)
            server.shutdown(gracePeriod: grace)
        }
    }

    private func announce(_ name: String, port: UInt16) {
        let url = "http://\(configuration.httpHost):\(port)"
        log.info("serving \(name)", metadata: ["url": .string(url)])
        FileHandle.standardOutput.write(Data("\(name.prefix(1).uppercased() + name.dropFirst()) listens on \(url) (try \(url)/healthz).\n".utf8))
    }
}

extension Duration {
    /// Milliseconds rounded to hundredths (`12.34`), the request line's `durationMs`.
    var milliseconds: Double {
        Double(components.seconds * 100_000 + components.attoseconds / 10_000_000_000_000) / 100
    }
}

/// Each answered request as one log line (`request`, with its method, route, status, duration and
/// id; at error level when it failed), as every role that serves HTTP logs them.
func requestLogLines(to log: Logger) -> @Sendable (RequestLogLine) -> Void {
    { line in
        var metadata: Logger.Metadata = [
            "method": .string(line.method), "route": .string(line.route), "status": .int(line.status),
            "durationMs": .number(line.duration.milliseconds), "requestId": .string(line.requestId),
        ]
        metadata["error"] = line.error.map(Logger.Value.string)
        metadata["traceId"] = line.traceId.map(Logger.Value.string)
        log.log(level: line.error == nil ? .info : .error, "request", metadata: metadata)
    }
}
