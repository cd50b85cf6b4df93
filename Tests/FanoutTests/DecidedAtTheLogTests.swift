import EventLog
import Fanout
import Foundation
import HTTP2Client
import HTTPServer
import InboxAPI
import InboxDomain
import InboxSimulation
import InboxTesting
import Lifecycle
import Mail
import Mailer
import PostgresClient
import Projections
import Testing

/// Every notification decided as of its event's place in the log (docs/fanout.md): who works at
/// a shop, switches, blocks as they stood at the notification's event, never as another
/// projection happens to stand when the fan-out or the mailer runs.
@Suite(.serialized) struct DecidedAtTheLogTests {
    static let ordersSecret = "orders-secret-0123456789"
    static let sender = try! MailAddress("notifications@wristler.example", displayName: "Wristler")

    /// The tier as a user runs it: the ingestion route over real sockets, the four projectors, a
    /// fan-out to the push mock and a mailer writing `.eml` files, while `body` runs.
    static func withTier(
        _ db: TestDatabase, _ mock: PushMock, mailFolder: URL, projections: [any Projection] = InboxProjections.all,
        _ body: (_ ingest: @escaping @Sendable (String) async throws -> HTTP2Response) async throws -> Void
    ) async throws {
        let store = EventStore(client: db.client, validator: EventValidator(registry: InboxCatalogue.registry))
        let api = APIServer(
            routes: InternalEventRoutes.routes(store: store), gate: nil, verifier: TokenVerifier(keys: TokenKeys(keys: [:])),
            services: ServiceCredentials(secrets: ["orders": ordersSecret]))
        let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
        defer { server.shutdown() }
        let client = try HTTP2Client()
        defer { client.shutdown() }
        let port = server.port
        let mailer = MailService(
            configuration: db.configuration, transport: FolderTransport(folder: mailFolder.path), from: sender, links: nil,
            options: .init(batchSize: 200, pollInterval: .milliseconds(100)))
        let mailing = Task { try await mailer.run() }
        defer { mailing.cancel() }
        try await db.withProjectors(projections) {
            try await db.withFanout(transport: try mock.transport(), batchSize: 200) {
                try await body { events in
                    try await client.send(
                        HTTP2Request(
                            method: "POST", url: "http://127.0.0.1:\(port)/internal/v1/events",
                            headers: [("authorization", "Bearer " + ordersSecret), ("content-type", JSONAPI.mediaType)],
                            body: Array(#"{"data":[\#(events)]}"#.utf8)))
                }
            }
        }
        mailing.cancel()
        _ = await mailing.result
    }

    /// An event of the ingestion route's document.
    static func event(_ stream: String, _ type: String, _ payload: String) -> String {
        #"{"type":"events","attributes":{"stream":"\#(stream)","type":"\#(type)","payload":\#(payload),"metadata":{"origin":"api"}}}"#
    }

    static func memberAdded(_ shop: String, _ person: String) -> String {
        event("shop-\(shop)", "shop_member_added", #"{"shopId":"\#(shop)","personId":"\#(person)"}"#)
    }

    static func orderPaid(_ order: String, buyer: String, shop: String) -> String {
        event(
            "order-\(order)", "order_paid",
            #"{"orderId":"\#(order)","buyerId":"\#(buyer)","shopId":"\#(shop)","watchId":"w-\#(order)","amount":{"amount":425000,"currency":"EUR"}}"#)
    }

    /// An Android phone and a mail address for each of `people`.
    static func reachable(_ people: [String], _ db: TestDatabase) async throws {
        for person in people {
            _ = try db.register(person, "android", token: "tok-" + person, locale: "en")
            try await db.client.withConnection { connection in
                _ = try Contacts.set(personId: person, address: try MailAddress("\(person)@example.com"), language: .en, on: connection)
            }
        }
    }

    /// The people who were sent the sold mail, from the mailer's own record.
    static func soldMailed(_ db: TestDatabase) async throws -> [String: Int64] {
        var mailed: [String: Int64] = [:]
        for (person, sent) in try await db.client.query("SELECT person_id, mails_sent FROM mail_people WHERE stream = 'sold'", {
            (try $0.decode(String.self, "person_id"), try $0.decode(Int64.self, "mails_sent"))
        }) {
            mailed[person] = sent
        }
        return mailed
    }

    /// The issue's case: the membership and the paid order in one request, membership first, for
    /// 100 shops at once, 20 times: every new member hears of the sale by push and by mail.
    @Test func aMemberAddedInTheRequestThatPaysAnOrderHearsOfItByPushAndMailEveryTime() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("decided-mail-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            let runs = 20, shops = 100
            var lostPushes: [Int] = [], lostMails: [Int] = []
            try await Self.withTier(db, mock, mailFolder: folder) { ingest in
                for run in 1...runs {
                    let members = (0..<shops).map { "r\(run)-m\($0)" }
                    try await Self.reachable(members, db)
                    let events = (0..<shops).flatMap { index in
                        [
                            Self.memberAdded("r\(run)-s\(index)", members[index]),
                            Self.orderPaid("r\(run)-o\(index)", buyer: "r\(run)-b\(index)", shop: "r\(run)-s\(index)"),
                        ]
                    }
                    let reply = try await ingest(events.joined(separator: ","))
                    #expect(reply.status == 201, "\(String(decoding: reply.body, as: UTF8.self))")
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                    try await waitUntilMailed(db)
                    let pushed = Set(try await mock.pushes().map(\.token)).intersection(members.map { "tok-" + $0 })
                    let mailed = try await Self.soldMailed(db)
                    lostPushes.append(shops - pushed.count)
                    lostMails.append(members.filter { mailed[$0] != 1 }.count)
                }
            }
            #expect(lostPushes == Array(repeating: 0, count: runs), "new members without the push, per run")
            #expect(lostMails == Array(repeating: 0, count: runs), "new members without the sold mail, per run")
            let tokens = try await mock.pushes().map(\.token)
            #expect(tokens.count == Set(tokens).count, "nobody got a push twice")
        }
    }

    /// The people projection held back on purpose (its lease taken by the test): the bell decides
    /// with its own facts, so the member added in the same batch as the sale hears of it and the one
    /// removed just before does not, whatever the people's tables still say.
    @Test func thePeopleProjectionHeldBackChangesNothingForAnAddedOrARemovedMember() async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("decided-mail-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: folder) }
        try await withTestDatabase { db in
            try await Self.reachable(["kept", "leaving", "joining"], db)
            try await db.withProjectors {
                try await db.append(ShopMemberAdded(shopId: "s1", personId: "kept"), ShopMemberAdded(shopId: "s1", personId: "leaving"))
                try await db.waitUntilProjected()
            }
            // The people projector's lease, held by the test for as long as it runs.
            let holder = try PostgresConnection(configuration: db.configuration, applicationName: "test-holds-people")
            defer { holder.close() }
            #expect(try holder.query("SELECT pg_try_advisory_lock(6924, hashtext('people'))").scalar(Bool.self))
            try await Self.withTier(db, mock, mailFolder: folder) { ingest in
                let reply = try await ingest(
                    [
                        Self.memberAdded("s1", "joining"),
                        Self.event("shop-s1", "shop_member_removed", #"{"shopId":"s1","personId":"leaving"}"#),
                        Self.orderPaid("o1", buyer: "buyer", shop: "s1"),
                        Self.orderPaid("o2", buyer: "buyer", shop: "s-nobody"),
                    ].joined(separator: ","))
                #expect(reply.status == 201)
                try await db.waitUntilProjected([BellProjection()])
                try await db.waitUntilFannedOut()
                try await waitUntilMailed(db)
            }
            let people = try await db.client.query("SELECT person_id FROM shop_members WHERE shop_id = 's1' ORDER BY person_id") {
                try $0.decode(String.self, at: 0)
            }
            #expect(people == ["kept", "leaving"], "the people projection is still where the lock held it")
            #expect(Set(try await mock.pushes().map(\.token)) == ["tok-kept", "tok-joining"])
            #expect(try await Self.soldMailed(db) == ["kept": 1, "joining": 1])
            let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".eml") && !$0.hasPrefix(".") }
            #expect(files.count == 2, "\(files)")
            // The sale of a shop nobody works at reaches nobody, and says so.
            #expect(try await db.counter("skipped.no_member") == 1)
            #expect(try await db.client.withConnection { try MailOutboxStore.counters(on: $0) }["skipped.no_member"] == 1)
        }
    }

    /// Membership, switches and blocks interleaved at random with notifications, appended in
    /// batches of random size while the projectors run: the people every push and every mail
    /// reached are exactly those a pure fold over the log says, event by event.
    @Test(arguments: [11, 29, 47]) func theRecipientsOfEveryPushAndMailAreAPureFoldOverTheLog(seed: UInt64) async throws {
        let mock = try await PushMock.start()
        defer { mock.stop() }
        try await withTestDatabase { db in
            var random = SplitMix64(seed: seed)
            let people = (0..<8).map { "p\($0)" }, shops = ["s0", "s1", "s2"]
            for person in people { _ = try db.register(person, "android", token: "tok-" + person, locale: "en") }
            var log: [any CatalogueEvent] = []
            for index in 0..<400 {
                let person = people[Int.random(in: 0..<people.count, using: &random)], shop = shops[Int.random(in: 0..<shops.count, using: &random)]
                switch Int.random(in: 0..<20, using: &random) {
                case 0..<4: log.append(ShopMemberAdded(shopId: shop, personId: person))
                case 4..<6: log.append(ShopMemberRemoved(shopId: shop, personId: person))
                case 6..<10:
                    let (category, channel) = [
                        (NotificationCategory.shop, NotificationChannel.push), (.shop, .email), (.orders, .email), (.security, .email),
                    ][Int.random(in: 0..<4, using: &random)]
                    log.append(NotificationPreferenceChanged(personId: person, category: category, channel: channel, enabled: Int.random(in: 0..<2, using: &random) == 0))
                case 10: if Int.random(in: 0..<4, using: &random) == 0 { log.append(AccountBlocked(personId: person)) }
                case 11..<17:
                    log.append(OrderPaid(orderId: "o\(index)", buyerId: person, shopId: shop, watchId: "w\(index)", amount: Money(amount: 1, currency: "EUR")))
                default: log.append(SignedIn(personId: person, signInId: "si\(index)", platform: "web"))
                }
            }
            let expected = PureFold(log)
            let store = MailOutboxStore(settings: .init(gather: .zero, shopDigest: .zero))
            var mailed = Set<String>()
            try await db.withProjectors {
                try await db.withFanout(transport: try mock.transport()) {
                    var rest = log[...]
                    while !rest.isEmpty {
                        let batch = rest.prefix(1 + Int.random(in: 0..<30, using: &random))
                        rest = rest.dropFirst(batch.count)
                        _ = try await db.store.append(try batch.map { try NewEvent(catalogueEvent: $0) })
                    }
                    try await db.waitUntilProjected()
                    try await db.waitUntilFannedOut()
                }
            }
            // The mailer's decisions, taken and claimed as `MailSender` does, recorded as sent.
            while true {
                let claimed = try await db.client.withConnection { connection in
                    _ = try store.decide(limit: 500, now: Date(), on: connection)
                    return try store.claim(now: Date(), limit: 500, on: connection)
                }
                if claimed.isEmpty { break }
                let outbox = try await db.client.query(
                    "SELECT id, coalesce(ids->>'orderId', ids->>'signInId', '?') AS about FROM notification_outbox WHERE id = ANY($1::bigint[])",
                    binds: [PostgresBind(claimed.flatMap { $0.items.map(\.outboxId) })]
                ) { (try $0.decode(Int64.self, "id"), try $0.decode(String.self, "about")) }
                let about = Dictionary(uniqueKeysWithValues: outbox)
                for mail in claimed {
                    for item in mail.items { mailed.insert("\(mail.personId) \(item.kind.word) \(about[item.outboxId] ?? "?") \(mail.stream.key)") }
                    _ = try await db.client.withConnection { try store.record(mail, .sent(messageID: "<m@x>"), now: Date(), on: $0) }
                }
            }
            let pushed = try await mock.pushes().map { push in
                "\(push.token.dropFirst(4)) \(push.data["event"] ?? "?") \(push.data["orderId"] ?? push.data["signInId"] ?? "?") \(push.data["side"] ?? "own")"
            }
            #expect(pushed.count == Set(pushed).count, "nothing pushed twice")
            #expect(Set(pushed) == expected.pushes, "pushes: missing \(expected.pushes.subtracting(pushed)), extra \(Set(pushed).subtracting(expected.pushes))")
            #expect(mailed == expected.mails, "mails: missing \(expected.mails.subtracting(mailed)), extra \(mailed.subtracting(expected.mails))")
            #expect(!expected.pushes.isEmpty && !expected.mails.isEmpty)
        }
    }

    /// Waits until the mailer has taken every pending entry and sent what is due.
    func waitUntilMailed(_ db: TestDatabase, timeout: Duration = .seconds(60)) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let waiting = try await db.client.withConnection { connection in
                try connection.query(
                    "SELECT (SELECT count(*) FROM mail_pending) + (SELECT count(*) FROM mail_queue q JOIN mail_people p USING (person_id, stream) WHERE p.due_at <= now())"
                ).scalar(Int64.self)
            }
            if waiting == 0 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw PushMock.Failure(description: "the mailer did not finish within \(timeout)")
    }
}

/// Who gets what, folded from the log by hand, event by event: the seed's rules, written a
/// second time and independently of `BellFold` and `PreferenceRules`. A push goes as decided at
/// its event; a mail is decided there too, and a change later in the log (before the mail goes,
/// here: the end of the log) withdraws it: an unsubscribe, leaving the shop, a block.
struct PureFold {
    var pushes: Set<String> = []
    var mails: Set<String> = []

    init(_ log: [any CatalogueEvent]) {
        var members: [String: Set<String>] = [:]
        var off: Set<String> = []  // "person category channel"
        var blocked: Set<String> = []
        // Mails decided at their event: who, the line, and what a later change must leave in place.
        var decided: [(person: String, line: String, category: String, shop: String?)] = []
        for event in log {
            switch event {
            case let e as ShopMemberAdded: members[e.shopId, default: []].insert(e.personId)
            case let e as ShopMemberRemoved: members[e.shopId]?.remove(e.personId)
            case let e as NotificationPreferenceChanged:
                let key = "\(e.personId) \(e.category.rawValue) \(e.channel.rawValue)"
                if e.enabled { off.remove(key) } else { off.insert(key) }
            case let e as AccountBlocked: blocked.insert(e.personId)
            case let e as OrderPaid:
                // The buyer: orders push is locked on, its mail follows the switch.
                if !blocked.contains(e.buyerId) {
                    pushes.insert("\(e.buyerId) order_paid \(e.orderId) own")
                    if !off.contains("\(e.buyerId) orders email") {
                        decided.append((e.buyerId, "order_paid \(e.orderId) notifications", "orders", nil))
                    }
                }
                for member in members[e.shopId] ?? [] where !blocked.contains(member) {
                    if !off.contains("\(member) shop push") { pushes.insert("\(member) order_paid \(e.orderId) seller") }
                    if !off.contains("\(member) shop email") { decided.append((member, "order_paid \(e.orderId) sold", "shop", e.shopId)) }
                }
            case let e as SignedIn:
                if !blocked.contains(e.personId) {
                    pushes.insert("\(e.personId) new_sign_in \(e.signInId) own")
                    if !off.contains("\(e.personId) security email") {
                        decided.append((e.personId, "new_sign_in \(e.signInId) notifications", "security", nil))
                    }
                }
            default: break
            }
        }
        for mail in decided
        where !blocked.contains(mail.person) && !off.contains("\(mail.person) \(mail.category) email")
            && mail.shop.map({ members[$0]?.contains(mail.person) == true }) ?? true
        {
            mails.insert("\(mail.person) \(mail.line)")
        }
    }
}
