import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import Projections
import Testing

/// `GET /metrics` in the Prometheus text format.
@Suite struct MetricsTests {
    @Test func metricsCountRequestsByRouteAndStatusWithLatencyAndShowTheProjections() async throws {
        try await withTestDatabase { db in
            try await InboxProjections.prepareLiveTables(client: db.client)
            _ = try await db.store.append([try NewEvent(PasswordChanged(personId: "p1")), try NewEvent(PasswordChanged(personId: "p2"))])
            let metrics = RequestMetrics()
            let groupCommit = InlineGroupCommit()
            let routes = InboxRoutes.all(
                client: db.client, store: db.store, migrator: try Migrator(directory: TestDatabase.migrationsDirectory), metrics: metrics,
                groupCommit: groupCommit)
            let api = APIServer(routes: routes, gate: nil, metrics: metrics)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            let client = APITestServer(server: server, db: db)
            for _ in 0..<3 { _ = try await client.send("GET", "/healthz") }
            _ = try await client.send("GET", "/v1/me/notifications")
            _ = try await client.send("GET", "/no/such/\(UUID().uuidString)")
            let reply = try await client.send("GET", "/metrics")
            #expect(reply.status == 200)
            #expect(reply.header("Content-Type")?.hasPrefix("text/plain; version=0.0.4") == true)
            let text = String(decoding: reply.body, as: UTF8.self)
            #expect(text.contains(#"inbox_http_requests_total{route="/healthz",method="GET",status="200"} 3"#), "\(text)")
            #expect(text.contains(#"inbox_http_requests_total{route="/v1/me/notifications",method="GET",status="401"} 1"#))
            #expect(text.contains(#"inbox_http_requests_total{route="unmatched",method="GET",status="404"} 1"#))
            #expect(text.contains(#"inbox_http_request_duration_seconds_bucket{route="/healthz",le="+Inf"} 3"#))
            #expect(text.contains(#"inbox_http_request_duration_seconds_count{route="/healthz"} 3"#))
            #expect(text.contains("# TYPE inbox_http_request_duration_seconds histogram"))
            #expect(text.contains("inbox_inline_groups_total 0") && text.contains("inbox_inline_requests_total 0"), "\(text)")
            #expect(text.contains("inbox_event_log_head_position 2"))
            #expect(text.contains(#"inbox_projection_position{projection="bell"} 0"#))
            #expect(text.contains(#"inbox_projection_positions_behind{projection="bell"} 2"#))
            #expect(text.contains(#"inbox_projection_dead_letters{projection="threads"} 0"#))
            #expect(text.contains("inbox_shop_reminders_total 0") && text.contains("inbox_shop_reminder_messages_total 0"))
            #expect(text.contains("inbox_mail_outbox_undecided 0") && text.contains("inbox_mail_queued 0"))
            #expect(text.contains("# TYPE inbox_mail_total counter"))
            let lag = text.split(separator: "\n").first { $0.hasPrefix(#"inbox_projection_lag_seconds{projection="bell"}"#) }
            #expect(lag.flatMap { Double($0.split(separator: " ").last ?? "") }.map { $0 > 0 } == true, "\(String(describing: lag))")

            // An inline write through the API's committer: counted, and its bell applied or deferred
            // (which of the two depends on the other tests' transactions on the shared cluster).
            try InlineProjections(groupCommit: groupCommit).append([try NewEvent(PasswordChanged(personId: "p3"))], using: db.client)
            let after = String(decoding: try await client.send("GET", "/metrics").body, as: UTF8.self)
            #expect(after.contains("inbox_inline_groups_total 1") && after.contains("inbox_inline_requests_total 1"), "\(after)")
            let bell = after.split(separator: "\n").filter { $0.hasPrefix(#"inbox_inline_projections_total{projection="bell","#) }
            #expect(bell.count == 2 && bell.compactMap { Int($0.split(separator: " ").last ?? "") }.reduce(0, +) == 1, "\(bell)")
            #expect(!after.contains(#"inbox_inline_projections_total{projection="threads""#), "a sign-in is not the threads'")
        }
    }
}
