import EventLog
import Fanout
import Foundation
import HTTPServer
import Mailer
import PostgresClient
import Projections
import Threads

/// Counters and latency histograms of the requests, by route (its pattern), method and status,
/// for `GET /metrics` in the Prometheus text format.
public final class RequestMetrics: Sendable {
    /// Upper bounds of the latency buckets, in seconds.
    static let buckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]

    private struct Key: Hashable {
        let method: HTTPMethod
        let route: String
        let status: Int
    }

    private struct Latency {
        var counts = [Int](repeating: 0, count: RequestMetrics.buckets.count)
        var sum = 0.0
        var count = 0
    }

    private struct State {
        var requests: [Key: Int] = [:]
        var latency: [String: Latency] = [:]
    }

    /// Every request adds to its thread's stripe; `text` adds the stripes up.
    private let state = Striped<State>(count: 16) { State() }

    public init() {}

    public func record(method: HTTPMethod, route: String, status: Int, seconds: Double) {
        state.withThreadLock { state in
            state.requests[Key(method: method, route: route, status: status), default: 0] += 1
            var latency = state.latency[route] ?? Latency()
            for (index, bound) in Self.buckets.enumerated() where seconds <= bound { latency.counts[index] += 1 }
            latency.sum += seconds
            latency.count += 1
            state.latency[route] = latency
        }
    }

    /// The request metrics in the Prometheus text format (0.0.4).
    public func text() -> String {
        var snapshot = State()
        state.forEach { stripe in
            snapshot.requests.merge(stripe.requests, uniquingKeysWith: +)
            snapshot.latency.merge(stripe.latency) { total, more in
                Latency(counts: zip(total.counts, more.counts).map(+), sum: total.sum + more.sum, count: total.count + more.count)
            }
        }
        var lines = [
            "# HELP inbox_http_requests_total HTTP requests answered, by route, method and status.",
            "# TYPE inbox_http_requests_total counter",
        ]
        for (key, count) in snapshot.requests.sorted(by: { ($0.key.route, $0.key.method, $0.key.status) < ($1.key.route, $1.key.method, $1.key.status) }) {
            lines.append("inbox_http_requests_total{route=\"\(Self.escape(key.route))\",method=\"\(key.method.rawValue)\",status=\"\(key.status)\"} \(count)")
        }
        lines += [
            "# HELP inbox_http_request_duration_seconds Time from the request's arrival at the handler to its response, by route.",
            "# TYPE inbox_http_request_duration_seconds histogram",
        ]
        for (route, latency) in snapshot.latency.sorted(by: { $0.key < $1.key }) {
            let label = "route=\"\(Self.escape(route))\""
            for (index, bound) in Self.buckets.enumerated() {
                lines.append("inbox_http_request_duration_seconds_bucket{\(label),le=\"\(bound)\"} \(latency.counts[index])")
            }
            lines.append("inbox_http_request_duration_seconds_bucket{\(label),le=\"+Inf\"} \(latency.count)")
            lines.append("inbox_http_request_duration_seconds_sum{\(label)} \(latency.sum)")
            lines.append("inbox_http_request_duration_seconds_count{\(label)} \(latency.count)")
        }
        return lines.joined(separator: "\n") + "\n"
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
    }
}

