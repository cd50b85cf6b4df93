import Encodings
import EventLog
import Foundation
import Glibc
import Mail
import Mailer
import PostgresClient
import Projections

/// The mail outbox end to end (docs/mail.md, "The mail outbox"): person notifications written to
/// `notification_outbox` (whose trigger fills `mail_pending`), then `MailSender.round(limit: 100)`
/// in a loop until nothing is left to decide or claim: deciding, claiming, reading the contacts,
/// rendering each mail in the contact's language with unsubscribe links and List-Unsubscribe,
/// handing it to the transport and recording it, one transaction per step as `inbox mail` does.
///
/// Three rows over the same rounds, interleaved: through `SMTPTransport` (libcurl, plain SMTP) to a
/// sink on 127.0.0.1 (`SMTPSink`, in this process, whose CPU is measured apart); through a
/// transport that composes the mail's bytes and drops them, so that the tier's own cost and
/// SMTP's are separable; and the ceiling, Postfix's `smtp-source` handing as many mails of the same
/// size to its `smtp-sink` (`PostfixCeiling`). 2,000 people with a contact each (en, nl, de, fr in turn) and 1 to 5
/// notifications each (6,000 in all) per round; `--scale` multiplies the people. Before each round,
/// untimed, the outbox and the mailer's tables are emptied and the notifications written again
/// under new ids, so every round mails the same people the same notifications.
struct MailBenchmark: Benchmark {
    var rounds: Int
    var scale: Double

    static let people = 2_000
    /// The mailer's batch: entries decided and people claimed per round, as `MailService`'s default.
    static let batch = 100
    /// The mailer's loops, as `inbox mail` runs them by default (`INBOX_MAIL_WORKERS`).
    static let workers = MailService.Options().workers
    static let publicURL = "https://inbox.wristler.eu"

