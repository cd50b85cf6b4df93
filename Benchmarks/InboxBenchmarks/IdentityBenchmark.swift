import Crypto
import EventLog
import Foundation
import HTTPServer
import Identity
import InboxAPI
import InboxDomain
import Lifecycle
import PasswordHashing
import PostgresClient

/// The identity role's token endpoint under wrk, beside the same server's `/healthz`: password
/// sign-ins at the two Argon2id costs worth comparing (OWASP's 19 MiB × 2 passes, the default,
/// and RFC 9106's 64 MiB × 3), refreshes (each renewing its refresh token, as the app's do), and
/// guest tokens. Sign-ins per second are bounded by the hash: at most `INBOX_PASSWORD_HASH_CONCURRENCY`
/// (the cores) hash at once, so those rows use fewer connections.
///
/// Every request comes from wrk's one address, so the rate limits are raised out of the way
/// (the rows measure answers, not 429s), and every sign-in takes its turn on the same rate-limit
/// bucket row in PostgreSQL (one per address): for a single client address, a worst case.
struct IdentityBenchmark: Benchmark {
    var rounds: Int
    var scale: Double

    static let accountsPerCost = 64
    static let sessions = 2_000
    static let seconds = benchSeconds(standard: 10)
    static let connections = 64

    func run(on database: BenchmarkDatabase) async throws -> BenchmarkResult {
        try HTTPBenchmark.requireWrk()
        let client = database.client
        let accounts = max(4, Int(Double(Self.accountsPerCost) * scale))
        let sessions = max(4 * Self.connections, Int(Double(Self.sessions) * scale))
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-bench-keys-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let costs: [(id: String, title: String, cost: Argon2Cost)] = [
            ("sign-in-owasp", "password sign-in, 19 MiB × 2 (default)", .owasp),
            ("sign-in-rfc9106", "password sign-in, 64 MiB × 3", .rfc9106),
        ]
        let password = "correct horse battery staple"
        // One hash per cost for every account of that cost: each sign-in verifies a hash of that cost
        // all the same, and loading does not take minutes of hashing.
        progress("loading \(accounts) accounts per cost and \(sessions) sign-in sessions")
        for (index, entry) in costs.enumerated() {
            let hash = try Argon2id.hash(password, cost: entry.cost)
            try await client.execute(
                """
                INSERT INTO identity_accounts (person_id, email, email_verified, password_hash)
                SELECT 'bench-\(index)-' || g, 'bench-\(index)-' || g || '@example.com', true, $1
                FROM generate_series(0, \(accounts - 1)) AS g
                """, binds: [PostgresBind(hash)])
        }
        // Sessions of their own for each round: a round renews every token it presents, so the
        // next round presenting the same first tokens again would be refused as reuse (and was:
        // rounds 2 and 3 of the first release run answered no refresh at all).
        let refreshTokens = try await client.withConnection { connection in
            try (0..<sessions * rounds).map { index in
                try Sessions.start(
                    personId: "bench-0-\(index % accounts)", clientId: "wristler-app", scopes: Scope.app, platform: "app:ios", device: nil,
                    lifetime: 90 * 86_400, now: Date(), on: connection
                ).1.text
            }
        }
        try await client.execute("ANALYZE")
        try await client.execute("CHECKPOINT")

        // A server per cost, each as `inbox identity` serves it (its own request pool), limits out of the way.
        var servers: [HTTPServer] = []
        var pools: [PostgresClient] = []
        defer {
            for server in servers { server.shutdown() }
            for pool in pools { pool.close() }
        }
        let migrator = try Migrator(directory: Migrator.locateDirectory(explicit: ProcessInfo.processInfo.environment["INBOX_MIGRATIONS_DIR"]))
        let unlimited = AttemptLimit(1_000_000, per: 1)
        for entry in costs {
            var configuration = IdentityConfiguration()
            configuration.passwordCost = entry.cost
            (configuration.signInPerAddress, configuration.signInPerAccount) = (unlimited, unlimited)
            (configuration.guestPerAddress, configuration.refreshPerAddress) = (unlimited, unlimited)
            let pool = try InboxRoutes.requestPool(connection: client.configuration.connection, size: 8)
            pools.append(pool)
            let role = try IdentityRole.make(
                configuration: configuration, keysDirectory: folder, signingKid: nil, client: pool, gate: AppVersionGate(client: pool),
                validator: database.store.validator, log: .init(label: "bench", level: .error, handler: NoLogs()))
            let api = APIServer(routes: role.routes + OperationsRoutes.routes(client: pool, migrator: migrator), gate: nil)
            servers.append(
                try HTTPServer(
                    configuration: .init(port: 0, connectionsPerAddress: 0, bodyLimits: IdentityRoutes.bodyLimits), replying: { api.reply($0) }))
        }
        let hashSlots = IdentityConfiguration().hashConcurrency
        // Sign-ins wait for one of the hashing slots: two connections per slot keep every slot busy
        // without answers waiting in line behind each other for long.
        let signInConnections = 2 * hashSlots

        var scripts: [String] = []
        defer { for script in scripts { try? FileManager.default.removeItem(atPath: script) } }
        func write(_ lua: String) throws -> String {
            let script = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-wrk-\(UUID().uuidString).lua").path
            try lua.write(toFile: script, atomically: true, encoding: .utf8)
            scripts.append(script)
            return script
        }
        func form(_ fields: [(String, String)]) -> String { FormBody.encode(fields) }
        let signInScripts = try (0..<costs.count).map { index in
            try write(
                Self.luaForms(
                    (0..<accounts).map { account in
                        form([
                            ("grant_type", TokenEndpoint.grantPassword), ("client_id", "wristler-app"), ("username", "bench-\(index)-\(account)@example.com"),
                            ("password", password), ("scope", "account:read account:write messages:read"),
                        ])
                    }))
        }
        let guestScript = try write(Self.luaForms([form([("grant_type", TokenEndpoint.grantGuest), ("client_id", "wristler-app")])]))
        let refreshScripts = try (0..<rounds).map { round in
            try write(Self.luaRefreshes(Array(refreshTokens[(round * sessions)..<((round + 1) * sessions)])))
        }

        /// `scripts`: one for every round, or one for all of them.
        func wrkCase(
            id: String, title: String, server: HTTPServer, path: String, scripts: [String], connections: Int, description: String,
            kind: ConfigurationResult.Kind
        ) -> BenchmarkCase {
            let url = "http://127.0.0.1:\(server.port)\(path)"
            return BenchmarkCase(
                id: id, title: title, description: description + " wrk -t2 -c\(connections) -d\(Self.seconds)s; only 200 answers counted.", kind: kind,
                batchSize: 1, appenders: connections, eventsPerRound: 0,
                run: { round in
                    let script = scripts.isEmpty ? nil : scripts[min(round - 1, scripts.count - 1)]
                    let result = try await BlockingThread.run {
                        // A sign-in at the higher cost takes longer than wrk's 2 s under load: 10 s before it counts an error.
                        try HTTPBenchmark.wrk(url: url, script: script ?? Self.emptyScript, connections: connections, seconds: Self.seconds, timeout: 10)
                    }
                    progress(
                        "  \(title): p50 \(HTTPBenchmark.format(result.p50)), p99 \(HTTPBenchmark.format(result.p99)), \(result.errors) socket errors, \(result.non2xx) non-2xx")
                    var measurement = Measurement(
                        round: round, events: max(0, result.requests - result.non2xx), elapsed: .milliseconds(Int64(result.seconds * 1000)))
                    measurement.latency = Latency(p50: result.p50, p99: result.p99, p999: result.p999)
                    return measurement
                })
        }
        let cases =
            costs.enumerated().map { index, entry in
                wrkCase(
                    id: entry.id, title: "POST /oauth/token: \(entry.title)", server: servers[index], path: "/oauth/token", scripts: [signInScripts[index]],
                    connections: signInConnections,
                    description:
                        "A password sign-in of one of \(accounts) accounts picked in turn, Argon2id at m=\(entry.cost.memoryKiB) KiB, t=\(entry.cost.iterations), p=1 (\(hashSlots) at once): the rate limits' buckets, the account, the hash, the session and refresh token and the signed_in event in one transaction, the ES256 access token.",
                    kind: .client)
            } + [
                wrkCase(
                    id: "refresh", title: "POST /oauth/token: refresh", server: servers[0], path: "/oauth/token", scripts: refreshScripts,
                    connections: Self.connections,
                    description:
                        "A refresh of one of \(sessions) sessions (new ones each round), each connection presenting the newest token of the sessions it holds: the token marked used and the next one issued in one transaction, the session's expiry moved, an ES256 access token.",
                    kind: .client),
                wrkCase(
                    id: "guest", title: "POST /oauth/token: guest token", server: servers[0], path: "/oauth/token", scripts: [guestScript],
                    connections: Self.connections,
                    description: "A guest token (catalogue:read content:read): the address's rate-limit bucket in the node's memory, an ES256 access token; no database work.",
                    kind: .client),
                wrkCase(
                    id: "healthz", title: "GET /healthz", server: servers[0], path: "/healthz", scripts: [], connections: Self.connections,
                    description: "The same server answering /healthz (no token, no database): the ceiling of the HTTP layer on this machine.", kind: .serverSide),
            ]
        let configurations = try await runInterleaved(cases, rounds: rounds, unit: "requests")
        let refreshed = try await client.query("SELECT count(*)::int AS n FROM identity_refresh_tokens WHERE used_at IS NOT NULL") { try $0.decode(Int.self, "n") }
        let reused = try await client.query("SELECT count(*)::int AS n FROM identity_sessions WHERE end_reason = 'refresh_token_reused'") {
            try $0.decode(Int.self, "n")
        }
        return BenchmarkResult(
            benchmark: "identity", configurations: configurations,
            notes: [
                "accountsPerCost": "\(accounts)", "sessions": "\(sessions)", "hashSlots": "\(hashSlots) (INBOX_PASSWORD_HASH_CONCURRENCY's default: the cores)",
                "refreshes": "\(refreshed.first ?? 0) refresh tokens used; \(reused.first ?? 0) sessions ended by reuse (0 expected)",
                "limits": "raised to 1,000,000 a second: wrk is one client address",
                "loadGenerator": "wrk 4.1 on the same machine, 2 threads, \(Self.seconds) s per round",
            ])
    }

