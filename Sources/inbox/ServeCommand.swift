import Encodings
import EventLog
import Foundation
import HTTPServer
import InboxAPI
import PostgresClient
import Projections

/// `inbox serve`: the JSON:API over HTTP until SIGTERM or SIGINT, then a graceful stop.
enum ServeCommand {
    static func serve(database: Database, configuration: InboxConfiguration, log: Log) async throws {
        // Requests get a pool of their own whose statements cannot run for ever.
        let requestClient = try InboxRoutes.requestPool(connection: database.client.configuration.connection, size: configuration.poolSize)
        defer { requestClient.close() }
        let database = Database(client: requestClient, store: EventStore(client: requestClient, validator: database.store.validator), migrator: database.migrator, description: database.description)
        let gate = AppVersionGate(client: database.client)
        let verifier = try DevelopmentKey.verifier(configuration, log: log)
        // An API node can start before any projector has made the read models' tables.
        try await InboxProjections.prepareLiveTables(client: database.client)
        let services: ServiceCredentials
        do {
            services = try configuration.serviceCredentials.map(ServiceCredentials.parse) ?? ServiceCredentials()
        } catch {
            throw UsageError(description: "INBOX_SERVICE_CREDENTIALS (--service-credentials): \(error)")
        }
        let metrics = RequestMetrics()
        // Bell pages kept in memory while they are current, told of changes on a session of its own.
        let bellCache = configuration.bellCacheMegabytes > 0 ? BellCache(capacityBytes: configuration.bellCacheMegabytes << 20) : nil
        let bellListener = try bellCache.map { cache in
            try BellCacheListener(cache: cache, configuration: database.client.configuration.connection) { message in log.info(message, [:]) }
        }
        defer { bellListener?.stop() }
        let api = APIServer(
            routes: InboxRoutes.all(
                client: database.client, store: database.store, migrator: database.migrator, metrics: metrics, bellCache: bellCache),
            gate: gate, verifier: verifier, services: services, metrics: metrics, rateLimiter: RateLimiter()
        ) { line in
            log.info("request", [
                "method": line.method, "route": line.route, "status": "\(line.status)",
                "durationMs": String(format: "%.2f", line.duration.milliseconds), "requestId": line.requestId,
            ])
        }
        let server = try HTTPServer(
            configuration: .init(
                host: configuration.httpHost, port: configuration.httpPort, blockingThreads: configuration.httpThreads,
                maximumBodyBytes: configuration.httpMaximumBodyBytes),
            replying: { request in api.reply(request) })
        let url = "http://\(configuration.httpHost):\(server.port)"
        log.info("serving the API", ["url": url])
        FileHandle.standardOutput.write(Data("The API listens on \(url) (try \(url)/healthz).\n".utf8))
        // Until SIGTERM or SIGINT cancels the task.
        while !Task.isCancelled { try? await Task.sleep(for: .seconds(3600)) }
        log.info("stopping the API: finishing the requests in flight", ["inFlight": "\(server.requestsInFlight)"])
        try await BlockingThread.run { server.shutdown(gracePeriod: .seconds(10)) }
        log.info("the API stopped", [:])
    }
}

extension Duration {
    var milliseconds: Double { inMilliseconds }
}