    func run(on database: BenchmarkDatabase) async throws -> BenchmarkResult {
        // Before anything is loaded: the ceiling's tools are there.
        try PostfixCeiling.requireTools()
        let people = max(10, Int(Double(Self.people) * scale))
        // Person g has 1 + g % 5 notifications.
        let notifications = (0..<people).reduce(0) { $0 + 1 + $1 % 5 }
        let client = database.client
        // The mailer reads `notification_preferences`, a read model's table.
        try await InboxProjections.prepareLiveTables(client: client)
        progress("writing the contacts of \(people) people (en, nl, de, fr in turn)")
        try await client.withConnection { connection in
            _ = try connection.execute(
                """
                INSERT INTO contacts (person_id, address, language)
                SELECT 'p' || g, 'person.' || g || '@mail.example.com', (ARRAY['en', 'nl', 'de', 'fr'])[g % 4 + 1]
                FROM generate_series(0, \(people - 1)) AS g;
                ANALYZE contacts;
                """)
        }

        let sink = try SMTPSink()
        defer { sink.stop() }
        let key = Base64URL.encode((0..<32).map { UInt8(($0 * 37 + 11) % 256) })
        let configuration = try MailConfiguration.from(environment: [
            "INBOX_SMTP_URL": "smtp://127.0.0.1:\(sink.port)", "INBOX_SMTP_ALLOW_PLAIN": "1",
            "INBOX_MAIL_FROM": "Wristler <notifications@wristler.eu>", "INBOX_UNSUBSCRIBE_KEYS": "1:\(key)",
        ])
        guard let signer = configuration.unsubscribe else { throw BenchmarkFailure(description: "the unsubscribe keys were not read") }
        let links = MailRenderer.Links(signer: signer, publicURL: Self.publicURL)
        let smtp = TimedTransport(try configuration.makeTransport())
        let discarding = DiscardingTransport()
        let discard = TimedTransport(discarding)
        progress("SMTP sink on 127.0.0.1:\(sink.port); \(people) people, \(notifications) notifications per round")

        // Where the time goes, by process: CPU seconds hardly move with the machine's other load.
        let postmaster = try await client.withConnection { connection in
            ProcessCPU.parent(of: Int32(try connection.query("SELECT pg_backend_pid()").scalar(Int.self)))
        }
        @Sendable func cpu() -> [String: Double] {
            let sinkSeconds = sink.totals.cpuSeconds
            // The sink's threads are in this process: the mailer's share is the rest.
            var seconds = ["mailer": ProcessCPU.seconds(of: getpid()) - sinkSeconds, "SMTP sink": sinkSeconds]
            if let postmaster { seconds["PostgreSQL"] = ProcessCPU.seconds(of: postmaster, children: true) }
            return seconds
        }

        // The mailer's own session, preparing its statements as `MailService`'s does.
        let mailerClient = try PostgresClient(
            configuration: .init(
                connection: try await client.withConnection { $0.configuration }.withPreparedStatements(MailService.preparedStatements),
                maximumConnections: Self.workers, applicationName: "inbox-bench-mailer"))
        defer { mailerClient.close() }
        let log = MailRounds()
        func mailAll(_ label: String, transport: TimedTransport) -> @Sendable (Int) async throws -> Measurement {
            { round in
                try await Self.fillOutbox(client, people: people, tag: "\(label)-\(round)")
                let sender = MailSender(store: MailOutboxStore(), transport: transport, from: configuration.from, links: links)
                let sinkBefore = sink.totals
                let sendingBefore = transport.seconds
                let cpuBefore = cpu()
                // The service's loops, each on its own session, until each finds nothing to decide
                // or claim: what another still holds, that one finishes.
                let started = ContinuousClock.now
                let loops = try await withThrowingTaskGroup(of: (mails: Int, steps: Int, other: [String: Int]).self) { group in
                    for _ in 0..<Self.workers {
                        group.addTask {
                            try await mailerClient.withConnection { connection in
                                var (mails, steps, other) = (0, 0, [String: Int]())
                                while true {
                                    let step = try sender.round(limit: Self.batch, on: connection)
                                    steps += 1
                                    for outcome in step.outcomes.values {
                                        if outcome == .sent { mails += 1 } else { other["\(outcome)", default: 0] += 1 }
                                    }
                                    if step.claimed == 0 && step.decided.entries == 0 { return (mails, steps, other) }
                                }
                            }
                        }
                    }
                    return try await group.reduce(into: (mails: 0, steps: 0, other: [String: Int]())) { total, loop in
                        total.mails += loop.mails
                        total.steps += loop.steps
                        total.other.merge(loop.other, uniquingKeysWith: +)
                    }
                }
                let elapsed = ContinuousClock.now - started
                let (mails, steps, other) = loops
                let notificationsSent = Int(try await mailerClient.withConnection { try MailOutboxStore.counters(on: $0) }["notifications_sent"] ?? 0)
                guard mails == people, other.isEmpty else {
                    throw BenchmarkFailure(description: "\(label): \(mails) of \(people) people were mailed; besides: \(other)")
                }
                let used = cpu().reduce(into: [String: Double]()) { result, process in
                    result[process.key] = ((process.value - (cpuBefore[process.key] ?? 0)) * 1_000_000 / Double(mails)).rounded()
                }
                let sinkAfter = sink.totals
                let received = sinkAfter.mails - sinkBefore.mails
                if transport.inner is SMTPTransport, received != mails {
                    throw BenchmarkFailure(description: "\(label): the sink took \(received) mails of the \(mails) recorded sent")
                }
                let seconds = elapsed.inSeconds
                let sending = (transport.seconds - sendingBefore) * 1000 / Double(mails)
                let line =
                    "\(label) round \(round): \(mails) mails, \(notificationsSent) notifications in \(String(format: "%.2f", seconds)) s "
                    + "(\(steps) mailer rounds), \(formatGrouped(Double(notificationsSent) / seconds)) notifications/s; "
                    + "\(String(format: "%.2f", seconds * 1000 / Double(mails))) ms per mail, of which \(String(format: "%.2f", sending)) ms in send; CPU per mail: "
                    + used.sorted { $0.key < $1.key }.map { "\($0.key) \(Int($0.value)) µs" }.joined(separator: ", ")
                    + (received > 0 ? String(format: "; the sink busy %.0f%% of the time", (sinkAfter.cpuSeconds - sinkBefore.cpuSeconds) / seconds * 100) : "")
                progress("  " + line)
                log.add(label: label, line: line, notificationsPerSecond: Double(notificationsSent) / seconds)
                var measurement = Measurement(round: round, events: mails, elapsed: elapsed)
                measurement.cpuMicrosecondsPerEvent = used
                return measurement
            }
        }

        let cases = [
            BenchmarkCase(
                id: "mail-smtp", title: "mail end to end, SMTP to a local sink", description:
                    "Notifications decided, people claimed, mails rendered (4 languages, unsubscribe links, List-Unsubscribe), sent with SMTPTransport (libcurl, plain SMTP, one reused connection) to a sink on 127.0.0.1, and recorded; rounds of 100 until done: mails/s.",
                kind: .client, batchSize: Self.batch, appenders: 1, eventsPerRound: people, run: mailAll("smtp", transport: smtp)),
            BenchmarkCase(
                id: "mail-render-only", title: "mail, rendered and composed, not sent", description:
                    "The same rounds with a transport that composes each mail's bytes (MailMessage.rendered(), as SMTPTransport does first) and drops them: the tier's own cost without SMTP.",
                kind: .client, batchSize: Self.batch, appenders: 1, eventsPerRound: people, run: mailAll("render-only", transport: discard)),
            BenchmarkCase(
                id: "smtp-source-sink", title: "Postfix smtp-source to smtp-sink", description:
                    "The ceiling: Postfix's smtp-source (Debian's postfix package) handing as many mails, of the size the mailer composes, to its smtp-sink on 127.0.0.1, \(PostfixCeiling.sessions) sessions each keeping its connection (-d), the sink discarding: the most any SMTP client gets from a local sink on this machine, with its CPU per mail.",
                kind: .serverSide, batchSize: Self.batch, appenders: 1, eventsPerRound: people,
                run: { round in
                    // The composed size so far (the render-only rows), or a typical one before them.
                    let composed = discarding.totals
                    let bytes = composed.mails > 0 ? composed.bytes / composed.mails : 4_000
                    return try await BlockingThread.run { try PostfixCeiling.run(mails: people, bytes: bytes, round: round) }
                }),
        ]
        let configurations = try await runInterleaved(cases, rounds: rounds, unit: "mails")
        let composed = discarding.totals
        let sinkTotals = sink.totals
        var notes = [
            "people": "\(people), each with a contact (en, nl, de, fr in turn) and 1 to 5 notifications (messages, saved_watches, orders)",
            "notifications per round": "\(notifications) written; the few whose person a batch of 100 split are not in that person's mail and wait for the next, a gathering later (as in production)",
            "notifications per second (median)": log.medians,
            "rounds": log.text,
            "mailer": "MailSender.round(limit: \(Self.batch)) on each of \(Self.workers) connections (the service's loops) until nothing is decided or claimed; unsubscribe links to \(Self.publicURL)",
            "sink": "SMTPSink: plain sockets in this process, a thread per connection, data discarded; \(sinkTotals.connections) connection(s) in all",
        ]
        if composed.mails > 0 { notes["mail size"] = "\(composed.bytes / composed.mails) bytes composed on average" }
        return BenchmarkResult(benchmark: "mail", configurations: configurations, notes: notes)
    }