/// `GET /metrics`: the request metrics, and from the database the log's head, each projection's
/// position, how far behind it is (by position, and the age of the oldest event it has not
/// applied) and its parked events; and the bell's and the conversation lists' caches' hits,
/// misses, size and whether they listen.
public enum MetricsRoutes {
    public static func routes(
        metrics: RequestMetrics, client: PostgresClient, bellCache: BellCache? = nil, conversationCache: ConversationListCache? = nil,
        groupCommit: InlineGroupCommit? = nil, build: [String: String] = [:]
    ) -> [Route] {
        [
            Route(
                .get, "/metrics",
                describedAs: RouteDescription(
                    "Metrics in the Prometheus text format.",
                    responses: [200: .other(mediaType: "text/plain; version=0.0.4; charset=utf-8", schema: .object(["type": .string("string")]))])
            ) { _ in
                let database = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in try Self.databaseMetrics(on: connection) }
                let caches = (bellCache.map { Self.cacheMetrics("bell", "Bell pages", $0.statistics, listening: $0.isListening) } ?? "")
                    + (conversationCache.map {
                        Self.cacheMetrics("conversation", "Conversation list pages", $0.statistics, listening: $0.isListening)
                    } ?? "")
                let inline = groupCommit.map { Self.inlineMetrics($0.counts) } ?? ""
                return HTTPResponse(
                    status: 200, contentType: "text/plain; version=0.0.4; charset=utf-8",
                    body: metrics.text() + database + caches + inline + Self.poolMetrics(client.statistics) + ProcessMetrics.text() + Self.buildInfo(build))
            }
        ]
    }

    /// The API's pool of database connections: a pool always at its maximum with calls waiting
    /// is what makes requests queue (INBOX_HTTP_THREADS).
    static func poolMetrics(_ pool: PostgresClient.Statistics) -> String {
        [
            "# HELP inbox_db_pool_connections The API's database connections, by state.", "# TYPE inbox_db_pool_connections gauge",
            #"inbox_db_pool_connections{state="in_use"} \#(pool.open - pool.idle)"#, #"inbox_db_pool_connections{state="idle"} \#(pool.idle)"#,
            "# HELP inbox_db_pool_max_connections The most connections the API's pool opens.", "# TYPE inbox_db_pool_max_connections gauge",
            "inbox_db_pool_max_connections \(pool.maximum)",
            "# HELP inbox_db_pool_waiting Requests waiting for a database connection of the API's pool.", "# TYPE inbox_db_pool_waiting gauge",
            "inbox_db_pool_waiting \(pool.waiting)",
        ].joined(separator: "\n") + "\n"
    }

    /// `inbox_build_info{version,commit} 1`: which build answers (Prometheus' info-metric idiom).
    static func buildInfo(_ build: [String: String]) -> String {
        let labels = build.sorted { $0.key < $1.key }.map { #"\#($0.key)="\#(RequestMetrics.escape($0.value))""# }.joined(separator: ",")
        return "# HELP inbox_build_info The build of this process.\n# TYPE inbox_build_info gauge\ninbox_build_info{\(labels)} 1\n"
    }

    /// The inline writes' lines: their group commits, and by projection how many writes had it
    /// applied inline (read-your-writes) or left it to the projector (`deferred`: the author may
    /// not see the write on the next read; a share that grows says that something holds the
    /// writers back, docs/projections.md "The inline driver").
    static func inlineMetrics(_ statistics: InlineGroupCommit.Statistics) -> String {
        var lines = [
            "# HELP inbox_inline_groups_total Transactions the API's inline writes were committed in (group commit).",
            "# TYPE inbox_inline_groups_total counter", "inbox_inline_groups_total \(statistics.groups)",
            "# HELP inbox_inline_requests_total Inline writes (each a request's append), committed or refused.",
            "# TYPE inbox_inline_requests_total counter", "inbox_inline_requests_total \(statistics.requests)",
            "# HELP inbox_inline_projections_total Committed inline writes by projection: applied inline, or deferred to the projector.",
            "# TYPE inbox_inline_projections_total counter",
        ]
        for name in Set(statistics.applied.keys).union(statistics.deferred.keys).sorted() {
            lines.append(#"inbox_inline_projections_total{projection="\#(RequestMetrics.escape(name))",outcome="applied"} \#(statistics.applied[name] ?? 0)"#)
            lines.append(#"inbox_inline_projections_total{projection="\#(RequestMetrics.escape(name))",outcome="deferred"} \#(statistics.deferred[name] ?? 0)"#)
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// A cache's lines: `inbox_<name>_cache_hits_total`, `_misses_total`, `_bytes`, `_listening`.
    static func cacheMetrics(_ name: String, _ what: String, _ statistics: (hits: Int, misses: Int, bytes: Int), listening: Bool) -> String {
        let prefix = "inbox_\(name)_cache"
        return [
            "# HELP \(prefix)_hits_total \(what) answered from memory.", "# TYPE \(prefix)_hits_total counter",
            "\(prefix)_hits_total \(statistics.hits)",
            "# HELP \(prefix)_misses_total \(what) read from the database.", "# TYPE \(prefix)_misses_total counter",
            "\(prefix)_misses_total \(statistics.misses)",
            "# HELP \(prefix)_bytes Bytes of \(what.lowercased()) kept.", "# TYPE \(prefix)_bytes gauge", "\(prefix)_bytes \(statistics.bytes)",
            "# HELP \(prefix)_listening 1 while the cache hears of every change (it answers nothing otherwise).",
            "# TYPE \(prefix)_listening gauge", "\(prefix)_listening \(listening ? 1 : 0)",
        ].joined(separator: "\n") + "\n"
    }

    static func databaseMetrics(on connection: PostgresConnection) throws -> String {
        let head = try connection.query("SELECT coalesce(max(position), 0) FROM events").scalar(Int64.self)
        var lines = [
            "# HELP inbox_event_log_head_position The highest position in the event log.",
            "# TYPE inbox_event_log_head_position gauge",
            "inbox_event_log_head_position \(head)",
        ]
        var positions: [String] = []
        var behind: [String] = []
        var lags: [String] = []
        var parked: [String] = []
        for state in try ProjectionHealth.read(countingBehind: false, on: connection) {
            let label = "projection=\"\(state.name)\""
            positions.append("inbox_projection_position{\(label)} \(state.position)")
            behind.append("inbox_projection_positions_behind{\(label)} \(max(0, head - state.position))")
            lags.append("inbox_projection_lag_seconds{\(label)} \(state.lagSeconds ?? 0)")
            parked.append("inbox_projection_dead_letters{\(label)} \(state.parked)")
        }
        lines += ["# HELP inbox_projection_position The log position each projection has applied up to.", "# TYPE inbox_projection_position gauge"] + positions
        lines += ["# HELP inbox_projection_positions_behind The head position minus the projection's.", "# TYPE inbox_projection_positions_behind gauge"] + behind
        lines += ["# HELP inbox_projection_lag_seconds Age of the oldest event the projection has not applied (0 when caught up).", "# TYPE inbox_projection_lag_seconds gauge"] + lags
        lines += ["# HELP inbox_projection_dead_letters Events parked because they could not be applied.", "# TYPE inbox_projection_dead_letters gauge"] + parked
        lines += try pushMetrics(on: connection)
        lines += try shopReminderMetrics(on: connection)
        lines += try mailMetrics(on: connection)
        return lines.joined(separator: "\n") + "\n"
    }

    /// The schedule's `shop_unanswered` reminders (docs/schedule.md), summed over every node: one
    /// row per shop, so a sum of a few thousand rows at most. None before sql/012 is applied.
    static func shopReminderMetrics(on connection: PostgresConnection) throws -> [String] {
        guard try connection.query("SELECT to_regclass('shop_reminders') IS NOT NULL").scalar(Bool.self) else { return [] }
        let row = try connection.query("SELECT coalesce(sum(reminders), 0)::bigint, coalesce(sum(messages), 0)::bigint FROM shop_reminders")[0]
        return [
            "# HELP inbox_shop_reminders_total shop_unanswered reminders written to the push outbox (one per shop and check at most).",
            "# TYPE inbox_shop_reminders_total counter", "inbox_shop_reminders_total \(try row.decode(Int64.self, at: 0))",
            "# HELP inbox_shop_reminder_messages_total Waiting buyer messages the shop_unanswered reminders were about.",
            "# TYPE inbox_shop_reminder_messages_total counter", "inbox_shop_reminder_messages_total \(try row.decode(Int64.self, at: 1))",
        ]
    }

    /// The mail outbox (docs/mail.md): what waits, and what became of the mails, summed over
    /// every node. None before sql/014 is applied.
    static func mailMetrics(on connection: PostgresConnection) throws -> [String] {
        guard try connection.query("SELECT to_regclass('mail_counters') IS NOT NULL").scalar(Bool.self) else { return [] }
        let status = try MailOutboxStore.status(on: connection)
        var lines = [
            "# HELP inbox_mail_outbox_undecided Notifications the mailers have not decided yet.", "# TYPE inbox_mail_outbox_undecided gauge",
            "inbox_mail_outbox_undecided \(status.undecided)",
            "# HELP inbox_mail_queued Notifications queued for a mail (gathered, saved search, shop digest or sold).", "# TYPE inbox_mail_queued gauge",
            "inbox_mail_queued \(status.queued)",
            "# HELP inbox_mail_total Mails and notifications by outcome (sent, retried, dropped, no_contact, queued, notifications_sent, "
                + "skipped.<reason>, switched_off, ...).",
            "# TYPE inbox_mail_total counter",
        ]
        for (name, count) in status.counters.sorted(by: { $0.key < $1.key }) {
            lines.append("inbox_mail_total{outcome=\"\(RequestMetrics.escape(name))\"} \(count)")
        }
        return lines
    }

    /// The fan-out's outbox, what became of its pushes (summed over every node), and the age of
    /// each node's provider tokens.
    static func pushMetrics(on connection: PostgresConnection) throws -> [String] {
        let status = try FanoutStore.status(on: connection)
        var lines = [
            "# HELP inbox_push_outbox_undecided Notifications the fan-out has not decided yet.", "# TYPE inbox_push_outbox_undecided gauge",
            "inbox_push_outbox_undecided \(status.undecided)",
            "# HELP inbox_push_outbox_undecided_oldest_seconds Age of the oldest notification not decided yet.",
            "# TYPE inbox_push_outbox_undecided_oldest_seconds gauge", "inbox_push_outbox_undecided_oldest_seconds \(status.oldestUndecidedSeconds)",
            "# HELP inbox_push_outbox_sending Notifications decided whose pushes a fan-out is sending.", "# TYPE inbox_push_outbox_sending gauge",
            "inbox_push_outbox_sending \(status.sending)",
            "# HELP inbox_push_outbox_abandoned Notifications held by a fan-out whose claim ran out, waiting for another to take them over.",
            "# TYPE inbox_push_outbox_abandoned gauge", "inbox_push_outbox_abandoned \(status.abandoned)",
            "# HELP inbox_push_pending Pushes waiting to be tried again.", "# TYPE inbox_push_pending gauge",
            "inbox_push_pending \(status.pending)",
            "# HELP inbox_push_pending_oldest_seconds Age of the oldest push not sent yet.", "# TYPE inbox_push_pending_oldest_seconds gauge",
            "inbox_push_pending_oldest_seconds \(status.oldestPendingSeconds)",
            "# HELP inbox_push_total Pushes by outcome (sent, failed, deleted registrations, retried, skipped, reclaimed) and platform or reason.",
            "# TYPE inbox_push_total counter",
        ]
        for counter in status.counters where !PushLatency.isLatency(counter.name) {
            let parts = counter.name.split(separator: ".", maxSplits: 1)
            let outcome = String(parts[0])
            let detail = parts.count > 1 ? String(parts[1]) : ""
            lines.append("inbox_push_total{outcome=\"\(RequestMetrics.escape(outcome))\",detail=\"\(RequestMetrics.escape(detail))\"} \(counter.count)")
        }
        lines += PushLatency.metricLines(status.counters)
        lines += ["# HELP inbox_push_provider_token_age_seconds Age of each node's APNs provider token and FCM access token.",
                  "# TYPE inbox_push_provider_token_age_seconds gauge"]
        for token in status.providerTokens {
            lines.append(
                "inbox_push_provider_token_age_seconds{node=\"\(RequestMetrics.escape(token.node))\",provider=\"\(token.provider)\"} \(token.ageSeconds)")
        }
        return lines
    }
}
