import Crypto
import EventLog
import Foundation
import InboxDomain
import InboxSimulation
import PostgresClient
import Projections

/// What sealing personal data costs (docs/event-log.md, "Personal data"): the same work with the
/// people's data keys installed and without, side by side in one run, on two databases of one
/// server (one log written sealed, one not):
///
/// - `append-*`: `EventStore.append` of client batches of 100 messages from 1,000 authors (every
///   event sealed: the worst case);
/// - `append-mix-*`: the same of batches of 100 events of the simulated marketplace (the share of
///   personal events a log has);
/// - `post-*`: one message at a time appended and projected inline into the threads, as a post is
///   (the threads brought up to the head by their projector first, untimed);
/// - `replay-*`: `Replayer.catchUp` of every projection over the log: the simulated events, and
///   what the rounds before appended.
struct SealingBenchmark: Benchmark {
    var rounds: Int
    var scale: Double

    static let appendEvents = 20_000
    static let posts = 2_000
    static let replayEvents = 200_000
    static let authors = 1_000
    static let sealPasses = 10

    func run(on database: BenchmarkDatabase) async throws -> BenchmarkResult {
        let plain = database.client
        let sealedDatabase = "inbox_bench_sealed"
        try await plain.withConnection { connection in
            _ = try connection.execute("DROP DATABASE IF EXISTS \(sealedDatabase)")
            _ = try connection.execute("CREATE DATABASE \(sealedDatabase)")
        }
        let sealedConfiguration = try await plain.withConnection { $0.configuration }.withDatabase(sealedDatabase)
        let sealed = try PostgresClient(
            configuration: .init(connection: sealedConfiguration, maximumConnections: BenchmarkDatabase.poolSize, applicationName: "inbox-bench"))
        defer { sealed.close() }
        let environment = ProcessInfo.processInfo.environment
        try await Migrator(directory: try Migrator.locateDirectory(explicit: environment["INBOX_MIGRATIONS_DIR"])).migrate(client: sealed)
        let keys = PersonalDataKeys(kek: try SecretsKey(bytes: SecureRandom.bytes(32)))

        let replayTotal = max(10_000, Int(Double(Self.replayEvents) * scale))
        progress("loading \(formatGrouped(Double(replayTotal))) simulated events into each log (one sealed)")
        for (client, withKeys) in [(plain, false), (sealed, true)] {
            PersonalDataKeys.swapForMeasuring(withKeys ? keys : nil)
            var simulation = MarketplaceSimulation(configuration: .init(people: 5_000, shops: 100, watches: 2_000, seed: 35))
            let store = EventStore(client: client)
            var loaded = 0
            while loaded < replayTotal {
                let chunk = simulation.events(min(500, replayTotal - loaded))
                _ = try await store.append(chunk)
                loaded += chunk.count
            }
        }
        PersonalDataKeys.swapForMeasuring(nil)

        let appendTotal = max(1_000, Int(Double(Self.appendEvents) * scale))
        let postTotal = max(200, Int(Double(Self.posts) * scale))
        // Each sealed row runs right beside its unsealed twin, both after a CHECKPOINT (untimed): the
        // replay rows write a read model's worth of pages, and the checkpoint that follows them
        // would otherwise always fall on whichever rows come next in the rotation.
        let logs = [("unsealed", plain, Optional<PersonalDataKeys>.none), ("sealed", sealed, Optional(keys))]
        func pair(
            _ kind: String, title: String, description: @escaping @Sendable (Bool) -> String, batchSize: Int, eventsPerRound: Int,
            _ body: @escaping @Sendable (PostgresClient, String, Int) async throws -> Measurement
        ) -> [BenchmarkCase] {
            logs.map { name, client, installed in
                BenchmarkCase(
                    id: "\(kind)-\(name)", title: "\(title), \(name)", description: description(installed != nil),
                    kind: .client, batchSize: batchSize, appenders: 1, eventsPerRound: eventsPerRound,
                    run: { round in
                        try await client.execute("CHECKPOINT")
                        PersonalDataKeys.swapForMeasuring(installed)
                        defer { PersonalDataKeys.swapForMeasuring(nil) }
                        let before = try await ProjectionBenchmark.cpuSeconds(client: client)
                        var measurement = try await body(client, name, round)
                        // A row with untimed work in its body (the post rows' catch-up) measures its own.
                        if measurement.cpuMicrosecondsPerEvent == nil {
                            measurement.cpuMicrosecondsPerEvent = try await Self.cpuPerEvent(since: before, events: measurement.events, client: client)
                        }
                        return measurement
                    })
            }
        }
        var cases: [BenchmarkCase] = []
        cases += pair(
            "append", title: "append, batches of 100 messages",
            description: { "EventStore.append of batches of 100 message_sent events of 1,000 authors\($0 ? ", each body sealed under its author's key" : "")." },
            batchSize: 100, eventsPerRound: appendTotal
        ) { client, name, round in try await Self.append(client: client, events: appendTotal, round: round, tag: name) }
        cases += pair(
            "append-mix", title: "append, batches of 100 simulated events",
            description: {
                "EventStore.append of batches of 100 events of the simulated marketplace (messages, orders, bell reads, searches...)\($0 ? ", the personal ones sealed" : "")."
            },
            batchSize: 100, eventsPerRound: appendTotal
        ) { client, _, round in try await Self.appendMix(client: client, events: appendTotal, round: round) }
        cases += pair(
            "post", title: "post, one message inline",
            description: { "One message_sent at a time appended and projected inline into the threads (a post's write)\($0 ? ", sealed" : "")." },
            batchSize: 1, eventsPerRound: postTotal
        ) { client, name, round in try await Self.post(client: client, posts: postTotal, round: round, tag: name) }
        cases += pair(
            "replay", title: "replay, every projection",
            description: { "Replayer.catchUp of the four projections over the whole log (the simulated events and what the rounds before appended)\($0 ? ", sealed, its keys read per batch" : "")." },
            batchSize: ProjectionBenchmark.replayBatch, eventsPerRound: replayTotal
        ) { client, _, round in
            // The whole log, which the append and post rows of the rounds before have grown.
            let events = try await client.withConnection { try $0.query("SELECT count(*) FROM events").scalar(Int64.self) }
            return try await ProjectionBenchmark.replay(client: client, events: Int(events), round: round)
        }
        // The client's own part of a replay: decoding the messages of each log, read once.
        for (name, client, withKeys) in [("unsealed", plain, false), ("sealed", sealed, true)] {
            PersonalDataKeys.swapForMeasuring(withKeys ? keys : nil)
            let records = try await client.withConnection { connection in
                try PersonalDataKeys.attachKeys(
                    to: try connection.query("SELECT * FROM events WHERE type = 'message_sent' ORDER BY position").map(RecordedEvent.init(row:)),
                    on: connection)
            }
            PersonalDataKeys.swapForMeasuring(nil)
            cases.append(
                BenchmarkCase(
                    id: "decode-\(name)", title: "decoding messages, \(name)", description: "ProjectedEvent.decode of every message_sent of the \(name) log, in memory.",
                    kind: .client, batchSize: records.count, appenders: 1, eventsPerRound: records.count,
                    run: { round in
                        let started = ContinuousClock.now
                        for record in records { _ = try ProjectedEvent.decode(record) }
                        return Measurement(round: round, events: records.count, elapsed: ContinuousClock.now - started)
                    }))
        }
        // The client's own part of a sealed append: sealing the same messages, nothing written,
        // `sealPasses` times over (one pass took 40 to 100 ms, too short to tell builds apart), with
        // the benchmark's CPU a message.
        cases.append(
            BenchmarkCase(
                id: "seal-only", title: "sealing alone, no append",
                description: "PersonalDataKeys sealing the append's messages in batches of 100 (keys known), \(Self.sealPasses) times over, nothing sent.",
                kind: .client, batchSize: 100, appenders: 1, eventsPerRound: appendTotal * Self.sealPasses,
                run: { round in
                    let events = try (0..<appendTotal).map { try Self.message(round, "seal", $0) }
                    let batches = stride(from: 0, to: events.count, by: 100).map { Array(events[$0..<min(events.count, $0 + 100)]) }
                    return try await sealed.withConnection { connection in
                        _ = try keys.sealedForMeasuring(batches[0], on: connection)
                        let cpuBefore = ProcessCPU.seconds(of: getpid())
                        let started = ContinuousClock.now
                        for _ in 0..<Self.sealPasses {
                            for batch in batches { _ = try keys.sealedForMeasuring(batch, on: connection) }
                        }
                        var measurement = Measurement(round: round, events: appendTotal * Self.sealPasses, elapsed: ContinuousClock.now - started)
                        measurement.cpuMicrosecondsPerEvent = [
                            "inbox-bench": (ProcessCPU.seconds(of: getpid()) - cpuBefore) * 1e6 / Double(appendTotal * Self.sealPasses)
                        ]
                        return measurement
                    }
                }))
        let configurations = try await runInterleaved(cases, rounds: rounds)
        var notes: [String: String] = ["replayEvents": "\(replayTotal)", "appendEvents": "\(appendTotal)", "posts": "\(postTotal)"]
        // Each round's sealed rate over the unsealed rate measured beside it, their median: a
        // neighbour that slows the machine for a round slows both halves of that round's pair.
        let measured = Dictionary(configurations.map { ($0.id, $0.rounds) }, uniquingKeysWith: { first, _ in first })
        for kind in ["append", "append-mix", "post", "replay"] {
            guard let off = measured["\(kind)-unsealed"], let on = measured["\(kind)-sealed"] else { continue }
            let ratios = zip(on, off).compactMap { sealed, unsealed in unsealed.eventsPerSecond > 0 ? sealed.eventsPerSecond / unsealed.eventsPerSecond : nil }
            guard !ratios.isEmpty else { continue }
            let ratio = String(format: "%.3f", median(ratios))
            notes["\(kind)SealedOverUnsealed"] = ratio
            progress("\(kind): sealed over unsealed, median of \(ratios.count) rounds' ratios \(ratio) (\(String(format: "%.2f", ratios.min()!)) to \(String(format: "%.2f", ratios.max()!)))")
            // The same pairs' CPU an event, which a busy neighbour moves far less than a rate.
            let cpu = zip(on, off).compactMap { sealed, unsealed -> (Double, Double)? in
                guard let sealed = sealed.cpuMicrosecondsPerEvent, let unsealed = unsealed.cpuMicrosecondsPerEvent else { return nil }
                return (sealed.values.reduce(0, +), unsealed.values.reduce(0, +))
            }
            if !cpu.isEmpty {
                let cpuRatio = String(format: "%.3f", median(cpu.map { $0.1 / max($0.0, 1e-9) }))
                notes["\(kind)CPUUnsealedOverSealed"] = cpuRatio
                progress(
                    "\(kind): CPU an event, both processes, median \(String(format: "%.1f", median(cpu.map(\.0)))) µs sealed, \(String(format: "%.1f", median(cpu.map(\.1)))) µs unsealed; unsealed over sealed, median of the pairs \(cpuRatio)"
                )
            }
        }
        try await plain.withConnection { connection in _ = try connection.execute("DROP DATABASE IF EXISTS \(sealedDatabase) WITH (FORCE)") }
        return BenchmarkResult(benchmark: "sealing", configurations: configurations, notes: notes)
    }

    static func message(_ round: Int, _ tag: String, _ index: Int) throws -> NewEvent {
        let author = "author-\(index % authors)"
        return try NewEvent(
            catalogueEvent: InboxDomain.MessageSent(
                conversationId: "bench-\(tag)-r\(round)-c\(index % 500)", messageId: "bench-\(tag)-r\(round)-m\(index)", authorSide: .buyer,
                authorId: author, body: "Is the bracelet original? I would like to see it in daylight, message \(index) of round \(round)."))
    }

    static func append(client: PostgresClient, events: Int, round: Int, tag: String) async throws -> Measurement {
        let store = EventStore(client: client)
        let started = ContinuousClock.now
        var index = 0
        while index < events {
            let batch = try (index..<min(events, index + 100)).map { try message(round, tag, $0) }
            _ = try await store.append(batch)
            index += batch.count
        }
        return Measurement(round: round, events: events, elapsed: ContinuousClock.now - started)
    }

    /// The same simulated events for both logs in a round (built before the clock starts).
    static func appendMix(client: PostgresClient, events: Int, round: Int) async throws -> Measurement {
        var simulation = MarketplaceSimulation(configuration: .init(people: 5_000, shops: 100, watches: 2_000, seed: 1_000 + UInt64(round)))
        let batches = (0..<(events + 99) / 100).map { index in simulation.events(min(100, events - index * 100)) }
        let store = EventStore(client: client)
        let started = ContinuousClock.now
        for batch in batches { _ = try await store.append(batch) }
        return Measurement(round: round, events: events, elapsed: ContinuousClock.now - started)
    }

    static func post(client: PostgresClient, posts: Int, round: Int, tag: String) async throws -> Measurement {
        let inline = InlineProjections(projections: [ThreadsProjection()])
        // Each thread started first, as a post is into a thread that exists.
        let starts = try (0..<min(500, posts)).map { index in
            try NewEvent(
                catalogueEvent: InboxDomain.ConversationStarted(
                    conversationId: "bench-post-\(tag)-r\(round)-c\(index)", buyerId: "author-\(index % authors)", shopId: "s1", watchId: "w1"))
        }
        _ = try await EventStore(client: client).append(starts)
        // Untimed: the threads' projector brings them up to the head (their live tables made the
        // first time), as it keeps them in production, so each post is projected inline: behind a
        // backlog longer than the inline driver's limit every post would be left to the projector.
        _ = try await ProjectionBenchmark.project([ThreadsProjection()], client: client)
        let cpuBefore = try await ProjectionBenchmark.cpuSeconds(client: client)
        let started = ContinuousClock.now
        let deferred = try await client.withConnection { connection in
            var deferred = 0
            for index in 0..<posts {
                let event = try NewEvent(
                    catalogueEvent: InboxDomain.MessageSent(
                        conversationId: "bench-post-\(tag)-r\(round)-c\(index % 500)", messageId: "bench-post-\(tag)-r\(round)-m\(index)",
                        authorSide: .buyer, authorId: "author-\(index % 500 % authors)", body: "Still for sale? message \(index)"))
                if !(try inline.appendReporting([event], on: connection).outcome.deferred.isEmpty) { deferred += 1 }
            }
            return deferred
        }
        let elapsed = ContinuousClock.now - started
        let cpu = try await cpuPerEvent(since: cpuBefore, events: posts, client: client)
        // A post behind an older transaction that could append (autovacuum's ANALYZE takes one)
        // is left to the projector, as in production: a few are counted, more fail the round.
        if deferred > 0 { progress("  post round \(round) (\(tag)): \(deferred) of \(posts) posts left to the projector") }
        guard deferred * 100 <= posts else {
            throw BenchmarkFailure(description: "\(deferred) of \(posts) posts were left to the projector, not projected inline")
        }
        var measurement = Measurement(round: round, events: posts, elapsed: elapsed)
        measurement.cpuMicrosecondsPerEvent = cpu
        return measurement
    }

    /// The CPU an event of the benchmark's process and of PostgreSQL's since `before`.
    static func cpuPerEvent(since before: (client: Double, server: Double), events: Int, client: PostgresClient) async throws -> [String: Double] {
        let after = try await ProjectionBenchmark.cpuSeconds(client: client)
        let events = Double(max(1, events))
        return ["inbox-bench": (after.client - before.client) * 1e6 / events, "PostgreSQL": (after.server - before.server) * 1e6 / events]
    }
}