    /// Empties the outbox and the mailer's tables (untimed) and writes every person's
    /// notifications under new ids; the outbox's trigger puts them in `mail_pending`. Only whole
    /// tables are named, never their columns, so the mailer's schema may change beneath.
    static func fillOutbox(_ client: PostgresClient, people: Int, tag: String) async throws {
        try await client.withConnection { connection in
            _ = try connection.execute(
                """
                TRUNCATE notification_outbox, notification_outbox_pending, mail_pending, mail_queue, mail_people, mail_counters CASCADE;
                INSERT INTO notification_outbox (notification_id, audience, recipient_id, category, event, ids, source_position, created_at)
                SELECT 'mail-\(tag)-' || g || '-' || k, 'person', 'p' || g,
                    (ARRAY['messages', 'saved_watches', 'orders'])[(g + k) % 3 + 1],
                    (ARRAY['message_received', 'price_dropped', 'order_paid'])[(g + k) % 3 + 1],
                    CASE (g + k) % 3 WHEN 0 THEN jsonb_build_object('conversationId', 'c' || g, 'messageId', 'm' || g || '-' || k)
                        WHEN 1 THEN jsonb_build_object('watchId', 'w' || (g * 7 + k) % 997)
                        ELSE jsonb_build_object('orderId', 'o' || g || '-' || k, 'watchId', 'w' || g % 997) END,
                    g * 5 + k, now() - (5 - k) * interval '3 minutes'
                FROM generate_series(0, \(people - 1)) AS g, generate_series(0, 4) AS k
                WHERE k <= g % 5
                ORDER BY g, k;
                ANALYZE notification_outbox, mail_pending;
                """)
        }
    }
}

/// Adds up the time spent in `send`: composing and handing the mail over, apart from deciding,
/// claiming, rendering and recording around it.
final class TimedTransport: MailTransport, @unchecked Sendable {
    let inner: any MailTransport
    private let lock = NSLock()
    private var spent: Duration = .zero

    init(_ inner: any MailTransport) { self.inner = inner }

    func send(_ message: MailMessage) -> MailOutcome {
        let started = ContinuousClock.now
        let outcome = inner.send(message)
        let elapsed = ContinuousClock.now - started
        lock.withLock { spent += elapsed }
        return outcome
    }

    /// Seconds spent in `send` so far.
    var seconds: Double { lock.withLock { spent.inSeconds } }
}

/// Composes each mail as `SMTPTransport` would before sending, and drops it.
final class DiscardingTransport: MailTransport, @unchecked Sendable {
    private let lock = NSLock()
    private var mails = 0
    private var bytes = 0

    func send(_ message: MailMessage) -> MailOutcome {
        let composed = message.rendered()
        lock.withLock {
            mails += 1
            bytes += composed.count
        }
        return .sent
    }

    var totals: (mails: Int, bytes: Int) { lock.withLock { (mails, bytes) } }
}