    static let emptyScript: String = {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-wrk-empty.lua").path
        try? luaDone("").write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }()

    /// wrk's Lua: POSTs the forms in turn.
    static func luaForms(_ bodies: [String]) -> String {
        "local bodies = {" + bodies.map { "[==[\($0)]==]" }.joined(separator: ",\n") + "}\n"
            + luaDone(
                """
                local i = 0
                request = function()
                  i = i + 1
                  return wrk.format("POST", nil, { ["Content-Type"] = "application/x-www-form-urlencoded", ["X-Wristler-App"] = "ios/2.4.0" }, bodies[(i % #bodies) + 1])
                end
                """)
    }

    /// wrk's Lua for refreshes: each of wrk's threads holds its share of the sessions' refresh
    /// tokens in a queue, takes the oldest for each request and puts back the one each answer
    /// renews it with, as an app keeps its newest.
    static func luaRefreshes(_ tokens: [String]) -> String {
        "local tokens = {" + tokens.map { "\"\($0)\"" }.joined(separator: ",\n") + "}\n"
            + luaDone(
                """
                local count = 0
                setup = function(thread)
                  thread:set("share", count)
                  count = count + 1
                end
                local queue, first, last = {}, 1, 0
                init = function(args)
                  for index = 1, #tokens do
                    if (index % 2) == share then
                      last = last + 1
                      queue[last] = tokens[index]
                    end
                  end
                end
                request = function()
                  -- Never empty while answers come back (each thread holds several tokens per
                  -- connection); should refusals drain it, a token that is no one's is refused and counted.
                  local token = queue[first] or "drained"
                  queue[first] = nil
                  if first <= last then first = first + 1 end
                  return wrk.format("POST", nil, { ["Content-Type"] = "application/x-www-form-urlencoded", ["X-Wristler-App"] = "ios/2.4.0" },
                    "grant_type=refresh_token&client_id=wristler-app&refresh_token=" .. token)
                end
                response = function(status, headers, body)
                  local renewed = string.match(body, '"refresh_token":"([^"]+)"')
                  if renewed then
                    last = last + 1
                    queue[last] = renewed
                  end
                end
                """)
    }

    /// `done` printing the percentiles as `HTTPBenchmark.wrk` reads them.
    static func luaDone(_ body: String) -> String {
        body + """

            done = function(summary, latency, requests)
              io.write(string.format("\(HTTPBenchmark.percentilesLabel) %d %d %d\\n", latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
            end
            """
    }
}

/// A log handler that drops every line: the benchmark's roles log nothing worth its time.
struct NoLogs: LogHandler {
    func write(_ record: LogRecord) {}
}
