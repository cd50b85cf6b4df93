import Devices
import EventLog
import Fanout
import Foundation
import InboxDomain
import InboxTesting
import Lifecycle
import PostgresClient
import Projections
import PushProtocol
import Testing

/// What each documented answer of APNs and FCM does to the push and the registration, the
/// environments, and the side-effect gate (a replay, a late or deleted device, a second fan-out).
@Suite(.serialized) struct FanoutAnswerTests {
    /// Registers `tokens` (iOS without environment unless `apns`), sends every person a sign-in
    /// notification, and returns the mock's pushes once everything is decided and resolved.
    static func signIns(
        _ db: TestDatabase, _ mock: PushMock, ios: [String] = [], android: [String] = [], apns: String? = nil,
        transport: (any PushTransport)? = nil
    ) async throws -> [Push] {
        for (index, token) in ios.enumerated() { _ = try db.register("i\(index)", "ios", token: token, locale: "en", apns: apns) }
        for (index, token) in android.enumerated() { _ = try db.register("a\(index)", "android", token: token, locale: "en") }
        try await db.withProjectors {
            try await db.withFanout(transport: try transport ?? mock.transport()) {
                for index in ios.indices { try await db.append(SignedIn(personId: "i\(index)", signInId: "s\(index)", platform: "ios")) }
                for index in android.indices { try await db.append(SignedIn(personId: "a\(index)", signInId: "s\(index)", platform: "android")) }
                try await db.waitUntilProjected()
                try await db.waitUntilFannedOut()
            }
        }
        return try await mock.pushes()
    }

    static func tokens(_ db: TestDatabase) async throws -> Set<String> {
        try await db.client.withConnection { connection in
            Set(try connection.query("SELECT push_token FROM devices").map { try $0.decode(String.self, at: 0) })
        }
    }

