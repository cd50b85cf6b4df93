import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import Testing
import Threads

/// The conversation routes on a real socket, against a cluster of their own (the inline driver
/// applies a write at once only when no older transaction of the cluster is writing).
struct ConversationAPI {
    let client: APITestServer
    let db: TestDatabase
    /// The list cache, when `cached`.
    var cache: ConversationListCache? = nil

    static let json = ["Content-Type": JSONAPI.mediaType, "X-Wristler-App": "ios/2.4.0"]

    /// With `cached` (the default, as `inbox serve` runs), list pages are kept in a
    /// `ConversationListCache` told of changes by NOTIFY: every step of these tests then also
    /// checks that a write forgets the pages it changes, on both sides.
    static func with(
        setup: [any CatalogueEvent], threads: Int = 4, cached: Bool = true,
        _ body: (ConversationAPI) async throws -> Void
    ) async throws {
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database(poolSize: 16)
        defer { db.client.close() }
        if !setup.isEmpty { _ = try await db.store.append(try setup.map { try NewEvent(catalogueEvent: $0) }) }
        try await db.withProjectors { try await db.waitUntilProjected() }
        let pool = try InboxRoutes.requestPool(connection: db.configuration, size: threads * 2)
        defer { pool.close() }
        let uploads = UploadSettings(
            directory: FileManager.default.temporaryDirectory.appendingPathComponent("conversation-uploads-\(UUID().uuidString)", isDirectory: true))
        defer { try? FileManager.default.removeItem(at: uploads.directory) }
        let cache = cached ? ConversationListCache(lifetime: .seconds(600)) : nil
        let listener = cache.map { CacheListener(caches: [(ThreadChanges.channel, $0)], configuration: db.configuration) }
        let listening = listener.map { listener in Task { try await listener.run() } }
        defer { listening?.cancel() }
        while let cache, !cache.isListening { try await Task.sleep(for: .milliseconds(10)) }
        let api = APIServer(
            routes: ConversationRoutes.routes(client: pool, attachments: uploads.store(client: pool), cache: cache) + BellRoutes.routes(client: pool)
                + UploadRoutes.routes(client: pool, settings: uploads)
                + BlockRoutes.routes(client: pool, inline: ConversationRoutes.inlineProjections()),
            gate: AppVersionGate(client: db.client, refreshInterval: .zero), verifier: AccessTokenTests.verifier)
        let server = try HTTPServer(configuration: .init(port: 0, threads: threads), replying: { api.reply($0) })
        defer { server.shutdown() }
        try await body(ConversationAPI(client: APITestServer(server: server, db: db), db: db, cache: cache))
    }

