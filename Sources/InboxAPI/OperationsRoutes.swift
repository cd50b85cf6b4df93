import EventLog
import Foundation
import HTTPServer
import InboxDomain
import PostgresClient

/// The routes for operators and load balancers, outside `/v1`: no app gate, no person's token.
public enum OperationsRoutes {
    /// `GET /healthz`: the process is up and answering. `GET /readyz`: the database answers and
    /// every migration is applied (503 otherwise, saying which).
    public static func routes(client: PostgresClient, migrator: Migrator) -> [Route] {
        [
            Route("GET", "/healthz", waits: false) { _ in
                HTTPResponse(status: 200, contentType: JSONAPI.mediaType, body: JSONAPI.encode(.object(["meta": .object(["status": .string("ok")])])))
            },
            Route("GET", "/readyz") { _ in
                let pending: [Migration]
                do {
                    pending = try Blocking.run { try await migrator.pending(client: client) }
                } catch {
                    throw APIError(status: 503, code: "database_unavailable", detail: "The database does not answer: \(error)")
                }
                guard pending.isEmpty else {
                    throw APIError(
                        status: 503, code: "migrations_pending",
                        detail: "Migrations not applied yet: \(pending.map(\.fileName).joined(separator: ", ")).")
                }
                return HTTPResponse(
                    status: 200, contentType: JSONAPI.mediaType, body: JSONAPI.encode(.object(["meta": .object(["status": .string("ready")])])))
            },
        ]
    }
}