    @Test func deadRegistrationsAreDeletedAndPermanentRefusalsKeepTheirs() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            let unregistered = apnsToken("dead", 1)
            let notForTopic = apnsToken("70c0", 2)
            let badOnBoth = apnsToken("bad0", 3)
            let fine = apnsToken("a0", 4)
            let notHex = "a0/../../3/device/" + apnsToken("a0", 5)
            let pushes = try await Self.signIns(
                db, mock, ios: [unregistered, notForTopic, badOnBoth, fine, notHex], android: ["dead-1", "invalid-2", "mismatch-3", "fine-4"])
            #expect(
                try await Self.tokens(db) == [fine, "mismatch-3", "fine-4"],
                "410 Unregistered, DeviceTokenNotForTopic, BadDeviceToken on both hosts, UNREGISTERED and INVALID_ARGUMENT naming the token delete")
            #expect(pushes.filter { $0.token == badOnBoth }.map(\.listener).sorted() == ["apnsDevelopment", "apnsProduction"], "probed once")
            #expect(pushes.filter { $0.token == "mismatch-3" }.count == 1, "a permanent refusal is never retried")
            #expect(try await db.counter("deleted.Unregistered") == 1)
            #expect(try await db.counter("deleted.BadDeviceToken") == 2, "on both hosts, and a token that is not hex (never sent)")
            #expect(!pushes.contains { $0.token == apnsToken("a0", 5) }, "a token that would change the request's path is not sent: \(pushes)")
            #expect(try await db.counter("failed.SENDER_ID_MISMATCH") == 1)
            #expect(try await db.counter("sent.ios") == 1)
            #expect(try await db.counter("sent.android") == 1)
        }
    }

    @Test func aTokenWithoutEnvironmentIsProbedOnTheOtherHostAndTheAnswerIsStored() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            let sandbox = apnsToken("5a0d", 1)
            let production = apnsToken("900d", 2)
            let pushes = try await Self.signIns(db, mock, ios: [sandbox, production])
            #expect(pushes.filter { $0.token == sandbox }.map { "\($0.listener) \($0.status)" } == ["apnsProduction 400", "apnsDevelopment 200"])
            #expect(pushes.filter { $0.token == production }.map { "\($0.listener) \($0.status)" } == ["apnsProduction 200"])
            let environments = try await db.client.withConnection { connection in
                try connection.query("SELECT push_token, apns_environment FROM devices").reduce(into: [String: String]()) {
                    $0[try $1.decode(String.self, at: 0)] = try $1.decode(String?.self, at: 1)
                }
            }
            #expect(environments == [sandbox: "development", production: "production"])
            // Visible to the app as the registration's apnsEnvironment.
            let device = try #require(try DeviceRegistry(client: db.client).devices(of: "i0", limit: 10).first)
            #expect(device.apnsEnvironment == "development")
        }
    }

    @Test func busyAndFailingPlatformsAreRetriedHonouringRetryAfter() async throws {
        let mock = try await PushMock.start(["--retry-after", "1"])
        defer { mock.stop() }
        try await withTestDatabase { db in
            let busy = apnsToken("42902", 1)
            let failing = apnsToken("50001", 2)
            let started = ContinuousClock.now
            let pushes = try await Self.signIns(db, mock, ios: [busy, failing], android: ["busy-2-x", "down-1-x"], apns: "production")
            #expect(pushes.filter { $0.token == busy }.map(\.status) == [429, 429, 200])
            #expect(pushes.filter { $0.token == failing }.map(\.status) == [500, 200])
            #expect(pushes.filter { $0.token == "busy-2-x" }.map(\.status) == [429, 429, 200])
            #expect(pushes.filter { $0.token == "down-1-x" }.map(\.status) == [503, 200])
            #expect(ContinuousClock.now - started >= .seconds(2), "Retry-After: 1, twice")
            #expect(try await db.counter("sent.ios") == 2)
            #expect(try await db.counter("sent.android") == 2)
            #expect(try await Self.tokens(db).count == 4, "nothing deleted")
        }
    }

    @Test func aPushStillFailingAtItsDeadlineIsDroppedAndCounted() async throws {
        let mock = try await PushMock.start(["--fail-times", "100", "--retry-after", "1"])
        defer { mock.stop() }
        try await withTestDatabase { db in
            _ = try db.register("p1", "ios", token: apnsToken("4290", 1), locale: "en", apns: "production")
            try await db.withProjectors {
                try await db.withFanout(transport: try mock.transport(), settings: FanoutStore.Settings(deadline: .seconds(2))) {
                    try await db.append(SignedIn(personId: "p1", signInId: "s1", platform: "ios"))
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                }
            }
            let tries = try await mock.pushes().count
            #expect(tries >= 2 && tries <= 4, "retried until the deadline, then given up: \(tries) tries")
            #expect(try await db.counter("failed.deadline:TooManyRequests") == 1)
            #expect(try await Self.tokens(db).count == 1, "the registration is kept")
        }
    }

    @Test func anExpiredProviderTokenIsRenewedOnceAndThePushRetried() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            let fcm = try mock.transport()
            // The 20 minutes between renewals are the policy's own test; here a renewal is allowed at once.
            var settings = APNsTransport.Settings(keyId: mock.keyId, teamId: mock.teamId, p8: try mock.p8())
            settings.productionURL = "https://127.0.0.1:\(mock.apnsProduction)"
            settings.developmentURL = "https://127.0.0.1:\(mock.apnsDevelopment)"
            settings.tokenPolicy = ProviderTokenPolicy.APNs(reuseFor: .seconds(3000), minimumInterval: .zero)
            let transport = PlatformTransport(
                ios: try APNsTransport(settings: settings, client: try .init(configuration: .init(caFile: mock.caFile)), logger: .silent),
                android: fcm)
            let expiring = apnsToken("e403", 1)
            _ = try db.register("i1", "ios", token: expiring, locale: "en", apns: "production")
            _ = try db.register("a1", "android", token: "fine-1", locale: "en")
            _ = try db.register("a2", "android", token: "fine-2", locale: "en")
            try await db.withProjectors {
                try await db.withFanout(transport: transport) {
                    try await db.append(
                        SignedIn(personId: "i1", signInId: "s1", platform: "ios"), SignedIn(personId: "a1", signInId: "s2", platform: "android"))
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                    let apns = try await mock.pushes().filter { $0.token == expiring }
                    #expect(apns.map(\.status) == [403, 200])
                    #expect(apns.first?.reason == "ExpiredProviderToken")
                    #expect(apns.count == 2 && apns[0].headers["authorization"] != apns[1].headers["authorization"], "a new provider token")
                    // FCM: an access token revoked is fetched again and the push retried once.
                    try await mock.post("/fcm/revoke")
                    try await mock.post("/reset")
                    try await db.append(SignedIn(personId: "a2", signInId: "s3", platform: "android"))
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                }
            }
            let requests = try await mock.requests().map { "\($0["path"] as? String ?? "") \(($0["response"] as? [String: Any])?["status"] as? Int ?? 0)" }
            #expect(requests == ["/v1/projects/wristler-mock/messages:send 401", "/token 200", "/v1/projects/wristler-mock/messages:send 200"])
        }
    }

    @Test func aServerThatIsNotProductionPushesOnlyToItsOwnApp() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            _ = try db.register("p1", "android", token: "store-app", locale: "en", appId: "eu.wristler.app")
            _ = try db.register("p1", "android", token: "no-app-id", locale: "en", appId: nil)
            _ = try db.register("p1", "android", token: "staging-app", locale: "en", appId: "eu.wristler.app.staging")
            let settings = FanoutStore.Settings(policy: AppPolicy(isProduction: false, ownAppId: "eu.wristler.app.staging"))
            try await db.withProjectors {
                try await db.withFanout(transport: try mock.transport(), settings: settings) {
                    try await db.append(SignedIn(personId: "p1", signInId: "s1", platform: "android"))
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                }
            }
            #expect(try await mock.pushes().map(\.token) == ["staging-app"])
            #expect(try await db.counter("skipped.other_app") == 2)
        }
    }

    @Test func aReplayAndACatchUpSendNothingAgain() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            let pushes = try await Self.signIns(db, mock, android: ["fine-1", "fine-2"])
            #expect(pushes.count == 2)
            try await db.withProjectors {
                try await db.withFanout(transport: try mock.transport()) {
                    let replayer = Replayer(client: db.client, projections: [BellProjection()])
                    try await replayer.prepare()
                    try await replayer.catchUp()
                    try await replayer.swap()
                    // A catch-up from an old checkpoint: the bell projector reads the whole log again.
                    try await db.client.withConnection { connection in
                        _ = try connection.query("UPDATE projection_checkpoints SET transaction_id = '0', position = 0 WHERE projection = 'bell'")
                    }
                    try await db.append(SignedIn(personId: "nobody", signInId: "s9", platform: "web"))
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                }
            }
            #expect(try await mock.pushes().count == 2, "nothing sent twice")
            #expect(try await db.scalar("SELECT count(*) FROM notification_outbox", Int.self) == 3)
        }
    }

    @Test func aDeviceRegisteredAfterTheNotificationOrDeletedBeforeSendingGetsNothing() async throws {
        try await withTestDatabase { db in
            let kept = try db.register("p1", "android", token: "kept", locale: "en")
            let deleted = try db.register("p1", "android", token: "deleted", locale: "en")
            try await db.withProjectors {
                try await db.append(SignedIn(personId: "p1", signInId: "s1", platform: "android"))
                try await db.waitUntilProjected()
            }
            _ = try db.register("p1", "android", token: "late", locale: "en")
            let store = FanoutStore(settings: FanoutStore.Settings())
            let decided = try await db.client.withConnection { try store.decide(limit: 10, now: Date(), on: $0) }
            #expect(decided.entries == 1 && decided.deliveries == 2, "the late device is not decided")
            #expect(Set(decided.claimed.compactMap { $0.device?.token }) == ["kept", "deleted"])
            #expect(decided.batch != nil && decided.claimed.allSatisfy { $0.deliveryId == nil }, "held as a batch, no row per push")
            // Held by the decision: no other fan-out gets them while the claim lasts.
            #expect(try await db.client.withConnection { try store.takeOver(now: Date(), on: $0) }.batch == nil)
            #expect(try await db.client.withConnection { try store.decide(limit: 10, now: Date(), on: $0) }.entries == 0)
            #expect(try await db.fanoutStatus().sending == 1)
            // The fan-out died before sending; its claim runs out; meanwhile one device is deleted.
            try await db.client.withConnection { connection in
                _ = try connection.query("UPDATE push_batches SET claimed_until = clock_timestamp() - interval '1 second'")
            }
            #expect(try await db.fanoutStatus().abandoned == 1)
            #expect(try DeviceRegistry(client: db.client).delete(deleted.id, of: "p1"))
            let taken = try await db.client.withConnection { try store.takeOver(now: Date(), on: $0) }
            #expect(
                taken.claimed.filter { $0.device != nil }.map(\.deviceId) == [kept.id],
                "sent again to the registrations as they are: the device deleted before sending gets nothing")
            #expect(taken.claimed.first { $0.deviceId == deleted.id }?.device == nil, "and is counted as gone when recorded")
            #expect(taken.claimed.allSatisfy { $0.reclaimed }, "taken over from a fan-out that never recorded them")
            let batch = try #require(taken.batch)
            #expect(batch.id == decided.batch?.id && batch.claim != decided.batch?.claim)
            // The first holder comes back late: the batch is no longer its own.
            let late = try await db.client.withConnection { try store.record([], finishing: [decided.batch!], on: $0) }
            #expect(late == [decided.batch!])
            let resolutions = taken.claimed.map {
                (claimed: $0, resolution: $0.device == nil ? FanoutStore.Resolution.skip(reason: "device_gone") : .delivered(.android, learned: nil))
            }
            #expect(try await db.client.withConnection { try store.record(resolutions, finishing: [batch], on: $0) }.isEmpty)
            #expect(try await db.counter("reclaimed") == 1)
            let status = try await db.fanoutStatus()
            #expect(status.sending == 0 && status.pending == 0 && status.undecided == 0)
        }
    }

    @Test func aStreamLimitOfOneAndAGoAwayAreObeyedAndNothingIsLost() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            let people = 40
            for person in 0..<people {
                _ = try db.register("i\(person)", "ios", token: apnsToken("a0", person), locale: "en", apns: "production")
                _ = try db.register("a\(person)", "android", token: "fine-\(person)", locale: "en")
            }
            try await mock.post("/streams", #"{"max": 1}"#)
            try await mock.post("/delay", #"{"ms": 20}"#)
            try await db.withProjectors {
                try await db.withFanout(transport: try mock.transport(), workers: 2, batchSize: 20) {
                    _ = try await db.store.append(
                        try (0..<people).flatMap {
                            [
                                try NewEvent(catalogueEvent: SignedIn(personId: "i\($0)", signInId: "s\($0)", platform: "ios")),
                                try NewEvent(catalogueEvent: SignedIn(personId: "a\($0)", signInId: "t\($0)", platform: "android")),
                            ]
                        })
                    _ = try await mock.waitForPushes { $0.count >= 20 }
                    // Apple and Google close connections with GOAWAY: streams past it are refused.
                    try await mock.post("/goaway")
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                }
            }
            let pushes = try await mock.pushes()
            // An answer the mock could not write (libcurl closed the connection after the GOAWAY
            // with the stream in flight) is a push whose fate the sender cannot know: it is tried
            // again, as any push with no answer is. Delivered means answered 200 and received.
            let delivered = pushes.filter { $0.status == 200 && $0.sent }.map(\.token)
            #expect(Set(delivered).count == 2 * people, "every push delivered once the connections were replaced")
            let twice = Dictionary(grouping: pushes.filter { $0.status == 200 && $0.sent }, by: \.token).values.filter { $0.count > 1 }
            #expect(delivered.count == 2 * people, "and none twice: \(twice)")
            #expect(try await db.counter("sent.ios") == Int64(people))
            #expect(try await db.counter("sent.android") == Int64(people))
            let stats = try await mock.client.send(.init(url: "http://127.0.0.1:\(mock.control)/stats"))
            let listeners = (try JSONSerialization.jsonObject(with: Data(stats.body)) as! [String: Any])["listeners"] as! [String: [String: Any]]
            for name in ["apnsProduction", "fcm"] {
                #expect(listeners[name]?["maxConcurrentStreamsSeen"] as? Int == 1, "the stream limit held on every connection: \(listeners)")
                #expect((listeners[name]?["goaways"] as? Int ?? 0) >= 1)
            }
            // No stream goes on a connection before the server's SETTINGS (libcurl 7.88 sent bursts
            // there, 108 to 171 refused per host in this test): the only refusals left are a stream
            // sent while the GOAWAY was on its way, at most one per connection at a limit of 1.
            for name in ["apnsProduction", "fcm"] {
                let refused = listeners[name]?["refusedStreams"] as? Int ?? -1
                let goaways = listeners[name]?["goaways"] as? Int ?? 0
                #expect(refused >= 0 && refused <= goaways, "\(name): \(refused) refused streams, \(goaways) GOAWAYs")
            }
        }
    }

    @Test func withoutCredentialsEveryPushIsLoggedAndCountedAsLoggedNotSent() async throws {
        try await withTestDatabase { db in
            _ = try db.register("p1", "android", token: "some-token", locale: "fr")
            let handler = RecordingLogHandler()
            let logger = Logger(label: "test", handler: handler)
            let transport = PlatformTransport(ios: LoggingTransport(logger: logger), android: LoggingTransport(logger: logger))
            try await db.withProjectors {
                try await db.withFanout(transport: transport) {
                    try await db.append(SignedIn(personId: "p1", signInId: "s1", platform: "android"))
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                }
            }
            let pushes = handler.records.filter { $0.message.hasPrefix("push (no APNs/FCM credentials") }
            #expect(pushes.count == 1)
            #expect(pushes.first?.metadata["data.event"] == "new_sign_in")
            #expect(pushes.first?.metadata["title"] == .string(BellTexts.title(event: "new_sign_in", category: "security", .fr)))
            #expect(pushes.first?.metadata["token"] == "some-tok…", "not the whole token: it is a credential")
            #expect(try await db.counter("logged.android") == 1)
            #expect(try await db.counter("sent.android") == 0)
            #expect(try await db.counter("latency.fcm.count") == 0, "a push logged went to no provider")
        }
    }

    @Test func twoFanOutsAtOnceNeverSendOnePushTwice() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            let people = 150
            for person in 0..<people { _ = try db.register("p\(person)", "android", token: "fine-\(person)", locale: "en") }
            try await db.withProjectors {
                try await db.withFanout(transport: try mock.transport(), workers: 2, batchSize: 7) {
                    try await db.withFanout(transport: try mock.transport(), workers: 2, batchSize: 5) {
                        _ = try await db.store.append(
                            try (0..<people).map { try NewEvent(catalogueEvent: SignedIn(personId: "p\($0)", signInId: "s\($0)", platform: "web")) })
                        try await db.waitUntilProjected()
                        try await db.waitUntilFannedOut()
                    }
                }
            }
            let tokens = try await mock.pushes().map(\.token)
            #expect(tokens.count == people)
            #expect(Set(tokens).count == people)
        }
    }
}