    static func headers(_ person: String, scopes: [Scope] = Scope.app) throws -> [String: String] {
        json.merging(["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: person, scopes: scopes))]) { $1 }
    }

    func send(_ person: String, _ method: String, _ path: String, _ body: String? = nil) async throws -> APITestServer.Reply {
        try await client.send(method, path, headers: try Self.headers(person), body: body.map { Data($0.utf8) })
    }

    /// `POST /v1/uploads` of `bytes` as the one `file` part of a form.
    func upload(_ person: String, _ bytes: [UInt8]) async throws -> APITestServer.Reply {
        let (body, type) = UploadRoutesTests.multipart([("file", "photo.png", bytes)])
        return try await client.send("POST", "/v1/uploads", headers: try Self.headers(person).merging(["Content-Type": type]) { $1 }, body: body)
    }

    /// A side's list: the threads' ids, the document's meta.unread, and each thread's attributes by id.
    func list(_ person: String, side: String = "buyer", archived: Bool? = nil) async throws
        -> (ids: [String], unread: Int, threads: [String: [String: Any]])
    {
        var path = "/v1/conversations?filter[side]=\(side)"
        if let archived { path += "&filter[archived]=\(archived)" }
        let reply = try await send(person, "GET", path)
        #expect(reply.status == 200, "\(String(decoding: reply.body, as: UTF8.self))")
        let data = reply.json["data"] as? [[String: Any]] ?? []
        var threads: [String: [String: Any]] = [:]
        // Each thread's attributes, and the ids of its relationships' resources beside them (`shop`, `watch`).
        for item in data {
            var attributes = item["attributes"] as? [String: Any] ?? [:]
            for (name, relationship) in item["relationships"] as? [String: [String: Any]] ?? [:] {
                if let linked = relationship["data"] as? [String: Any] { attributes[name] = linked["id"] }
            }
            threads[item["id"] as? String ?? ""] = attributes
        }
        return (data.compactMap { $0["id"] as? String }, (reply.json["meta"] as? [String: Any])?["unread"] as? Int ?? -1, threads)
    }

    /// After a step: alice's buyer badge, sam's and sue's seller badges (as the writer's request
    /// left them: the threads are projected inline), and alice's bell (once its projector has
    /// caught up).
    func expectBadges(after step: String, alice: Int, sam: Int, sue: Int, bell: Int, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let found = [
            try await list("alice").unread, try await list("sam", side: "seller").unread, try await list("sue", side: "seller").unread,
            try await bellUnread("alice"),
        ]
        #expect(found == [alice, sam, sue, bell], "after step \(step): alice, sam, sue, alice's bell", sourceLocation: sourceLocation)
    }

    /// The bell is not projected inline by the conversation routes (a thread's events ring the
    /// other side's bell, which follows from the log): its projector catches up first.
    func bellCaughtUp() async throws {
        try await db.withProjectors([BellProjection()]) { try await db.waitUntilProjected([BellProjection()]) }
    }

    func bellUnread(_ person: String) async throws -> Int {
        try await bellCaughtUp()
        let reply = try await send(person, "GET", "/v1/me/notifications")
        return (reply.json["meta"] as? [String: Any])?["unread"] as? Int ?? -1
    }

    /// What the bell enqueued for the fan-out, in order: audience, recipient, category, event, thread.
    /// The notifications enqueued, one line each (a shop's news names the shop, not each of the
    /// rows it has for the people who work there).
    func outbox() async throws -> [String] {
        try await bellCaughtUp()
        return try await db.client.query(
            """
            SELECT audience, CASE WHEN audience = 'shop' THEN ids->>'sellerId' ELSE recipient_id END AS recipient_id, category, event,
                ids->>'conversationId' AS c
            FROM notification_outbox o
            WHERE o.id = (SELECT min(id) FROM notification_outbox p WHERE p.source_position = o.source_position AND p.notification_id = o.notification_id)
            ORDER BY o.id
            """
        ) {
            "\(try $0.decode(String.self, "audience")) \(try $0.decode(String.self, "recipient_id")) \(try $0.decode(String.self, "category")) "
                + "\(try $0.decode(String.self, "event")) \(try $0.decode(String?.self, "c") ?? "-")"
        }
    }

    static func message(_ body: String, handles: [String] = [], offer: String? = nil) -> String {
        var attributes = #""body":"\#(body)""#
        if !handles.isEmpty { attributes += #","attachmentHandles":[\#(handles.map { "\"\($0)\"" }.joined(separator: ","))]"# }
        if let offer { attributes += #","offer":\#(offer)"# }
        return #"{"data":{"type":"messages","attributes":{\#(attributes)}}}"#
    }

    static func start(_ watch: String, _ body: String) -> String {
        #"{"data":{"type":"conversations","attributes":{"watchId":"\#(watch)","body":"\#(body)"}}}"#
    }

    static func patch(_ id: String, _ attributes: String) -> String {
        #"{"data":{"type":"conversations","id":"\#(id)","attributes":{\#(attributes)}}}"#
    }
}

extension APITestServer.Reply {
    var data: [String: Any] { json["data"] as? [String: Any] ?? [:] }
    var attributes: [String: Any] { data["attributes"] as? [String: Any] ?? [:] }
    /// `type/id` of the resource a relationship of `data` links to.
    func relationship(_ name: String) -> String? {
        let linked = ((data["relationships"] as? [String: [String: Any]])?[name]?["data"] as? [String: Any])
        return linked.map { "\($0["type"] ?? "")/\($0["id"] ?? "")" }
    }
    var pointer: String? { (firstError["source"] as? [String: Any])?["pointer"] as? String }
    var code: String? { firstError["code"] as? String }
    var text: String { String(decoding: body, as: UTF8.self) }
}

@Suite struct ConversationRoutesTests {
    static let setup: [any CatalogueEvent] = [
        ShopMemberAdded(shopId: "s1", personId: "sam"), ShopMemberAdded(shopId: "s1", personId: "sue"),
        ShopMemberAdded(shopId: "s2", personId: "sue"),
        WatchStatusChanged(watchId: "w1", shopId: "s1", status: .forSale), WatchStatusChanged(watchId: "w2", shopId: "s1", status: .sold),
        WatchStatusChanged(watchId: "w3", shopId: "s1", status: .offline), WatchStatusChanged(watchId: "w4", shopId: "s1", status: .deleted),
        WatchStatusChanged(watchId: "w5", shopId: "s2", status: .forSale), WatchStatusChanged(watchId: "w6", shopId: "s1", status: .forSale),
    ]

    /// A whole conversation between a buyer (alice) and a shop with two people working there (sam,
    /// sue; sue also works at a second shop), checking after every step each side's list,
    /// `meta.unread`, the bell and what was queued for the fan-out.
    @Test func aWholeConversationBetweenABuyerAndAShopIsRightOnBothSidesAfterEveryStep() async throws {
        try await ConversationAPI.with(setup: Self.setup) { api in
            var outbox: [String] = []

            // 1. Alice starts one about w1.
            let started = try await api.send("alice", "POST", "/v1/conversations", ConversationAPI.start("w1", "Is it still available?"))
            #expect(started.status == 201, "\(started.text)")
            let c = try #require(started.data["id"] as? String)
            #expect(started.attributes["side"] as? String == "buyer")
            #expect(started.relationship("watch") == "watches/w1")
            #expect(started.relationship("shop") == "shops/s1")
            let related = (started.data["relationships"] as? [String: [String: Any]])?["messages"]?["links"] as? [String: Any]
            #expect(related?["related"] as? String == "/v1/conversations/\(c)/messages")
            #expect((started.data["links"] as? [String: Any])?["self"] as? String == "/v1/conversations/\(c)")
            let first = (started.json["included"] as? [[String: Any]])?.first
            #expect(((first?["relationships"] as? [String: [String: Any]])?["conversation"]?["data"] as? [String: Any])?["id"] as? String == c)
            #expect(started.attributes["unread"] as? Bool == false, "her own message is not unread for her")
            #expect((started.attributes["otherParty"] as? [String: Any])?["id"] as? String == "s1")
            #expect(((started.json["included"] as? [[String: Any]])?.first?["attributes"] as? [String: Any])?["mine"] as? Bool == true)
            var alice = try await api.list("alice")
            #expect(alice.ids == [c] && alice.unread == 0)
            #expect((alice.threads[c]?["lastMessage"] as? [String: Any])?["body"] as? String == "Is it still available?")
            for person in ["sam", "sue"] {
                let seller = try await api.list(person, side: "seller")
                #expect(seller.ids == [c] && seller.unread == 1, "\(person): \(seller)")
                #expect(seller.threads[c]?["unread"] as? Bool == true)
                #expect(seller.threads[c]?["noReplyNeeded"] as? Bool == false)
                #expect(seller.threads[c]?["shop"] as? String == "s1")
                #expect((seller.threads[c]?["otherParty"] as? [String: Any])?["id"] as? String == "alice")
            }
            #expect(try await api.list("sam").ids.isEmpty, "sam has no threads as a buyer")
            #expect(try await api.bellUnread("alice") == 0)
            outbox.append("shop s1 shop message_received \(c)")
            #expect(try await api.outbox() == outbox)
            try await api.expectBadges(after: "1", alice: 0, sam: 1, sue: 1, bell: 0)

            // Watches that cannot be written about, and the shop's own people, are refused naming the watch.
            for (watch, status) in [("w2", "sold"), ("w3", "offline"), ("w4", "deleted"), ("nope", "unknown")] {
                let refused = try await api.send("bob", "POST", "/v1/conversations", ConversationAPI.start(watch, "Hi"))
                #expect(refused.status == 422 && refused.code == "watch_unavailable" && refused.pointer == "/data/attributes/watchId", "\(watch): \(refused.text)")
                #expect((refused.firstError["meta"] as? [String: Any])?["status"] as? String == status)
            }
            let own = try await api.send("sam", "POST", "/v1/conversations", ConversationAPI.start("w1", "Hi"))
            #expect(own.status == 422 && own.code == "own_shop" && own.pointer == "/data/attributes/watchId")

            // 2. A second start about the same watch answers the same thread, with the message in it.
            let again = try await api.send("alice", "POST", "/v1/conversations", ConversationAPI.start("w1", "Hello?"))
            #expect(again.status == 200 && again.data["id"] as? String == c, "\(again.text)")
            outbox.append("shop s1 shop message_received \(c)")
            #expect(try await api.outbox() == outbox)
            try await api.expectBadges(after: "2", alice: 0, sam: 1, sue: 1, bell: 0)
            #expect(try await api.list("alice").ids == [c])

            // 3. Sam answers: alice's side is unread, her bell rings; the shop's side is read.
            let answer = try await api.send("sam", "POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("Yes, it is."))
            #expect(answer.status == 201, "\(answer.text)")
            #expect(answer.attributes["authorSide"] as? String == "seller" && answer.attributes["mine"] as? Bool == true)
            alice = try await api.list("alice")
            #expect(alice.unread == 1 && alice.threads[c]?["unread"] as? Bool == true)
            #expect(try await api.bellUnread("alice") == 1)
            for person in ["sam", "sue"] {
                let seller = try await api.list(person, side: "seller")
                #expect(seller.unread == 0 && seller.threads[c]?["unread"] as? Bool == false, "\(person): the shop wrote last")
            }
            outbox.append("person alice messages message_received \(c)")
            #expect(try await api.outbox() == outbox)
            try await api.expectBadges(after: "3", alice: 1, sam: 0, sue: 0, bell: 1)

            // 4. Bob writes to sue's other shop: sue sees both shops' threads, each naming its shop; sam only his.
            let bobs = try await api.send("bob", "POST", "/v1/conversations", ConversationAPI.start("w5", "Box and papers?"))
            #expect(bobs.status == 201)
            let b = try #require(bobs.data["id"] as? String)
            let sue = try await api.list("sue", side: "seller")
            #expect(sue.ids == [b, c] && sue.unread == 1, "newest activity first: \(sue)")
            #expect(sue.threads[b]?["shop"] as? String == "s2" && sue.threads[c]?["shop"] as? String == "s1")
            #expect(try await api.list("sam", side: "seller").ids == [c])
            outbox.append("shop s2 shop message_received \(b)")
            #expect(try await api.outbox() == outbox)
            try await api.expectBadges(after: "4", alice: 1, sam: 0, sue: 1, bell: 1)

            // 5. Alice uploads a photo and sends it; a handle somebody else uploaded is refused naming it.
            let aliceFile = try await api.upload("alice", UploadRoutesTests.png)
            let bobFile = try await api.upload("bob", UploadRoutesTests.png)
            let mine = try #require(aliceFile.attributes["handle"] as? String, "\(aliceFile.text)")
            let his = try #require(bobFile.attributes["handle"] as? String, "\(bobFile.text)")
            #expect(try await api.send("sam", "GET", "/v1/uploads/\(mine)").status == 404, "not attached yet: only its uploader reads it")
            let foreign = try await api.send("alice", "POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("", handles: [mine, his]))
            #expect(foreign.status == 422 && foreign.code == "unknown_attachment" && foreign.pointer == "/data/attributes/attachmentHandles/1", "\(foreign.text)")
            let photo = try await api.send("alice", "POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("", handles: [mine]))
            #expect(photo.status == 201, "\(photo.text)")
            #expect(photo.attributes["attachmentHandles"] as? [String] == [mine])
            let photoFile = try await api.send("sam", "GET", "/v1/uploads/\(mine)")
            #expect(photoFile.status == 200 && [UInt8](photoFile.body) == UploadRoutesTests.png, "the shop's people see the photo of their thread")
            #expect(try await api.send("bob", "GET", "/v1/uploads/\(mine)").status == 404, "nobody else does")
            alice = try await api.list("alice")
            #expect(alice.unread == 0, "writing in a thread answers what was in it")
            #expect(try await api.list("sam", side: "seller").unread == 1)
            #expect(try await api.list("sue", side: "seller").unread == 2)
            outbox.append("shop s1 shop message_received \(c)")
            #expect(try await api.outbox() == outbox)
            try await api.expectBadges(after: "5", alice: 0, sam: 1, sue: 2, bell: 1)

            // 6. Sue makes an offer.
            let offer = try await api.send(
                "sue", "POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("For you: 9,500", offer: #"{"amount":950000,"currency":"EUR"}"#))
            #expect(offer.status == 201, "\(offer.text)")
            #expect((offer.attributes["offer"] as? [String: Any])?["amount"] as? Int == 950000)
            #expect(try await api.list("alice").unread == 1)
            #expect(try await api.bellUnread("alice") == 2)
            #expect(try await api.list("sam", side: "seller").unread == 0)
            #expect(try await api.list("sue", side: "seller").unread == 1, "bob's thread is still unread")
            outbox.append("person alice messages offer_made \(c)")
            #expect(try await api.outbox() == outbox)
            try await api.expectBadges(after: "6", alice: 1, sam: 0, sue: 1, bell: 2)

            // 7. Fetching never marks anything read; PATCH unread: false does, for the caller's side only.
            #expect(try await api.send("alice", "GET", "/v1/conversations/\(c)").attributes["unread"] as? Bool == true)
            let messages = try await api.send("alice", "GET", "/v1/conversations/\(c)/messages")
            #expect((messages.json["data"] as? [[String: Any]])?.count == 5)
            #expect(try await api.list("alice").unread == 1, "still unread after fetching")
            let read = try await api.send("alice", "PATCH", "/v1/conversations/\(c)", ConversationAPI.patch(c, #""unread":false"#))
            #expect(read.status == 200 && read.attributes["unread"] as? Bool == false, "\(read.text)")
            #expect(try await api.list("alice").unread == 0)
            #expect(try await api.bellUnread("alice") == 2, "the bell has read marks of its own")
            #expect(try await api.list("sue", side: "seller").unread == 1)
            let sueReads = try await api.send("sue", "PATCH", "/v1/conversations/\(b)", ConversationAPI.patch(b, #""unread":false"#))
            #expect(sueReads.status == 200 && sueReads.attributes["side"] as? String == "seller")
            #expect(try await api.list("sue", side: "seller").unread == 0)
            #expect(try await api.list("bob").unread == 0)
            #expect(try await api.outbox() == outbox, "marks queue nothing")
            try await api.expectBadges(after: "7", alice: 0, sam: 0, sue: 0, bell: 2)

            // 8. Alice archives it: it leaves her list (and only hers); sam's answer brings it back.
            let archived = try await api.send("alice", "PATCH", "/v1/conversations/\(c)", ConversationAPI.patch(c, #""archived":true"#))
            #expect(archived.status == 200 && archived.attributes["archived"] as? Bool == true)
            #expect(try await api.list("alice").ids.isEmpty)
            #expect(try await api.list("alice", archived: true).ids == [c])
            #expect(try await api.list("sam", side: "seller").ids == [c])
            #expect(try await api.send("sam", "POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("Shall I reserve it?")).status == 201)
            alice = try await api.list("alice")
            #expect(alice.ids == [c] && alice.unread == 1 && alice.threads[c]?["archived"] as? Bool == false)
            #expect(try await api.list("alice", archived: true).ids.isEmpty)
            #expect(try await api.bellUnread("alice") == 3)
            outbox.append("person alice messages message_received \(c)")
            #expect(try await api.outbox() == outbox)
            try await api.expectBadges(after: "8", alice: 1, sam: 0, sue: 0, bell: 3)

            // 9. The shop says no reply is needed; the buyer's next message clears it.
            let refusedForBuyer = try await api.send("alice", "PATCH", "/v1/conversations/\(c)", ConversationAPI.patch(c, #""noReplyNeeded":true"#))
            #expect(refusedForBuyer.status == 422 && refusedForBuyer.pointer == "/data/attributes/noReplyNeeded")
            let noReply = try await api.send("sam", "PATCH", "/v1/conversations/\(c)", ConversationAPI.patch(c, #""noReplyNeeded":true"#))
            #expect(noReply.status == 200 && noReply.attributes["noReplyNeeded"] as? Bool == true)
            #expect(try await api.list("sue", side: "seller").threads[c]?["noReplyNeeded"] as? Bool == true)
            #expect(try await api.send("alice", "POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("Thanks, I will think.")).status == 201)
            let afterBuyer = try await api.list("sue", side: "seller")
            #expect(afterBuyer.threads[c]?["noReplyNeeded"] as? Bool == false && afterBuyer.unread == 1)
            #expect(try await api.list("alice").unread == 0)
            outbox.append("shop s1 shop message_received \(c)")
            #expect(try await api.outbox() == outbox)
            try await api.expectBadges(after: "9", alice: 0, sam: 1, sue: 1, bell: 3)

            // 10. Messages in pages, with messages arriving during the walk: none skipped, none twice.
            let before = try await api.db.scalar("SELECT count(*)::int FROM messages WHERE conversation_id = '\(c)'", Int.self)
            var seen: [String] = []
            var path: String? = "/v1/conversations/\(c)/messages?page[limit]=2"
            var pages = 0
            while let next = path {
                let page = try await api.send("sam", "GET", next)
                #expect(page.status == 200, "\(page.text)")
                seen += (page.json["data"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
                path = (page.json["links"] as? [String: Any])?["next"] as? String
                pages += 1
                if pages <= 2 {
                    #expect(try await api.send("sue", "POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("More photos soon (\(pages))")).status == 201)
                    outbox.append("person alice messages message_received \(c)")
                }
            }
            #expect(seen.count == before && Set(seen).count == before, "\(seen.count) of \(before)")
            #expect(try await api.outbox() == outbox)
            try await api.expectBadges(after: "10", alice: 1, sam: 0, sue: 0, bell: 5)

            // 11. Anybody else: 404 on every route of the thread; bad input names the field.
            for (method, path, body) in [
                ("GET", "/v1/conversations/\(c)", nil), ("GET", "/v1/conversations/\(c)/messages", nil),
                ("POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("Hi")),
                ("PATCH", "/v1/conversations/\(c)", ConversationAPI.patch(c, #""archived":true"#)),
            ] as [(String, String, String?)] {
                #expect(try await api.send("eve", method, path, body).status == 404, "\(method) \(path)")
                #expect(try await api.send("sam", method, path.replacingOccurrences(of: c, with: "nope"), body?.replacingOccurrences(of: c, with: "nope")).status == 404)
            }
            #expect(try await api.list("eve", side: "seller").ids.isEmpty)
            for (body, pointer) in [
                (#"{"data":{"type":"messages","attributes":{"body":""}}}"#, "/data/attributes/body"),
                (#"{"data":{"type":"messages","attributes":{"body":"\#(String(repeating: "x", count: 4001))"}}}"#, "/data/attributes/body"),
                (#"{"data":{"type":"messages","attributes":{"body":"a\u0007"}}}"#, "/data/attributes/body"),
                (#"{"data":{"type":"messages","attributes":{"body":"e\#(String(repeating: "\u{301}", count: 9000))"}}}"#, "/data/attributes/body"),
                (#"{"data":{"type":"messages","attributes":{"body":"a\u0000"}}}"#, "/data/attributes/body"),
                (#"{"data":{"type":"messages","attributes":{"body":"x","offer":{"amount":0,"currency":"EUR"}}}}"#, "/data/attributes/offer/amount"),
                (#"{"data":{"type":"messages","attributes":{"body":"x","offer":{"amount":1.5,"currency":"EUR"}}}}"#, "/data/attributes/offer/amount"),
                (#"{"data":{"type":"messages","attributes":{"body":"x","offer":{"amount":100,"currency":"eur"}}}}"#, "/data/attributes/offer/currency"),
                (#"{"data":{"type":"messages","attributes":{"body":"x","attachmentHandles":"h"}}}"#, "/data/attributes/attachmentHandles"),
                (#"{"data":{"type":"messages","attributes":{"body":"x","attachmentHandles":[7]}}}"#, "/data/attributes/attachmentHandles/0"),
                (#"{"data":{"type":"messages","attributes":{"body":"x","colour":"red"}}}"#, "/data/attributes/colour"),
            ] {
                let refused = try await api.send("alice", "POST", "/v1/conversations/\(c)/messages", body)
                #expect(refused.status == 422 && refused.pointer == pointer, "\(body.prefix(120)): \(refused.status) \(refused.text)")
            }
            for (attributes, pointer) in [
                (#""unread":true"#, "/data/attributes/unread"), (#""noReplyNeeded":false"#, "/data/attributes/noReplyNeeded"),
                (#""archived":"yes""#, "/data/attributes/archived"), (#""closed":true"#, "/data/attributes/closed"),
            ] {
                let refused = try await api.send("sam", "PATCH", "/v1/conversations/\(c)", ConversationAPI.patch(c, attributes))
                #expect(refused.status == 422 && refused.pointer == pointer, "\(attributes): \(refused.text)")
            }
            #expect(try await api.send("sam", "PATCH", "/v1/conversations/\(c)", ConversationAPI.patch(c, #""unread":null"#)).status == 200, "null is absent")
            #expect(try await api.send("sam", "PATCH", "/v1/conversations/\(c)", ConversationAPI.patch("other", #""archived":true"#)).status == 409)
            for query in ["filter[side]=both", "filter[archived]=maybe", "page[limit]=51", "page[cursor]=garbage"] {
                let refused = try await api.send("alice", "GET", "/v1/conversations?\(query)")
                #expect(refused.status == 400, "\(query)")
            }
            let guest = try AccessTokenTests.signer.mint(subject: "", scopes: Scope.guest + [.messagesRead], guest: true)
            #expect(try await api.client.send("GET", "/v1/conversations", headers: ["Authorization": "Bearer " + guest]).code == "sign_in_required")
            let readOnly = try ConversationAPI.headers("alice", scopes: [.messagesRead])
            let missing = try await api.client.send("POST", "/v1/conversations/\(c)/messages", headers: readOnly, body: Data(ConversationAPI.message("x").utf8))
            #expect(missing.status == 403 && missing.code == "missing_scope")
            #expect(try await api.outbox() == outbox, "refusals queue nothing")
            try await api.expectBadges(after: "11", alice: 1, sam: 0, sue: 0, bell: 5)

            // 12. A block closes the thread: it can be read, not written to; a buyer Wristler blocked likewise.
            let block = try await api.send("alice", "POST", "/v1/me/blocks", #"{"data":{"type":"blocks","relationships":{"blocked":{"data":{"type":"people","id":"sam"}}}}}"#)
            #expect(block.status == 201, "\(block.text)")
            try await api.db.append(AccountBlocked(personId: "bob", reason: "fraud"))
            try await api.db.withProjectors { try await api.db.waitUntilProjected() }
            for person in ["alice", "sam", "sue"] {
                let closed = try await api.send(person, "POST", "/v1/conversations/\(c)/messages", ConversationAPI.message("Hello?"))
                #expect(closed.status == 422 && closed.code == "conversation_closed", "\(person): \(closed.text)")
            }
            let restart = try await api.send("alice", "POST", "/v1/conversations", ConversationAPI.start("w1", "Hello again"))
            #expect(restart.status == 422 && restart.code == "conversation_closed")
            let otherWatch = try await api.send("alice", "POST", "/v1/conversations", ConversationAPI.start("w6", "And this one?"))
            #expect(otherWatch.status == 422 && otherWatch.code == "conversation_closed", "she blocked somebody who works at s1: \(otherWatch.text)")
            let blockedBuyer = try await api.send("bob", "POST", "/v1/conversations", ConversationAPI.start("w6", "Hello"))
            #expect(blockedBuyer.status == 422 && blockedBuyer.code == "conversation_closed", "Wristler blocked bob")
            let buyerBlocked = try await api.send("sue", "POST", "/v1/conversations/\(b)/messages", ConversationAPI.message("Yes, both."))
            #expect(buyerBlocked.status == 422 && buyerBlocked.code == "conversation_closed")
            #expect((buyerBlocked.firstError["meta"] as? [String: Any])?["reason"] as? String == "buyer_blocked")
            let closedThread = try await api.send("alice", "GET", "/v1/conversations/\(c)")
            #expect(closedThread.status == 200 && closedThread.attributes["closed"] as? Bool == true)
            #expect(try await api.send("alice", "GET", "/v1/conversations/\(c)/messages").status == 200)
            #expect(try await api.send("alice", "PATCH", "/v1/conversations/\(c)", ConversationAPI.patch(c, #""archived":true"#)).status == 200, "marks are not writing")
            #expect(try await api.outbox() == outbox, "nothing is queued once the thread is closed")
            try await api.expectBadges(after: "12", alice: 1, sam: 0, sue: 0, bell: 5)

            // Every write is an event with the app's origin.
            let origins = try await api.db.client.query(
                "SELECT DISTINCT metadata->>'origin' AS origin, metadata->>'appVersion' AS version FROM events WHERE stream_id = $1",
                binds: [PostgresBind("conversation-\(c)")]
            ) { "\(try $0.decode(String.self, "origin")) \(try $0.decode(String.self, "version"))" }
            #expect(origins == ["app:ios 2.4.0"])
            #expect(try await api.db.countersThatDisagreeWithARecount() == [])
        }
    }

    /// Wristler's aftercare thread with a buyer has no seller side: the shop of its order neither
    /// lists nor reads it; the buyer lists it, with Wristler as the other party, and answers in it.
    @Test func anAftercareThreadIsTheBuyersAndWristlersOnly() async throws {
        try await ConversationAPI.with(
            setup: Self.setup + [
                ConversationStarted(conversationId: "after-1", kind: .aftercare, buyerId: "alice", shopId: "s1", watchId: "w1", orderId: "o1"),
                MessageSent(conversationId: "after-1", messageId: "after-1-m1", authorSide: .wristler, authorId: "agent-7", body: "How is the watch?"),
            ]
        ) { api in
            let alice = try await api.list("alice")
            #expect(alice.ids == ["after-1"] && alice.unread == 1)
            #expect((alice.threads["after-1"]?["otherParty"] as? [String: Any])?["type"] as? String == "wristler")
            #expect(alice.threads["after-1"]?["kind"] as? String == "aftercare")
            #expect(try await api.list("sam", side: "seller").ids.isEmpty)
            #expect(try await api.send("sam", "GET", "/v1/conversations/after-1").status == 404)
            #expect(try await api.send("sam", "POST", "/v1/conversations/after-1/messages", ConversationAPI.message("Hi")).status == 404)
            let answer = try await api.send("alice", "POST", "/v1/conversations/after-1/messages", ConversationAPI.message("Very well, thank you."))
            #expect(answer.status == 201 && answer.attributes["authorSide"] as? String == "buyer")
            #expect(try await api.list("alice").unread == 0)
            let messages = try await api.send("alice", "GET", "/v1/conversations/after-1/messages")
            let first = (messages.json["data"] as? [[String: Any]])?.last?["attributes"] as? [String: Any]
            #expect(first?["authorSide"] as? String == "wristler" && first?["authorId"] == nil, "which agent wrote is not the buyer's to see")
            #expect(
                try await api.outbox() == ["person alice messages message_received after-1"],
                "Wristler's message rang her bell; her answer to Wristler is nobody's shop news")
        }
    }

    /// A phone that lost the answer to a write sends it again with the same `Idempotency-Key`: the
    /// message is written once, the retry answers it again, and the badges, the bell and the
    /// fan-out's queue count it once. Another write under a used key is refused and writes nothing.
    @Test func aRetriedWriteWithItsIdempotencyKeyIsWrittenOnce() async throws {
        try await ConversationAPI.with(setup: Self.setup) { api in
            func write(_ person: String, _ method: String, _ path: String, _ body: String, key: String) async throws -> APITestServer.Reply {
                try await api.client.send(
                    method, path, headers: try ConversationAPI.headers(person).merging(["Idempotency-Key": key]) { $1 }, body: Data(body.utf8))
            }
            func messages(_ c: String) async throws -> [String] {
                let reply = try await api.send("alice", "GET", "/v1/conversations/\(c)/messages")
                return (reply.json["data"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
            }
            func included(_ reply: APITestServer.Reply) -> String? { (reply.json["included"] as? [[String: Any]])?.first?["id"] as? String }

            // A start, and its retry: one thread, one message, one piece of shop news.
            let started = try await write("alice", "POST", "/v1/conversations", ConversationAPI.start("w1", "Is it still available?"), key: "start-1")
            #expect(started.status == 201 && started.header("Idempotent-Replayed") == nil, "\(started.text)")
            let c = try #require(started.data["id"] as? String)
            let first = try #require(included(started))
            let restarted = try await write("alice", "POST", "/v1/conversations", ConversationAPI.start("w1", "Is it still available?"), key: "start-1")
            #expect(restarted.status == 200 && restarted.data["id"] as? String == c, "\(restarted.text)")
            #expect(restarted.header("Idempotent-Replayed") == "true" && included(restarted) == first)
            #expect(try await messages(c) == [first])
            #expect(try await api.outbox() == ["shop s1 shop message_received \(c)"])

            // A message, and two retries of it (one of them from sam's side of the world: keys are each person's own).
            let path = "/v1/conversations/\(c)/messages"
            let sent = try await write("alice", "POST", path, ConversationAPI.message("Would you take 9,000?", offer: #"{"amount":900000,"currency":"EUR"}"#), key: "k-2")
            #expect(sent.status == 201 && sent.header("Idempotent-Replayed") == nil, "\(sent.text)")
            let second = try #require(sent.data["id"] as? String)
            for _ in 0..<2 {
                let again = try await write("alice", "POST", path, ConversationAPI.message("Would you take 9,000?", offer: #"{"amount":900000,"currency":"EUR"}"#), key: "k-2")
                #expect(again.status == 201 && again.data["id"] as? String == second && again.header("Idempotent-Replayed") == "true", "\(again.text)")
                #expect((again.attributes["offer"] as? [String: Any])?["amount"] as? Int == 900_000)
            }
            #expect(try await messages(c) == [second, first])
            #expect(try await api.outbox() == ["shop s1 shop message_received \(c)", "shop s1 shop offer_made \(c)"])
            try await api.expectBadges(after: "the retries", alice: 0, sam: 1, sue: 1, bell: 0)

            // The same key for another message (or another thread) is refused, pointing at the header; nothing is written.
            for (body, target) in [(ConversationAPI.message("Or 8,500?"), path), (ConversationAPI.start("w6", "Would you take 9,000?"), "/v1/conversations")] {
                let reused = try await write("alice", "POST", target, body, key: "k-2")
                #expect(reused.status == 422 && reused.code == "idempotency_key_reused", "\(reused.text)")
                #expect((reused.firstError["source"] as? [String: Any])?["header"] as? String == "Idempotency-Key")
            }
            #expect(try await messages(c) == [second, first])
            #expect(try await api.list("alice").ids == [c], "the refused start about w6 started nothing")

            // Sam may use the same key: it is his own.
            let sams = try await write("sam", "POST", path, ConversationAPI.message("Make it 9,200."), key: "k-2")
            #expect(sams.status == 201 && sams.header("Idempotent-Replayed") == nil && sams.data["id"] as? String != second, "\(sams.text)")
            let third = try #require(sams.data["id"] as? String)

            // Eight retries at once: one message.
            let answers = try await withThrowingTaskGroup(of: String?.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        let reply = try await write("alice", "POST", path, ConversationAPI.message("Deal."), key: "k-3")
                        return reply.status == 201 ? reply.data["id"] as? String : nil
                    }
                }
                return try await group.reduce(into: [String?]()) { $0.append($1) }
            }
            #expect(Set(answers).count == 1 && answers.allSatisfy { $0 != nil }, "\(answers)")
            #expect(try await messages(c) == [answers[0]!, third, second, first])

            // Keys that are not 1 to 100 visible ASCII characters are refused before anything is read.
            for key in [String(repeating: "k", count: 101), "two words", "caf\u{e9}"] {
                let refused = try await write("alice", "POST", path, ConversationAPI.message("Hm."), key: key)
                #expect(refused.status == 400 && refused.code == "invalid_header", "\(key): \(refused.text)")
                #expect((refused.firstError["source"] as? [String: Any])?["header"] as? String == "Idempotency-Key")
            }
            #expect(try await messages(c).count == 4)
            #expect(try await api.db.countersThatDisagreeWithARecount() == [])
        }
    }
}
