import EventLog
import Foundation
import HTTPServer
import InboxDomain
import PostgresClient

/// The routes for operators and load balancers, outside `/v1`: no app gate, no person's token.
public enum OperationsRoutes {
    /// `GET /healthz`: the process is up and answering. `GET /readyz`: the database answers and
    /// every migration is applied (503 otherwise, saying which migrations, or only "database
    /// unreachable": the database's address and user go to the log).
    public static func routes(client: PostgresClient, migrator: Migrator) -> [Route] {
        [
            Route(.get, "/healthz", waits: false, describedAs: RouteDescription("The process is up.").returning(Self.status)) { _ in
                JSONAPI.response(.object(["meta": .object(["status": .string("ok")])]))
            },
            Route(.get, "/readyz", describedAs: RouteDescription("The database answers and every migration is applied.").returning(Self.status)) { _ in
                let pending: [Migration]
                do {
                    pending = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in try migrator.pending(on: connection) }
                } catch {
                    // Anybody may call this: where the database is, and as whom, goes only to the log.
                    throw APIError(status: 503, code: .databaseUnavailable, detail: "database unreachable", cause: String(describing: error))
                }
                guard pending.isEmpty else {
                    throw APIError(
                        status: 503, code: .migrationsPending,
                        detail: "Migrations not applied yet: \(pending.map(\.fileName).joined(separator: ", ")).")
                }
                return JSONAPI.response(.object(["meta": .object(["status": .string("ready")])]))
            },
        ]
    }
}

extension OperationsRoutes {
    /// `{"meta": {"status": ...}}`.
    static let status = Schema.record(["meta": Schema.record(["status": Schema.text]), "jsonapi": Schema.version], optional: ["jsonapi"])
}
