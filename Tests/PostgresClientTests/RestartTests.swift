import EventLog
import Foundation
import InboxTesting
import PostgresClient
import Testing

/// Uses a cluster of its own: restarting the shared test server would disturb every other test.
@Suite struct RestartTests {
    @Test func thePoolSurvivesAPostgresRestart() async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let client = try PostgresClient(configuration: .init(connection: cluster.postgres.connection, maximumConnections: 2))
        defer { client.close() }
        try await client.execute("CREATE TABLE IF NOT EXISTS t (id int)")
        try await client.execute("INSERT INTO t VALUES (1)")

        // A call in flight when the server goes away fails with a connection error.
        let inFlight = Task { try await client.execute("SELECT pg_sleep(30)") }
        try await Task.sleep(for: .milliseconds(300))
        try await cluster.postgres.restart()
        let error = await #expect(throws: PostgresError.self) { try await inFlight.value }
        #expect(error?.isConnectionError == true)

        // Later calls reconnect by themselves, on every pooled connection.
        for _ in 0..<4 {
            let count = try await client.withConnection { try $0.query("SELECT count(*) FROM t").scalar(Int64.self) }
            #expect(count == 1)
        }
    }
}
