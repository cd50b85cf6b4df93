import EventLog
import Foundation
import HTTPServer
import Mail
import PostgresClient
import Projections

/// Every route of the API, in one table: method, path, who may call it (the scope a token needs),
/// and the handler. `inbox serve` serves exactly these; the tests check each against its access.
public enum InboxRoutes {
    public static func all(
        client: PostgresClient, store: EventStore, migrator: Migrator, metrics: RequestMetrics = RequestMetrics(), bellCache: BellCache? = nil,
        conversationCache: ConversationListCache? = nil, attachments: (any AttachmentValidator)? = nil, uploads: UploadSettings = .temporary,
        unsubscribe: UnsubscribeLink? = nil, groupCommit: InlineGroupCommit = InlineGroupCommit(), more: [Route] = [],
        build: [String: String] = [:]
    ) -> [Route] {
        // One group commit for every route's inline appends: appends of one node that each had a
        // committer of its own were concurrent transactions, and an open one of another route
        // made a writer leave its projections to the projectors (not next in the log).
        let inline = InlineProjections(groupCommit: groupCommit)
        let threadsInline = ConversationRoutes.inlineProjections(groupCommit: groupCommit)
        let served = OperationsRoutes.routes(client: client, migrator: migrator)
            + MetricsRoutes.routes(
                metrics: metrics, client: client, bellCache: bellCache, conversationCache: conversationCache, groupCommit: groupCommit, build: build)
            + BellRoutes.routes(client: client, inline: inline, cache: bellCache) + DeviceRoutes.routes(client: client)
            + PreferenceRoutes.routes(client: client, inline: inline) + SavedSearchRoutes.routes(client: client, inline: inline)
            + ConversationRoutes.routes(
                client: client, inline: threadsInline, attachments: attachments ?? uploads.store(client: client), cache: conversationCache)
            + QuickReplyRoutes.routes(client: client) + BlockRoutes.routes(client: client, inline: threadsInline)
            + InternalEventRoutes.routes(store: store) + ContactRoutes.routes(client: client) + UploadRoutes.routes(client: client, settings: uploads)
            // Mail's one-click unsubscribe, where links are signed (INBOX_UNSUBSCRIBE_KEYS).
            + (unsubscribe.map { UnsubscribeRoutes.routes(client: client, links: $0, inline: inline) } ?? [])
            // Routes of modules above this one (the person's account, `Identity.MeRoutes`), in the document too.
            + more
        return served + [OpenAPI.route(describing: served)]
    }

    /// The body limits of the API's server besides its own (`HTTPServer.Configuration.bodyLimits`):
    /// uploads may be larger than any other body.
    public static let bodyLimits = [UploadRoutes.bodyLimit]

    /// The paths of the operations listener (`INBOX_OPS_PORT`): what a load balancer and a
    /// monitoring system call, answered on a port of their own while the API's is full.
    public static let operationsPaths: Set<String> = ["/healthz", "/readyz", "/metrics"]

    /// The routes among `routes` that the operations listener serves.
    public static func operations(_ routes: [Route]) -> [Route] {
        routes.filter { operationsPaths.contains($0.pattern) }
    }

    /// The longest one statement of a request may run; past it the request is a 503.
    public static let statementTimeout: Duration = .seconds(5)
    /// Distinct statements each request connection keeps prepared: the routes run a few dozen.
    public static let preparedStatements = 128

    /// The pool for the routes' requests, apart from the projectors': statements stop after
    /// `statementTimeout`, and each session prepares the statements it runs, so PostgreSQL parses
    /// and plans a bell page once per connection rather than on every request.
    public static func requestPool(connection: PostgresConfiguration, size: Int) throws -> PostgresClient {
        try PostgresClient(
            configuration: .init(
                connection: connection.withStatementTimeout(statementTimeout).withPreparedStatements(preparedStatements),
                maximumConnections: size, applicationName: "inbox-api"))
    }
}