/// Each round's line for the notes, and the notifications per second of each row.
final class MailRounds: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: [String] = []
    private var rates: [String: [Double]] = [:]

    func add(label: String, line: String, notificationsPerSecond: Double) {
        lock.withLock {
            lines.append(line)
            rates[label, default: []].append(notificationsPerSecond)
        }
    }

    var text: String { lock.withLock { lines.joined(separator: "; ") } }

    var medians: String {
        lock.withLock { rates.sorted { $0.key > $1.key }.map { "\($0.key) \(formatGrouped(median($0.value)))" }.joined(separator: ", ") }
    }
}

/// Postfix's own SMTP client and sink (`smtp-source`, `smtp-sink`), the mail benchmark's ceiling
/// as h2load is the fan-out's.
enum PostfixCeiling {
    static let source = "/usr/sbin/smtp-source"
    static let sink = "/usr/sbin/smtp-sink"
    /// Sessions of smtp-source: from 4 on, its rate hardly changes with the machine's other load,
    /// while one session's swings with it (about 3,000 to 15,000 mails/s here).
    static let sessions = 4

    static func requireTools() throws {
        for tool in [source, sink] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw BenchmarkFailure(description: "\(tool) is missing: install Debian's postfix package for the mail benchmark's ceiling (make bench-deps)")
        }
    }

    /// smtp-source sending `mails` mails of about `bytes` to a new smtp-sink; the sink's count
    /// of messages must be `mails`. The CPU per mail of both is in the measurement.
    static func run(mails: Int, bytes: Int, round: Int) throws -> Measurement {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-smtp-ceiling-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let counts = directory.appendingPathComponent("sink.out")
        _ = FileManager.default.createFile(atPath: counts.path, contents: nil)
        let cpuBefore = childrenCPUSeconds()
        // Its readiness check is a connection that says nothing: a session in the sink's counts, not a message.
        let (sinkProcess, port) = try NGHTTPSink.startListening(base: 40_000, what: "smtp-sink") { candidate in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: sink)
            // As root, smtp-sink must be told whom to run as; as anybody else it must not.
            process.arguments = (getuid() == 0 ? ["-u", "nobody"] : []) + ["-c", "127.0.0.1:\(candidate)", "1024"]
            process.standardOutput = try FileHandle(forWritingTo: counts)
            process.standardError = FileHandle.nullDevice
            return process
        }
        defer {
            if sinkProcess.isRunning { kill(sinkProcess.processIdentifier, SIGKILL) }
            sinkProcess.waitUntilExit()
        }
        // smtp-source's -l is the body's length; its four headers add about 135 bytes.
        let started = ContinuousClock.now
        let (status, output) = try Subprocess.run(
            source,
            [
                "-d", "-s", String(sessions), "-l", String(max(100, bytes - 135)), "-m", String(mails), "-M", "bench.local", "-f", "notifications@bench.local",
                "-t", "person@bench.local", "127.0.0.1:\(port)",
            ])
        let elapsed = ContinuousClock.now - started
        guard status == 0 else { throw BenchmarkFailure(description: "smtp-source failed (\(status)): \(output)") }
        // The sink writes "sess=N quit=N mesg=N\r" as each message ends, before its answer: when
        // the source is done, the last one counts them all. (SIGKILL: this process ignores SIGTERM
        // for its own handling, and a child inherits that.)
        kill(sinkProcess.processIdentifier, SIGKILL)
        sinkProcess.waitUntilExit()
        let text = (try? String(contentsOf: counts, encoding: .utf8)) ?? ""
        let last = text.split(separator: "\r").last(where: { $0.contains("mesg=") }) ?? ""
        let received = last.split(separator: " ").first(where: { $0.hasPrefix("mesg=") }).flatMap { Int($0.dropFirst(5)) } ?? 0
        guard received == mails else { throw BenchmarkFailure(description: "smtp-sink took \(received) mails of the \(mails) smtp-source sent (\(last))") }
        let perMail = ((childrenCPUSeconds() - cpuBefore) * 1_000_000 / Double(mails)).rounded()
        progress("  smtp-source round \(round): \(mails) mails of about \(bytes) bytes in \(String(format: "%.2f", elapsed.inSeconds)) s; CPU per mail: smtp-source and smtp-sink \(Int(perMail)) µs")
        var measurement = Measurement(round: round, events: mails, elapsed: elapsed)
        measurement.cpuMicrosecondsPerEvent = ["smtp-source and smtp-sink": perMail]
        return measurement
    }

    /// CPU seconds of the children this process has waited for.
    static func childrenCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_CHILDREN.rawValue, &usage)
        let seconds = { (time: timeval) in Double(time.tv_sec) + Double(time.tv_usec) / 1_000_000 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }
}
