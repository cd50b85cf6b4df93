import EventLog
import Foundation
import PostgresClient
import Projections

/// Every route of the API, in one table: method, path, who may call it (the scope a token needs),
/// and the handler. `inbox serve` serves exactly these; the tests check each against its access.
public enum InboxRoutes {
    public static func all(client: PostgresClient, store: EventStore, migrator: Migrator, metrics: RequestMetrics = RequestMetrics()) -> [Route] {
        let served = OperationsRoutes.routes(client: client, migrator: migrator) + MetricsRoutes.routes(metrics: metrics, client: client)
            + BellRoutes.routes(client: client) + DeviceRoutes.routes(client: client)
            + PreferenceRoutes.routes(client: client) + SavedSearchRoutes.routes(client: client) + InternalEventRoutes.routes(store: store)
        return served + [OpenAPI.route(describing: served)]
    }
}
