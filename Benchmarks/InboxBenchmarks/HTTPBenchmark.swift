import Crypto
import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import PostgresClient
import Projections

/// The API under a real HTTP load generator (`wrk`, from Debian), on the same machine: the bell's
/// first page, the device list, both sides' conversation lists, a thread's messages and posting a
/// message, of many people, 64 connections, beside the same server's `/healthz` in the same run.
/// Requests per second, and p50, p99 and p99.9 latency of every round from wrk (in the table and
/// the JSON, each round's `latency`).
struct HTTPBenchmark: Benchmark {
    var rounds: Int
    var scale: Double

    static let people = 2_000
    static let entriesPerPerson = 30
    static let devicesPerPerson = 2
    /// Conversations each person has as a buyer, with as many shops, and the messages in each.
    static let conversationsPerPerson = 3
    static let messagesPerConversation = 6
    /// One shop per this many people, two people working at each.
    static let peoplePerShop = 20
    static let connections = 64
    static let seconds = benchSeconds(standard: 10)

    func run(on database: BenchmarkDatabase) async throws -> BenchmarkResult {
        try Self.requireWrk()
        let client = database.client
        let people = max(10, Int(Double(Self.people) * scale))
        progress("loading \(people) people with \(Self.entriesPerPerson) bell entries and \(Self.devicesPerPerson) devices each")
        var batch: [NewEvent] = []
        let shops = max(1, people / Self.peoplePerShop)
        progress(
            "and \(Self.conversationsPerPerson) conversations each with \(Self.messagesPerConversation) messages, with \(shops) shops of 2 people")
        for shop in 0..<shops {
            batch.append(try NewEvent(ShopMemberAdded(shopId: "shop\(shop)", personId: Self.seller(shop, 0))))
            batch.append(try NewEvent(ShopMemberAdded(shopId: "shop\(shop)", personId: Self.seller(shop, 1))))
        }
        for person in 0..<people {
            // The threads first, so the bell's first page is still the sign-ins the bell rows have
            // always read (the shops' answers are older entries of the same bells).
            for thread in 0..<Self.conversationsPerPerson {
                let shop = (person * Self.conversationsPerPerson + thread) % shops
                let id = Self.conversationId(person: person, thread: thread)
                let watch = "shop\(shop)-w\(person * Self.conversationsPerPerson + thread)"
                batch.append(try NewEvent(WatchStatusChanged(watchId: watch, shopId: "shop\(shop)", status: .forSale)))
                batch.append(
                    try NewEvent(
                        InboxDomain.ConversationStarted(
                            conversationId: id, buyerId: "p\(person)", shopId: "shop\(shop)", watchId: watch)))
                for message in 0..<Self.messagesPerConversation {
                    let fromBuyer = message % 2 == 0
                    batch.append(
                        try NewEvent(
                            InboxDomain.MessageSent(
                                conversationId: id, messageId: "\(id)-m\(message)", authorSide: fromBuyer ? .buyer : .seller,
                                authorId: fromBuyer ? "p\(person)" : Self.seller(shop, message % 4 == 1 ? 0 : 1),
                                body: "Message \(message) about this watch: is the bracelet original, and are the box and papers there?",
                                offer: message == 3 ? Money(amount: 950_000, currency: "EUR") : nil)))
                }
            }
            for entry in 0..<Self.entriesPerPerson {
                batch.append(try NewEvent(SignedIn(personId: "p\(person)", signInId: "s\(person)-\(entry)", platform: "app:ios", device: "iPhone")))
            }
            if batch.count >= 5_000 {
                _ = try await database.store.append(batch)
                batch = []
            }
        }
        if !batch.isEmpty { _ = try await database.store.append(batch) }
        let replayer = Replayer(client: client, projections: InboxProjections.all)
        try await replayer.prepare()
        try await replayer.catchUp()
        try await replayer.swap()
        try await client.execute(
            """
            INSERT INTO devices (person_id, platform, push_token, app_id, app_version, name, locale)
            SELECT 'p' || (g % \(people)), 'ios', 'token-' || g, 'eu.wristler.app', '2.4.0', 'iPhone ' || g, 'nl'
            FROM generate_series(0, \(people * Self.devicesPerPerson - 1)) AS g
            """)
        try await client.execute("ANALYZE")
        if database.isEmbedded { try await Self.prepareWALSegments(client) }
        // The loading's writes go to disk now, not while the rounds are measured: PostgreSQL's
        // checkpoint would otherwise write them back meanwhile, and on this VM's disk the commits
        // and the reads that evict dirty pages wait behind that writeback for up to seconds.
        try await client.execute("CHECKPOINT")

        // The projectors, as `inbox serve` runs them beside the API: each wakes at every commit
        // and reads what it has not applied (INBOX_BENCH_PROJECTORS=0 leaves them out).
        var projectorTasks: [Task<Void, any Error>] = []
        if ProcessInfo.processInfo.environment["INBOX_BENCH_PROJECTORS"] != "0" {
            for projection in InboxProjections.all {
                let projector = Projector(projection: projection, configuration: client.configuration.connection)
                projectorTasks.append(Task { try await projector.run() })
            }
        }
        defer { for task in projectorTasks { task.cancel() } }
        let key = try ES256PrivateKey.generate()
        let signer = TokenSigner(key: key, kid: "bench")
        let verifier = TokenVerifier(keys: TokenKeys(keys: ["bench": try key.publicKey]))
        // The API's own pool, as `inbox serve` makes it.
        let requestClient = try InboxRoutes.requestPool(connection: client.configuration.connection, size: 8)
        defer { requestClient.close() }
        let store = EventStore(client: requestClient, validator: database.store.validator)
        let migrator = try Migrator(directory: Migrator.locateDirectory(explicit: ProcessInfo.processInfo.environment["INBOX_MIGRATIONS_DIR"]))
        // As `inbox serve` runs by default: bell and conversation list pages kept in memory, told
        // of changes by NOTIFY.
        let bellCache = BellCache()
        let conversationCache = ConversationListCache()
        let bellListener = CacheListener(
            caches: [(BellChanges.channel, bellCache), (ThreadChanges.channel, conversationCache)], configuration: client.configuration.connection)
        let listening = Task { try await bellListener.run() }
        defer { listening.cancel() }
        // The rate limiter on, with room for what wrk asks of each person (about 25 requests a
        // second each, past the 20 a person gets in production): the rows measure answers, not 429s.
        let limiter = RateLimiter(limits: .init(personPerSecond: 1_000, personBurst: 1_000))
        // The API's group commit, whose counts say how many posts of a round had a projection
        // deferred to its projector (their authors might not read their own write at once).
        let groupCommit = InlineGroupCommit()
        let api = APIServer(
            routes: InboxRoutes.all(
                client: requestClient, store: store, migrator: migrator, bellCache: bellCache, conversationCache: conversationCache,
                groupCommit: groupCommit),
            gate: AppVersionGate(client: requestClient),
            verifier: verifier, rateLimiter: limiter)
        // wrk is one client address with all its connections: the per-address limit is for others.
        // As many request threads as `inbox serve` runs by default, or INBOX_HTTP_THREADS.
        let blockingThreads = ProcessInfo.processInfo.environment["INBOX_HTTP_THREADS"].flatMap(Int.init) ?? HTTPServer.Configuration().blockingThreads
        let serving = HTTPServer.Configuration(port: 0, blockingThreads: blockingThreads, connectionsPerAddress: 0)
        let server = try HTTPServer(configuration: serving, replying: { api.reply($0) })
        defer { server.shutdown() }
        // The same without the caches (INBOX_BELL_CACHE_MB=0, INBOX_CONVERSATION_CACHE_MB=0), on a port of its own.
        let uncachedAPI = APIServer(
            routes: InboxRoutes.all(client: requestClient, store: store, migrator: migrator), gate: AppVersionGate(client: requestClient),
            verifier: verifier, rateLimiter: limiter)
        let uncachedServer = try HTTPServer(configuration: serving, replying: { uncachedAPI.reply($0) })
        defer { uncachedServer.shutdown() }
        while !bellCache.isListening || !conversationCache.isListening { try await Task.sleep(for: .milliseconds(20)) }
        let scopes: [Scope] = [.accountRead, .accountWrite, .messagesRead, .messagesWrite]
        let tokens = try (0..<people).map { try signer.mint(subject: "p\($0)", scopes: scopes, lifetime: 86_400) }
        let sellerTokens = try (0..<shops).flatMap { shop in try (0..<2).map { try signer.mint(subject: Self.seller(shop, $0), scopes: scopes, lifetime: 86_400) } }
        var scripts: [String] = []
        defer { for script in scripts { try? FileManager.default.removeItem(atPath: script) } }
        func write(_ requests: [WrkRequest], pacedAt rate: Int? = nil, answeredIn latency: Double = 1) throws -> String {
            let script = FileManager.default.temporaryDirectory.appendingPathComponent("inbox-wrk-\(UUID().uuidString).lua").path
            try Self.luaScript(requests: requests, pacedAt: rate, answeredIn: latency).write(toFile: script, atomically: true, encoding: .utf8)
            scripts.append(script)
            return script
        }
        let script = try write(tokens.map { WrkRequest(token: $0) })
        let sellerScript = try write(sellerTokens.map { WrkRequest(token: $0) })
        // Each person reads, and writes in, the first of their threads.
        let messageReads = tokens.enumerated().map {
            WrkRequest(token: $1, path: "/v1/conversations/\(Self.conversationId(person: $0, thread: 0))/messages")
        }
        let messagesScript = try write(messageReads)
        let posts = tokens.enumerated().map {
            WrkRequest(
                method: "POST", token: $1, path: "/v1/conversations/\(Self.conversationId(person: $0, thread: 0))/messages",
                body: #"{"data":{"type":"messages","attributes":{"body":"Would you take 9,000 for it, with the box?","offer":{"amount":900000,"currency":"EUR"}}}}"#)
        }
        let postScript = try write(posts)
        // The latency targets hold at a rate (issue 12: listing at 5,000 requests/s with p99 under
        // 10 ms, posting at 2,000 with p99 under 20 ms): the same requests, paced to that rate.
        // Each row's wait allows for its answers' time at that rate (their p50 in earlier runs),
        // so that the rate reached is about the target; what it reached is the row's figure.
        let buyerPaced = try write(tokens.map { WrkRequest(token: $0) }, pacedAt: Self.listingRate, answeredIn: 1)
        let sellerPaced = try write(sellerTokens.map { WrkRequest(token: $0) }, pacedAt: Self.listingRate, answeredIn: 2)
        // A thread's page: its rate target is a quarter of /healthz (issue 37), about 12,000 a
        // second on the 2-core machine; its p99 is read there, as the lists' is at theirs.
        let messagesPaced = try write(messageReads, pacedAt: Self.threadRate, answeredIn: 1)
        // A post waits for the group before its own to commit, then for its own.
        let postPaced = try write(posts, pacedAt: Self.postingRate, answeredIn: 12)
        let base = "http://127.0.0.1:\(server.port)"
        let uncachedBase = "http://127.0.0.1:\(uncachedServer.port)"

        /// `before` runs before each round, not timed; `alongside` runs while wrk does (and is
        /// cancelled after); it says what it did.
        func wrkCase(
            id: String, title: String, path: String, description: String, kind: ConfigurationResult.Kind, base: String = base,
            script: String = script, before: (@Sendable () async throws -> Void)? = nil,
            alongside: (@Sendable (_ round: Int) async -> String)? = nil
        ) -> BenchmarkCase {
            BenchmarkCase(
                id: id, title: title,
                description: description + " wrk -t2 -c\(Self.connections) -d\(Self.seconds)s, after \(Self.warmUpSeconds) s of the same untimed before the first round.",
                kind: kind, batchSize: 1, appenders: Self.connections, eventsPerRound: 0,
                run: { round in
                    if round == 1 {
                        // The first seconds open the API's connections and prepare their
                        // statements, and every page a post touches first after the checkpoint is
                        // written whole to the WAL: not what the rounds measure.
                        _ = try await BlockingThread.run { try Self.wrk(url: base + path, script: script, seconds: Self.warmUpSeconds) }
                    }
                    try await before?()
                    let side = alongside.map { work in Task { await work(round) } }
                    let cpuBefore = try await ProjectionBenchmark.cpuSeconds(client: client)
                    let inlineBefore = groupCommit.counts
                    // On a thread of its own: waiting for wrk must not hold one of the cooperative pool's.
                    let result = try await BlockingThread.run { try Self.wrk(url: base + path, script: script) }
                    let cpuAfter = try await ProjectionBenchmark.cpuSeconds(client: client)
                    let inline = Self.inlineChange(from: inlineBefore, to: groupCommit.counts)
                    side?.cancel()
                    let done = await side?.value
                    // CPU a request (the server's process, its projectors included, and PostgreSQL;
                    // not wrk): a figure the machine's other load hardly moves, unlike the latency.
                    let perRequest = { (seconds: Double) in String(format: "%.0f µs", seconds * 1_000_000 / Double(max(1, result.requests))) }
                    progress(
                        "  \(title): p50 \(Self.format(result.p50)), p99 \(Self.format(result.p99)), p99.9 \(Self.format(result.p999)), \(result.errors) socket errors, \(result.non2xx) non-2xx\(done.map { ", " + $0 } ?? ""); "
                            + "CPU a request \(perRequest(cpuAfter.client - cpuBefore.client)) in the server's process, \(perRequest(cpuAfter.server - cpuBefore.server)) in PostgreSQL"
                            + (inline.map { "; " + $0 } ?? ""))
                    var measurement = Measurement(round: round, events: result.requests, elapsed: .milliseconds(Int64(result.seconds * 1000)))
                    measurement.latency = Latency(p50: result.p50, p99: result.p99, p999: result.p999)
                    return measurement
                })
        }
        /// Buyers write to shops meanwhile: a message every 10 ms (about 80 a second) in the first
        /// thread of a person picked in turn, projected inline; each changes the buyer's list and
        /// its shop's, so both members' seller pages are read again from PostgreSQL.
        let buyersWriting: @Sendable (Int) async -> String = { round in
            let inline = InlineProjections()
            var written = 0
            while !Task.isCancelled {
                let person = (written * 7_919 + round * 104_729) % people
                let message = InboxDomain.MessageSent(
                    conversationId: Self.conversationId(person: person, thread: 0), messageId: "alongside-\(round)-\(written)", authorSide: .buyer,
                    authorId: "p\(person)", body: "Is it still available?")
                guard let event = try? NewEvent(message) else { break }
                _ = try? await client.withConnection { connection in try inline.append([event], on: connection) }
                written += 1
                try? await Task.sleep(for: .milliseconds(10))
            }
            return "\(written) messages written meanwhile"
        }
        let cases = [
            wrkCase(
                id: "bell-page", title: "GET /v1/me/notifications", path: "/v1/me/notifications",
                description: "The first bell page (25 entries, meta.unread) of a person picked in turn from \(people), each with \(Self.entriesPerPerson) entries; ES256 token verified (and remembered); the bell cache on, as inbox serve runs by default.",
                kind: .client),
            wrkCase(
                id: "bell-page-changing", title: "GET /v1/me/notifications, bells changing", path: "/v1/me/notifications",
                description: "The same with the bells changing meanwhile: a writer appends a sign-in for the next person every 10 ms (about 80 a second), projected inline, and each change forgets that person's pages.",
                kind: .client,
                alongside: { round in
                    let inline = InlineProjections()
                    var changed = 0
                    while !Task.isCancelled {
                        let person = "p\((changed * 7_919 + round * 104_729) % people)"
                        guard let event = try? NewEvent(SignedIn(personId: person, signInId: "change-\(round)-\(changed)", platform: "app:ios", device: "iPhone"))
                        else { break }
                        _ = try? await client.withConnection { connection in try inline.append([event], on: connection) }
                        changed += 1
                        try? await Task.sleep(for: .milliseconds(10))
                    }
                    return "\(changed) bells changed"
                }),
            wrkCase(
                id: "bell-page-uncached", title: "GET /v1/me/notifications, no cache", path: "/v1/me/notifications",
                description: "The same bell pages from a server without the bell cache (INBOX_BELL_CACHE_MB=0): every page read from PostgreSQL.",
                kind: .client, base: uncachedBase),
            wrkCase(
                id: "devices-list", title: "GET /v1/me/devices", path: "/v1/me/devices",
                description: "The device list (\(Self.devicesPerPerson) devices) of a person picked in turn; token verified.",
                kind: .client),
            wrkCase(
                id: "conversations-buyer", title: "GET /v1/conversations", path: "/v1/conversations",
                description: "The buyer side's first page of conversations (\(Self.conversationsPerPerson) threads, each with its last message, meta.unread) of a person picked in turn; token verified; the conversation cache on, while buyers write (as the seller row).",
                kind: .client, alongside: buyersWriting),
            wrkCase(
                id: "conversations-seller", title: "GET /v1/conversations?filter[side]=seller", path: "/v1/conversations?filter%5Bside%5D=seller",
                description: "The seller side's first page (25 of about \(people * Self.conversationsPerPerson / shops) threads of the shop, meta.unread) of one of the \(shops * 2) people who work at the \(shops) shops, picked in turn; the conversation cache on, as inbox serve runs by default, while buyers write to the shops (about 80 messages a second, each forgetting its shop's pages).",
                kind: .client, script: sellerScript, alongside: buyersWriting),
            wrkCase(
                id: "conversations-seller-uncached", title: "GET /v1/conversations?filter[side]=seller, no cache",
                path: "/v1/conversations?filter%5Bside%5D=seller",
                description: "The same seller pages from a server without the conversation cache (INBOX_CONVERSATION_CACHE_MB=0): every page read from PostgreSQL.",
                kind: .client, base: uncachedBase, script: sellerScript),
            wrkCase(
                id: "thread-messages", title: "GET /v1/conversations/{id}/messages", path: "/",
                description: "The first page of messages (\(Self.messagesPerConversation) at the start, growing while the posting row runs) of a thread of the person's, picked in turn; the access check (buyer or shop member) and the page; the conversation cache on, as inbox serve runs by default, while buyers write in these threads (about 80 messages a second, each forgetting its thread's pages).",
                kind: .client, script: messagesScript, alongside: buyersWriting),
            wrkCase(
                id: "thread-messages-uncached", title: "GET /v1/conversations/{id}/messages, no cache", path: "/",
                description: "The same pages from a server without the conversation cache (INBOX_CONVERSATION_CACHE_MB=0): the access check and the page read from PostgreSQL in one round trip.",
                kind: .client, base: uncachedBase, script: messagesScript),
            wrkCase(
                id: "message-post", title: "POST /v1/conversations/{id}/messages", path: "/",
                description: "A message with an offer in a thread of the person's, picked in turn: the checks (participant, thread open, buyer not blocked), the append, the inline projections (threads, bell and its outbox entry for the shop) in one transaction.",
                kind: .client, script: postScript,
                // The loading (a replay) never writes the outbox, so its statistics say it is empty;
                // in production autovacuum analyzes it within a minute of it filling. So do we,
                // before each round, untimed. (Until sql/011 each post's foreign-key check of the
                // pending queue scanned the whole, growing outbox under such statistics.)
                before: { try await client.execute("ANALYZE notification_outbox, notification_outbox_pending, unread_conversations") }),
            wrkCase(
                id: "conversations-buyer-paced", title: "GET /v1/conversations at \(Self.listingRate)/s", path: "/v1/conversations",
                description: "The buyer side's list as above, paced to about \(Self.listingRate) requests/s (\(Self.pacing)): the latency at the target rate, not at saturation; buyers writing meanwhile.",
                kind: .paced, script: buyerPaced, alongside: buyersWriting),
            wrkCase(
                id: "conversations-seller-paced", title: "GET /v1/conversations (seller) at \(Self.listingRate)/s",
                path: "/v1/conversations?filter%5Bside%5D=seller",
                description: "The seller side's list as above, paced to about \(Self.listingRate) requests/s (\(Self.pacing)); buyers writing meanwhile.",
                kind: .paced, script: sellerPaced, alongside: buyersWriting),
            wrkCase(
                id: "thread-messages-paced", title: "GET /v1/conversations/{id}/messages at \(Self.threadRate)/s", path: "/",
                description: "A thread's first page as above, paced to about \(Self.threadRate) requests/s (\(Self.pacing)); buyers writing in these threads meanwhile.",
                kind: .paced, script: messagesPaced, alongside: buyersWriting),
            wrkCase(
                id: "message-post-paced", title: "POST /v1/conversations/{id}/messages \(Self.postingRate)/s", path: "/",
                description: "Posting as above, paced to about \(Self.postingRate) requests/s (\(Self.pacing)).",
                kind: .paced, script: postPaced,
                before: { try await client.execute("ANALYZE notification_outbox, notification_outbox_pending, unread_conversations") }),
        ] + flushProbe(database) + [
            wrkCase(
                id: "healthz", title: "GET /healthz", path: "/healthz",
                description: "The same server answering /healthz (no token, no database): the ceiling of the HTTP layer on this machine.",
                kind: .serverSide),
        ]
        let configurations = try await runInterleaved(cases, rounds: rounds, unit: "requests")
        var notes: [String: String] = [:]
        notes["people"] = "\(people)"
        notes["projectors"] =
            projectorTasks.isEmpty
            ? "left out (INBOX_BENCH_PROJECTORS=0)" : "\(InboxProjections.all.map(\.name).joined(separator: ", ")), running beside the API as in inbox serve"
        notes["httpThreads"] = "\(HTTPServer.defaultThreads) event loops, \(blockingThreads) blocking threads"
        let cache = bellCache.statistics
        notes["bellCache"] = "\(cache.hits) pages from memory, \(cache.misses) from PostgreSQL, \(cache.bytes) bytes kept at the end"
        let lists = conversationCache.statistics
        notes["conversationCache"] = "\(lists.hits) pages from memory, \(lists.misses) from PostgreSQL, \(lists.bytes) bytes kept at the end"
        notes["loadGenerator"] = "wrk 4.1 on the same machine, 2 threads, \(Self.connections) connections, \(Self.seconds) s per round"
        if let flushes = configurations.first(where: { $0.id == "disk-flush" }) {
            notes["diskFlush"] =
                "per round, the slowest flush and the flushes over \(Self.format(DiskFlushProbe.stall.inSeconds)): "
                + flushes.rounds.map { "\(Self.format($0.slowest ?? 0)), \($0.stalls ?? 0)" }.joined(separator: "; ")
        }
        return BenchmarkResult(benchmark: "http", configurations: configurations, notes: notes)
    }

    /// The disk's flushes on their own, for a round's length (`DiskFlushProbe`): the floor under the
    /// posting rows' latency, measured in the same run. Only on the embedded cluster, whose disk is
    /// this machine's; a `DATABASE_URL` server's disk is not reachable from here.
    func flushProbe(_ database: BenchmarkDatabase) -> [BenchmarkCase] {
        guard let folder = database.directory else { return [] }
        return [
            BenchmarkCase(
                id: "disk-flush", title: "disk flush (8 KiB write + fdatasync)",
                description:
                    "The database's disk on its own: 8 KiB written and fdatasync'ed in a loop for \(Self.seconds) s in the cluster's folder, as each commit flushes the WAL; flushes per second and their latency. Every post waits for one such flush, so the slowest ones are a floor under posting's p99 (notes: the slowest flush and the flushes over \(Self.format(DiskFlushProbe.stall.inSeconds)) of each round).",
                kind: .probe, batchSize: 1, appenders: 1, eventsPerRound: 0,
                run: { round in
                    let result = try await BlockingThread.run { try DiskFlushProbe.measure(in: folder, for: .seconds(Self.seconds)) }
                    progress(
                        "  disk flush: p50 \(Self.format(result.p50)), p99 \(Self.format(result.p99)), p99.9 \(Self.format(result.p999)), slowest \(Self.format(result.worst)), \(result.stalls) over \(Self.format(DiskFlushProbe.stall.inSeconds))")
                    var measurement = Measurement(round: round, events: result.flushes, elapsed: .milliseconds(Int64(result.seconds * 1000)))
                    measurement.latency = Latency(p50: result.p50, p99: result.p99, p999: result.p999)
                    measurement.slowest = result.worst
                    measurement.stalls = result.stalls
                    return measurement
                })
        ]
    }

    /// One request of a wrk script: the method, the person's token, and a path and body of its own
    /// (nil: the URL's path, no body).
    struct WrkRequest {
        var method = "GET"
        var token: String
        var path: String? = nil
        var body: String? = nil
    }

    /// Each wrk row's untimed run before its first round.
    static let warmUpSeconds = 3

    /// WAL segments made ready before the rounds, 16 MiB each: more than the rows write.
    static let preparedWALSegments = 48

    /// A fresh cluster has no WAL segments to reuse: each commit that fills one makes the next, a
    /// 16 MiB file written full of zeros while it holds the WAL's write lock, and every other
    /// commit waits behind it (50 to 70 ms, every 2 s of posting, measured on `/dev/shm` in
    /// issue 12's tenth session: the `WALInitWrite` wait). A server that has run a while reuses
    /// the segments its checkpoints have passed, up to `min_wal_size` (80 MB by default) or what
    /// its checkpoints have needed. So the embedded cluster keeps up to 1 GB of them, and the
    /// segments are made now (a switch to a new segment each, with a one-record message in it),
    /// to be recycled by the checkpoint that follows: the rounds measure the tier on a server
    /// that is warm, not PostgreSQL making its files.
    static func prepareWALSegments(_ client: PostgresClient) async throws {
        let started = ContinuousClock.now
        try await client.execute("ALTER SYSTEM SET min_wal_size = '1GB'")
        try await client.execute("SELECT pg_reload_conf()")
        for _ in 0..<preparedWALSegments {
            try await client.execute("SELECT pg_logical_emit_message(false, 'inbox-bench', '')")
            try await client.execute("SELECT pg_switch_wal()")
        }
        progress("made \(preparedWALSegments) WAL segments for the checkpoint to recycle in \(String(format: "%.1f", (ContinuousClock.now - started).inSeconds)) s")
    }

    /// The rates the paced rows aim at: issue 12's targets, and a quarter of `/healthz` on the
    /// 2-core machine for a thread's page (issue 37).
    static let listingRate = 5_000
    static let postingRate = 2_000
    static let threadRate = 12_000
    static let pacing =
        "each of the \(connections) connections waits a random 0.5 to 1.5 times connections/rate, less the expected answer time (1 ms for the buyer's list and a thread's page, 2 ms for the seller's, 12 ms for posts), after each answer; the rate reached is the row's figure. wrk 4.1 cannot send on a schedule, so an answer that is late delays that connection's next request (coordinated omission): a stall shows in fewer requests, not only in p99"

    /// wrk's Lua: every request is the next of `requests`, in turn; with `rate`, each connection
    /// waits after each answer (wrk's `delay`, whole milliseconds), so that the connections
    /// together send about `rate` requests a second if answers take `latency` milliseconds. The
    /// waits are random so that the connections do not send in step. `done` prints the percentiles
    /// in microseconds on a line of its own, p99.9 among them (wrk's `--latency` stops at p99).
    static func luaScript(requests: [WrkRequest], pacedAt rate: Int? = nil, answeredIn latency: Double = 1) -> String {
        let pacing = rate.map { rate in
            let mean = max(1.0, Double(connections) * 1000 / Double(rate) - latency)
            return """

                local low, high = \(Int((mean * 0.5).rounded(.down))), \(Int((mean * 1.5).rounded(.up)))
                delay = function() return math.random(low, high) end
                """
        } ?? ""
        // Long brackets quote the bodies as they are (they hold no "]]").
        func lua(_ text: String?) -> String { text.map { "[==[\($0)]==]" } ?? "nil" }
        return "local requests = {"
            + requests.map { "{\"\($0.method)\",\(lua($0.path)),\"\($0.token)\",\(lua($0.body))}" }.joined(separator: ",\n") + "}\n"
            + """
            local i = 0
            request = function()
              i = i + 1
              local r = requests[(i % #requests) + 1]
              local headers = { ["Authorization"] = "Bearer " .. r[3], ["X-Wristler-App"] = "ios/2.4.0" }
              if r[4] then headers["Content-Type"] = "application/vnd.api+json" end
              return wrk.format(r[1], r[2], headers, r[4])
            end
            done = function(summary, latency, requests)
              io.write(string.format("\(percentilesLabel) %d %d %d\\n", latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
            end
            """ + pacing
    }

    /// The id of a person's thread in the loaded data.
    static func conversationId(person: Int, thread: Int) -> String { "bench-c\(person)-\(thread)" }

    /// The `index`th of the two people who work at `shop`.
    static func seller(_ shop: Int, _ index: Int) -> String { "shop\(shop)-staff\(index)" }

    struct WrkResult {
        var requests: Int
        var seconds: Double
        var p50: Double
        var p99: Double
        var p999: Double
        var errors: Int
        var non2xx: Int
    }

    /// `timeout`: wrk's own for an answer (2 s when nil), past which it counts a socket error.
    /// Fails with a sentence when wrk, which every HTTP row runs, is not installed.
    static func requireWrk() throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/wrk") else {
            throw BenchmarkFailure(description: "wrk is not installed (apt-get install wrk; make bench installs it)")
        }
    }

    /// wrk runs in a session of its own (util-linux's `setsid`), as a client on another machine
    /// would be nothing of the server's: with the kernel's autogroups on (Debian's default), CPU
    /// time is shared between sessions first, and wrk in the benchmark's session took the
    /// server's share while every PostgreSQL process had its own ("Where the time goes").
    static func wrk(url: String, script: String, connections: Int = connections, seconds: Int = seconds, timeout: Int? = nil) throws -> WrkResult {
        let (status, output) = try Subprocess.run(
            "/usr/bin/setsid",
            ["--wait", "/usr/bin/wrk", "-t2", "-c\(connections)", "-d\(seconds)s", "--latency"] + (timeout.map { ["--timeout", "\($0)s"] } ?? [])
                + ["-s", script, url])
        guard status == 0 else { throw BenchmarkFailure(description: "wrk failed: \(output)") }
        func value(after label: String) -> String? {
            output.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix(label) }
                .map { String($0.trimmingCharacters(in: .whitespaces).dropFirst(label.count)).trimmingCharacters(in: .whitespaces) }
        }
        // "  100000 requests in 10.00s, 12.34MB read"
        guard let line = output.split(separator: "\n").first(where: { $0.contains(" requests in ") }) else {
            throw BenchmarkFailure(description: "wrk printed no request count: \(output)")
        }
        let words = line.trimmingCharacters(in: .whitespaces).split(separator: " ")
        let requests = Int(words[0]) ?? 0
        let elapsed = Double(words[3].dropLast(2).replacingOccurrences(of: "s", with: "")) ?? Double(seconds)
        let errors = (value(after: "Socket errors:") ?? "").split(separator: ",").compactMap { $0.split(separator: " ").last.flatMap { Int($0) } }.reduce(0, +)
        let non2xx = Int(value(after: "Non-2xx or 3xx responses:") ?? "0") ?? 0
        // The script's own line, in microseconds.
        let percentiles = (value(after: percentilesLabel) ?? "").split(separator: " ").compactMap { Double($0) }.map { $0 / 1_000_000 }
        guard percentiles.count == 3 else { throw BenchmarkFailure(description: "wrk's script printed no percentiles: \(output)") }
        return WrkResult(
            requests: requests, seconds: elapsed, p50: percentiles[0], p99: percentiles[1], p999: percentiles[2], errors: errors, non2xx: non2xx)
    }

    static func format(_ seconds: Double) -> String { String(format: "%.2f ms", seconds * 1000) }

    /// What the API's inline writes did between two counts (nil when it made none): how many, in
    /// how many groups, and how many left each projection to its projector.
    static func inlineChange(from before: InlineGroupCommit.Statistics, to after: InlineGroupCommit.Statistics) -> String? {
        let requests = after.requests - before.requests
        guard requests > 0 else { return nil }
        let names = Set(after.applied.keys).union(after.deferred.keys).sorted()
        let deferred = names.map { "\($0) \((after.deferred[$0] ?? 0) - (before.deferred[$0] ?? 0))" }.joined(separator: ", ")
        return "\(requests) inline writes in \(after.groups - before.groups) groups, deferred: \(deferred.isEmpty ? "none" : deferred)"
    }

    /// The first word of the line the wrk script's `done` prints.
    static let percentilesLabel = "inbox-bench-percentiles-us"
}
