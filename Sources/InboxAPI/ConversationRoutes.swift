import Crypto
import EventLog
import Foundation
import HTTPServer
import InboxDomain
import PlantedSlowdown
import PostgresClient
import Projections

/// Conversations between buyers and shops (`/v1/conversations`, docs/messaging.md): the lists of
/// each side in cursor pages with `meta.unread`, starting one about a watch, the messages of a
/// thread, writing in it, and the read, archive and "no reply needed" marks. Every write is an
/// event, projected inline so the writer's next read shows it; the other side, the bell and the
/// push fan-out follow from the log.
///
/// Who may see a thread: its buyer, and the people who work at its shop (`shop_members`). Anybody
/// else gets 404, as for a thread that does not exist.
public enum ConversationRoutes {
    static let path = "/v1/conversations"
    static let type = "conversations"
    static let messageType = "messages"
    /// The longest message body, in characters.
    static let maximumBodyLength = 4_000
    /// The longest message body, in bytes (UTF-8).
    static let maximumBodyBytes = 16_384
    /// The most attachments one message names.
    static let maximumAttachments = 10
    /// The largest offer, in minor units (ten billion in a currency's major unit).
    static let maximumOfferAmount: Int64 = 1_000_000_000_000

    /// The writes' inline driver: the threads, which the writer reads next. The bell's part of a
    /// post (the recipients' entries and the notifications queued for the fan-out) is done by its
    /// projector, a batch of many posts at a time, out of the writers' transactions.
    public static func inlineProjections(groupCommit: InlineGroupCommit = InlineGroupCommit()) -> InlineProjections {
        InlineProjections(projections: [ThreadsProjection()], groupCommit: groupCommit)
    }

    static let messageAttributes: Set<String> = ["body", "attachmentHandles", "offer"]
    static let idempotencyHeader = "Idempotency-Key"
    static let maximumIdempotencyKeyBytes = 100
    static let idempotencyParameter = QueryParameter(
        idempotencyHeader, Schema.string(maximumLength: maximumIdempotencyKeyBytes, pattern: "^[!-~]{1,100}$"),
        "A key of the client's for this message (a fresh UUID, say): sending the same write again with it, after a lost answer, writes nothing and answers what the first wrote (Idempotent-Replayed: true); with another body, offer, attachments or thread it is 422 idempotency_key_reused.")
    /// A message has a body that is not blank, or an attachment (`MessageInput`); an offer alone is
    /// not a message. Said as what is refused (`not`: neither), which client generators leave
    /// aside, where an `anyOf` beside the properties made openapi-python-client drop the operation.
    static let messageRules: [String: JSONValue] = [
        "not": .object([
            "allOf": .array([
                .object(["not": .object(["required": .array([.string("body")]), "properties": .object(["body": .object(["type": .string("string"), "pattern": .string("\\S")])])])]),
                .object([
                    "not": .object([
                        "required": .array([.string("attachmentHandles")]),
                        "properties": .object(["attachmentHandles": .object(["type": .string("array"), "minItems": .integer(1)])]),
                    ])
                ]),
            ])
        ])
    ]

    static let messageSchemas: [String: JSONValue] = [
        "body": .object([
            "type": .string("string"), "maxLength": .integer(Int64(maximumBodyLength)),
            "pattern": .string("^[^\\u0000-\\u0008\\u000B\\u000C\\u000E-\\u001F\\u007F-\\u009F]*$"),
            "description": .string("The text; may be empty (or absent) only when the message has an attachment."),
        ]),
        "attachmentHandles": .object([
            "type": .string("array"), "maxItems": .integer(Int64(maximumAttachments)), "uniqueItems": .bool(true),
            "items": Schema.string(maximumLength: 200),
            "description": .string("Handles of POST /v1/uploads that the caller uploaded; others are 422 naming them."),
        ]),
        "offer": Schema.object(
            [
                "amount": .object([
                    "type": .string("integer"), "minimum": .integer(1), "maximum": .integer(maximumOfferAmount),
                    "description": .string("In minor units (cents)."),
                ]),
                "currency": .object(["type": .string("string"), "pattern": .string("^[A-Z]{3}$"), "description": .string("ISO 4217.")]),
            ], required: ["amount", "currency"]),
    ]
    static let patchSchemas: [String: JSONValue] = [
        "unread": Schema.constant(false).adding("description", .string("false: marks this side read up to the newest message.")),
        "archived": Schema.boolean,
        "noReplyNeeded": Schema.constant(true).adding("description", .string("Seller side only: the shop need not answer until the buyer writes again.")),
    ]

    static let listQuery: [QueryParameter] =
        QueryParameter.cursorPage + [
            QueryParameter("filter[side]", Schema.choice(["buyer", "seller"]), "buyer (default): the person's own threads; seller: the threads of the shops they work at."),
            QueryParameter("filter[archived]", Schema.choice(["true", "false"]), "true: only archived threads; false (default): only the others."),
        ]

    /// With a `cache`, list pages are answered from memory while nothing they show changed
    /// (`ConversationListCache`); every write here forgets its thread's lists before answering.
    ///
    /// `inline` projects the threads only (`inlineProjections`): what a conversation's events do
    /// to the bell is for the other side (a message notifies its recipients), which follows from
    /// the log; the writer's own bell does not change.
    public static func routes(
        client: PostgresClient, inline: InlineProjections = inlineProjections(), attachments: any AttachmentValidator = NoUploads(),
        cache: ConversationListCache? = nil
    ) -> [Route] {
        [
            Route(
                .get, path, access: .signedIn(scope: .messagesRead),
                describedAs: RouteDescription(
                    "The person's conversations on one side, by last activity, newest first, in cursor pages; meta.unread is that side's badge.",
                    query: listQuery).returning(Schema.list(Self.conversation, meta: Schema.record(["unread": Schema.wholeNumber]))),
                fromMemory: { context in
                    Planted.spend(.conversationList)
                    guard let cache else { return nil }
                    return cache.page(try listKey(context)).map { DocumentWriter.response($0) }
                }
            ) { context in
                let limit = try context.pageLimit()
                let cursor = try context.pageCursor()
                let side = try Self.side(context)
                let archived = try context.booleanQuery("filter[archived]") ?? false
                let person = context.person
                let key = try listKey(context)
                let ticket = cache?.ticket()
                let (page, unread, owners) = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in
                    try ThreadReader.listAndUnreadCount(
                        person: person, side: side, archived: archived, after: cursor, limit: limit, withOwners: ticket != nil, on: connection)
                }
                let parameters: [(String, String?)] = [
                    ("filter[side]", context.query("filter[side]") == nil ? nil : side.rawValue),
                    ("filter[archived]", context.query("filter[archived]") == nil ? nil : String(archived)), ("page[limit]", String(limit)),
                ]
                var links: [String: JSONValue] = ["self": Documents.link(path, parameters + [("page[cursor]", cursor?.token)])]
                if let next = page.next { links["next"] = Documents.link(path, parameters + [("page[cursor]", next.token)]) }
                var document = DocumentWriter()
                document.member("data", each: page.rows) { resource($0, side: side, to: &$1) }
                document.member("links", .object(links))
                document.member("meta", .object(["unread": .integer(Int64(unread))]))
                let response = document.response()
                if let cache {
                    let subjects =
                        side == .buyer ? [ThreadChanges.buyer(person)] : [ThreadChanges.member(person)] + owners.map(ThreadChanges.seller)
                    cache.keep(response.body, for: key, subjects: subjects, ticket: ticket)
                }
                return response
            },
            Route(
                .post, path, access: .signedIn(scope: .messagesWrite),
                describedAs: RouteDescription(
                    "Starts a conversation with a watch's shop with its first message; a second start about the same watch answers the existing thread (200) with the message appended to it.",
                    headers: [idempotencyParameter],
                    body: Schema.resourceDocument(
                        type: type, attributes: messageSchemas.merging(["watchId": Schema.string(maximumLength: 200)]) { $1 }, required: ["watchId"],
                        rules: messageRules),
                    responses: [201: .document(Schema.document), 200: .document(Schema.document)]).returning(Schema.single(Self.conversation, included: Self.message))
            ) { context in
                let data = try context.resourceDocument()
                try Documents.requireType(data, type, id: nil)
                let attributes = try Attributes(data, allowed: messageAttributes.union(["watchId"]))
                let watchId = try attributes.string("watchId", required: true, maximumLength: 200)!
                let input = try MessageInput(attributes, idempotencyKey: try idempotencyKey(context))
                let person = context.person
                let metadata = context.eventMetadata
                let started = try refusingReusedKeys {
                    try client.withConnectionBlocking { connection in
                        try start(watch: watchId, input: input, person: person, metadata: metadata, inline: inline, attachments: attachments, on: connection)
                    }
                }
                let (thread, (message, repeated), created) = started
                cache?.changed(Self.listSubjects(buyer: thread.buyerId, shop: thread.shopId) + [ThreadChanges.conversation(thread.conversationId)])
                let answer = response(status: created ? 201 : 200, thread, side: .buyer, including: (message, viewer: person))
                return replayed(created ? answer.locating(path + "/" + Documents.pathSegment(thread.conversationId)) : answer, repeated)
            },
            Route(.get, path + "/{id}", access: .signedIn(scope: .messagesRead), describedAs: RouteDescription("One conversation, as the caller's side sees it.").returning(Schema.single(Self.conversation))) {
                context in
                let id = context.parameters["id"] ?? ""
                let person = context.person
                let found = try client.withConnectionBlocking(retryIfFoundDead: true) { connection -> (ThreadSummary, ConversationSide)? in
                    guard let side = try side(of: person, in: id, on: connection) else { return nil }
                    guard let thread = try ThreadReader.conversation(id, side: side, on: connection) else { throw notYetProjected() }
                    return (thread, side)
                }
                guard let (thread, side) = found else { throw notFound(id) }
                return response(thread, side: side)
            },
            Route(
                .patch, path + "/{id}", access: .signedIn(scope: .messagesWrite),
                describedAs: RouteDescription(
                    "Marks the caller's side read (unread: false), archives or restores it (archived), or says the shop need not answer (noReplyNeeded: true, seller side).",
                    body: Schema.resourceDocument(type: type, attributes: patchSchemas, id: true)).returning(Schema.single(Self.conversation))
            ) { context in
                let id = context.parameters["id"] ?? ""
                let data = try context.resourceDocument()
                try Documents.requireType(data, type, id: id)
                let attributes = try Attributes(data, allowed: Set(patchSchemas.keys))
                // unread and noReplyNeeded each have one value (null: absent, as the document allows).
                let markRead = try Self.only("unread", .bool(false), in: attributes, "A conversation can only be marked read (unread: false).")
                let archived = try attributes.bool("archived")
                let noReplyNeeded: Bool? =
                    try Self.only(
                        "noReplyNeeded", .bool(true), in: attributes, "noReplyNeeded can only be set (true); the buyer's next message clears it.")
                    ? true : nil
                let person = context.person
                let metadata = context.eventMetadata
                let result = try client.withConnectionBlocking { connection -> (ThreadSummary, ConversationSide)? in
                    guard let side = try side(of: person, in: id, on: connection) else { return nil }
                    guard let thread = try ThreadReader.conversation(id, side: side, on: connection) else { throw notYetProjected() }
                    if noReplyNeeded == true && side != .seller {
                        throw APIError(
                            status: 422, code: .invalidField, detail: "Only the shop's side can say no reply is needed.",
                            source: Attributes.pointer("noReplyNeeded"))
                    }
                    var events: [any CatalogueEvent] = []
                    if markRead, thread.unread, let last = thread.lastMessageId {
                        events.append(ConversationRead(conversationId: id, side: side, personId: person, upToMessageId: last))
                    }
                    if let archived, archived != thread.archived {
                        events.append(
                            archived
                                ? ConversationArchived(conversationId: id, side: side, personId: person) as any CatalogueEvent
                                : ConversationUnarchived(conversationId: id, side: side, personId: person))
                    }
                    if noReplyNeeded == true && !thread.noReplyNeeded {
                        events.append(ConversationMarkedNoReplyNeeded(conversationId: id, personId: person))
                    }
                    if events.isEmpty { return (thread, side) }
                    try inline.append(try events.map { try NewEvent(catalogueEvent: $0, metadata: metadata) }, on: connection)
                    return (try ThreadReader.conversation(id, side: side, on: connection) ?? thread, side)
                }
                guard let (thread, side) = result else { throw notFound(id) }
                cache?.changed(Self.listSubjects(buyer: thread.buyerId, shop: thread.shopId))
                return response(thread, side: side)
            },
            Route(
                .get, path + "/{id}/messages", access: .signedIn(scope: .messagesRead),
                describedAs: RouteDescription(
                    "The messages of a conversation, newest first, in cursor pages that neither skip nor repeat while messages arrive.",
                    query: QueryParameter.cursorPage).returning(Schema.list(Self.message)),
                fromMemory: { context in
                    Planted.spend(.threadMessages)
                    guard let cache, let key = try messagesKey(context) else { return nil }
                    return cache.page(key).map { DocumentWriter.response($0) }
                }
            ) { context in
                let id = context.parameters["id"] ?? ""
                let limit = try context.pageLimit()
                let cursor = try context.pageCursor()
                let person = context.person
                guard let key = try messagesKey(context) else { throw notFound(id) }
                let ticket = cache?.ticket()
                let found = try client.withConnectionBlocking(retryIfFoundDead: true) { connection -> (KeysetPage<ThreadMessage>, ConversationSide)? in
                    let (access, page) = try ThreadReader.accessAndMessages(to: id, person: person, after: cursor, limit: limit, on: connection)
                    guard let side = access?.side(of: person) else { return nil }
                    return (page, side)
                }
                guard let (page, side) = found else { throw notFound(id) }
                let path = "\(path)/\(Documents.escape(id))/messages"
                var links: [String: JSONValue] = ["self": Documents.link(path, [("page[limit]", String(limit)), ("page[cursor]", cursor?.token)])]
                if let next = page.next { links["next"] = Documents.link(path, [("page[limit]", String(limit)), ("page[cursor]", next.token)]) }
                var document = DocumentWriter()
                document.member("data", each: page.rows) { messageResource($0, in: id, viewer: person, side: side, to: &$1) }
                document.member("links", .object(links))
                let response = document.response()
                // Who may read it is part of what it shows: the reader's shops, for the seller side.
                cache?.keep(response.body, for: key, subjects: [ThreadChanges.conversation(id), ThreadChanges.member(person)], ticket: ticket)
                return response
            },
            Route(
                .post, path + "/{id}/messages", access: .signedIn(scope: .messagesWrite),
                describedAs: RouteDescription(
                    "Writes in a conversation: a body, attachments (handles the caller uploaded) and an optional offer.",
                    headers: [idempotencyParameter], body: Schema.resourceDocument(type: messageType, attributes: messageSchemas, rules: messageRules), responses: [201: .document(Schema.document)]).returning(Schema.single(Self.message))
            ) { context in
                Planted.spend(.posting)
                let id = context.parameters["id"] ?? ""
                let data = try context.resourceDocument()
                try Documents.requireType(data, messageType, id: nil)
                let input = try MessageInput(try Attributes(data, allowed: messageAttributes), idempotencyKey: try idempotencyKey(context))
                let person = context.person
                let metadata = context.eventMetadata
                let checked = try client.withConnectionBlocking { connection -> (ConversationSide, ThreadAccess)? in
                    guard Self.isPlausible(id), let access = try ThreadReader.access(to: id, person: person, writing: true, on: connection),
                        let side = access.side(of: person)
                    else { return nil }
                    try requireOpen(access)
                    try requireAttachable(input.attachmentHandles, person: person, attachments: attachments, on: connection)
                    return (side, access)
                }
                guard let (side, access) = checked else { throw notFound(id) }
                // The checks' connection is back in the pool: waiting for its group commit, the
                // append holds none, so a commit is shared by as many posts as wait for it.
                let event = input.event(conversation: id, side: side, person: person)
                let appended = try refusingReusedKeys {
                    try inline.append(
                        [try input.newEvent(event, metadata: metadata)], using: client,
                        also: attach(input.attachmentHandles, person: person, conversationId: id, messageId: event.messageId, attachments: attachments))
                }
                cache?.changed(Self.listSubjects(buyer: access.buyerId, shop: access.shopId) + [ThreadChanges.conversation(id)])
                let message = input.message(event, recorded: appended[0].event)
                var document = DocumentWriter()
                document.member("data") { messageResource(message, in: id, viewer: person, side: side, to: &$0) }
                return replayed(document.response(status: 201), !appended[0].wasAppended)
            },
        ]
    }

    /// The cache's key of a list page: the person, the side, the filters and the page. The links
    /// repeat the filters the request named: which it named is part of the key.
    static func listKey(_ context: RequestContext) throws(APIError) -> ConversationListCache.Key {
        ConversationListCache.Key(
            person: context.person, side: try side(context).rawValue, archived: try context.booleanQuery("filter[archived]") ?? false,
            cursor: try context.pageCursor()?.token, limit: try context.pageLimit(),
            named: (context.query("filter[side]") != nil ? 1 : 0) | (context.query("filter[archived]") != nil ? 2 : 0))
    }

    /// The cache's key of a page of a thread's messages; nil for an id no thread can have.
    static func messagesKey(_ context: RequestContext) throws(APIError) -> ConversationListCache.Key? {
        let id = context.parameters["id"] ?? ""
        guard isPlausible(id) else { return nil }
        return .messages(of: id, person: context.person, cursor: try context.pageCursor()?.token, limit: try context.pageLimit())
    }

    /// The lists a thread is in (`ThreadChanges`): its buyer's, and its shop's.
    static func listSubjects(buyer: String, shop: String?) -> [String] {
        [ThreadChanges.buyer(buyer)] + (shop.map { [ThreadChanges.seller($0)] } ?? [])
    }

    // MARK: - Rules

    /// The side `person` has in conversation `id`: buyer if they are its buyer, seller if they work
    /// at its shop (a thread about a watch: Wristler's aftercare threads have no seller side); nil
    /// (404) otherwise. Somebody who is both writes and reads as the buyer.
    static func side(of person: String, in id: String, on connection: PostgresConnection) throws -> ConversationSide? {
        guard isPlausible(id) else { return nil }
        return try ThreadReader.access(to: id, person: person, on: connection)?.side(of: person)
    }

    /// An id no thread can have (over 200 bytes, or holding U+0000, which PostgreSQL cannot
    /// compare) is nobody's: 404 without asking the database.
    static func isPlausible(_ id: String) -> Bool { !id.isEmpty && id.utf8.count <= 200 && !id.utf8.contains(0) }

    static func worksAt(_ person: String, shop: String, on connection: PostgresConnection) throws -> Bool {
        try connection.query("SELECT EXISTS (SELECT 1 FROM shop_members WHERE shop_id = $1 AND person_id = $2)", shop, person).scalar(Bool.self)
    }

    /// A thread closed by a block, or whose buyer Wristler blocked, can be read but not written to.
    static func requireOpen(_ access: ThreadAccess) throws(APIError) {
        if access.closedByBlock {
            throw APIError(
                status: 422, code: .conversationClosed, detail: "This conversation was closed by a block; it can be read but not written to.",
                meta: ["reason": .string("block")])
        }
        if access.buyerBlocked {
            throw APIError(
                status: 422, code: .conversationClosed, detail: "This conversation's buyer was blocked; it can be read but not written to.",
                meta: ["reason": .string("buyer_blocked")])
        }
    }

    /// Whether attribute `name` holds `value`, the one value it may have: false when absent or null,
    /// 422 naming it for anything else.
    static func only(_ name: String, _ value: JSONValue, in attributes: Attributes, _ detail: String) throws(APIError) -> Bool {
        switch attributes.values[name] {
        case nil, .null?: return false
        case value?: return true
        default: throw APIError(status: 422, code: .invalidField, detail: detail, source: Attributes.pointer(name))
        }
    }

    /// `filter[side]`: buyer (default) or seller.
    static func side(_ context: RequestContext) throws(APIError) -> ConversationSide {
        guard let text = context.query("filter[side]") else { return .buyer }
        guard let side = ConversationSide(rawValue: text) else {
            throw APIError(status: 400, code: .invalidParameter, detail: "filter[side] must be buyer or seller.", source: .parameter("filter[side]"))
        }
        return side
    }

    /// The id of the conversation a buyer starts about a watch: derived from both, so two starts
    /// at the same moment name the same stream and only one of them starts it.
    static func conversationId(buyer: String, watch: String) -> String {
        SHA256.uuidString(naming: "wristler-conversation:\(buyer.utf8.count):\(buyer):\(watch)".utf8)
    }

    /// Starts the buyer's conversation about a watch, or writes in the one they have.
    static func start(
        watch watchId: String, input: MessageInput, person: String, metadata: EventMetadata, inline: InlineProjections,
        attachments: any AttachmentValidator, on connection: PostgresConnection
    ) throws -> (ThreadSummary, (ThreadMessage, repeated: Bool), created: Bool) {
        if let existing = try ThreadReader.conversation(buyer: person, watch: watchId, on: connection) {
            if let access = try ThreadReader.access(to: existing, person: person, writing: true, on: connection) { try requireOpen(access) }
            let message = try send(input, in: existing, side: .buyer, person: person, metadata: metadata, inline: inline, attachments: attachments, on: connection)
            return (try thread(existing, on: connection) ?? summary(existing, watch: watchId, person: person, shop: nil, message.0), message, false)
        }
        let pointer = Attributes.pointer("watchId")
        guard let watch = try ThreadReader.watch(watchId, on: connection) else {
            throw APIError(
                status: 422, code: .watchUnavailable, detail: "There is no watch \(watchId).", source: pointer, meta: ["status": .string("unknown")])
        }
        guard watch.status == .forSale else {
            let status = watch.status?.rawValue ?? "unknown"
            throw APIError(
                status: 422, code: .watchUnavailable, detail: "Watch \(watchId) is not for sale (\(status)).", source: pointer,
                meta: ["status": .string(status)])
        }
        if try worksAt(person, shop: watch.shopId, on: connection) {
            throw APIError(status: 422, code: .ownShop, detail: "Watch \(watchId) belongs to a shop you work at.", source: pointer)
        }
        if try ThreadReader.isBlockedAccount(person, on: connection) || ThreadReader.isBlockedBetween(person, shop: watch.shopId, on: connection) {
            throw APIError(status: 422, code: .conversationClosed, detail: "You cannot write to this shop.", meta: ["reason": .string("block")])
        }
        try requireAttachable(input.attachmentHandles, person: person, attachments: attachments, on: connection)
        let id = conversationId(buyer: person, watch: watchId)
        let started = ConversationStarted(conversationId: id, buyerId: person, shopId: watch.shopId, watchId: watchId)
        let sent = input.event(conversation: id, side: .buyer, person: person)
        let appended: [AppendedEvent]
        do {
            appended = try inline.append(
                [try NewEvent(started, metadata: metadata), try input.newEvent(sent, metadata: metadata)],
                expectedVersions: [started.streamId: .noStream], on: connection,
                also: attach(input.attachmentHandles, person: person, conversationId: id, messageId: sent.messageId, attachments: attachments))
        } catch EventLogError.wrongExpectedVersion {
            // Another request of this buyer started it a moment ago: write in that one.
            let message = try send(input, in: id, side: .buyer, person: person, metadata: metadata, inline: inline, attachments: attachments, on: connection)
            return (try thread(id, on: connection) ?? summary(id, watch: watchId, person: person, shop: watch.shopId, message.0), message, false)
        }
        let message = input.message(sent, recorded: appended[1].event)
        return (try thread(id, on: connection) ?? summary(id, watch: watchId, person: person, shop: watch.shopId, message), (message, false), true)
    }

    /// The thread as its buyer sees it, right after a write; nil when the projection deferred the
    /// write to the async projector (another writer was in the way), which has it within moments.
    static func thread(_ id: String, on connection: PostgresConnection) throws -> ThreadSummary? {
        try ThreadReader.conversation(id, side: .buyer, on: connection)
    }

    /// The buyer's view of a thread just written to, from what this request wrote, when the
    /// projection has not applied it yet.
    static func summary(_ id: String, watch: String, person: String, shop: String?, _ message: ThreadMessage) -> ThreadSummary {
        ThreadSummary(
            conversationId: id, kind: ConversationKind.watch.rawValue, buyerId: person, shopId: shop, watchId: watch, lastActivityAt: message.sentAt,
            lastMessageId: message.id, lastMessageBody: message.body, lastMessageSide: message.authorSide, lastMessageAt: message.sentAt,
            unread: false, archived: false, noReplyNeeded: false, closed: false)
    }

    /// A participant asked for a thread the projection has not reached yet (its start was deferred
    /// to the async projector moments ago): a retry answers it.
    static func notYetProjected() -> APIError {
        APIError(
            status: 503, code: .notYetProjected, detail: "This conversation was started a moment ago and cannot be read yet; ask again in a second.",
            headers: [("Retry-After", "1")])
    }

    /// Appends a message of `person` on `side` (the thread's checks are done); `repeated` when its
    /// idempotency key had written it before, and this wrote nothing.
    static func send(
        _ input: MessageInput, in id: String, side: ConversationSide, person: String, metadata: EventMetadata, inline: InlineProjections,
        attachments: any AttachmentValidator, on connection: PostgresConnection
    ) throws -> (ThreadMessage, repeated: Bool) {
        try requireAttachable(input.attachmentHandles, person: person, attachments: attachments, on: connection)
        let event = input.event(conversation: id, side: side, person: person)
        let appended = try inline.append(
            [try input.newEvent(event, metadata: metadata)], on: connection,
            also: attach(input.attachmentHandles, person: person, conversationId: id, messageId: event.messageId, attachments: attachments))
        return (input.message(event, recorded: appended[0].event), !appended[0].wasAppended)
    }

    /// The `Idempotency-Key` of a write (docs/messaging.md, "Retries"): 1 to 100 visible ASCII
    /// characters, or none.
    static func idempotencyKey(_ context: RequestContext) throws(APIError) -> String? {
        guard let key = context.request.header(idempotencyHeader) else { return nil }
        guard (1...maximumIdempotencyKeyBytes).contains(key.utf8.count), key.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            throw APIError(
                status: 400, code: .invalidHeader, detail: "\(idempotencyHeader) must be 1 to \(maximumIdempotencyKeyBytes) visible ASCII characters.",
                source: .header(idempotencyHeader))
        }
        return key
    }

    /// A key used before for another write of the same person (another body, offer, attachments or
    /// thread): 422, and nothing is written.
    static func refusingReusedKeys<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch EventLogError.idempotencyKeyReused {
            throw APIError(
                status: 422, code: .idempotencyKeyReused,
                detail: "This \(idempotencyHeader) was already used for another message; use a new key for a new message.",
                source: .header(idempotencyHeader))
        }
    }

    /// A write answered again from what its idempotency key wrote before says so.
    static func replayed(_ response: HTTPResponse, _ repeated: Bool) -> HTTPResponse {
        var response = response
        if repeated { response.headers.append(("Idempotent-Replayed", "true")) }
        return response
    }

    /// Records the message's attachments in the append's own transaction (and savepoint), so the
    /// message is never in the log without them; nil when there are none.
    static func attach(
        _ handles: [String], person: String, conversationId: String, messageId: String, attachments: any AttachmentValidator
    ) -> (@Sendable (PostgresConnection) throws -> Void)? {
        if handles.isEmpty { return nil }
        return { connection in
            try attachments.attach(handles, person: person, conversationId: conversationId, messageId: messageId, on: connection)
        }
    }

    static func requireAttachable(_ handles: [String], person: String, attachments: any AttachmentValidator, on connection: PostgresConnection) throws {
        if handles.isEmpty { return }
        let invalid = try attachments.invalidHandles(handles, person: person, on: connection)
        guard let first = invalid.first else { return }
        let index = handles.firstIndex(of: first) ?? 0
        throw APIError(
            status: 422, code: .unknownAttachment,
            detail: "You did not upload \(invalid.count == 1 ? "the handle" : "the handles") \(invalid.joined(separator: ", ")) (or they expired).",
            source: .pointer("/data/attributes/attachmentHandles/\(index)"), meta: ["handles": .array(invalid.map(JSONValue.string))])
    }

    static func notFound(_ id: String) -> APIError {
        APIError(status: 404, code: .notFound, detail: "You have no conversation \(id).")
    }

    // MARK: - Documents

    static func resource(_ thread: ThreadSummary, side: ConversationSide, to text: inout JSONText) {
        // Members in the order of their names, as every document is written (DocumentWriter).
        ObjectWriter.write(&text) { resource, text in
            resource.object("attributes", &text) { attributes, text in
                attributes.bool("archived", thread.archived, &text)
                attributes.bool("closed", thread.closed, &text)
                attributes.string("kind", thread.kind, &text)
                attributes.string("lastActivityAt", Documents.timestampText(thread.lastActivityAt), &text)
                if let id = thread.lastMessageId {
                    attributes.object("lastMessage", &text) { message, text in
                        message.string("authorSide", thread.lastMessageSide ?? "", &text)
                        // An erased message (its author's key is gone): body null, erased true.
                        message.string("body", thread.lastMessageBody, &text)
                        if thread.lastMessageBody == nil { message.bool("erased", true, &text) }
                        message.string("id", id, &text)
                        message.string("sentAt", thread.lastMessageAt.map(Documents.timestampText), &text)
                    }
                } else {
                    attributes.value("lastMessage", .null, &text)
                }
                if side == .seller { attributes.bool("noReplyNeeded", thread.noReplyNeeded, &text) }
                attributes.object("otherParty", &text) { party, text in
                    switch side {
                    case .buyer:
                        // Wristler's aftercare thread is with Wristler, even when its order had a shop.
                        let withShop = thread.kind == ConversationKind.watch.rawValue
                        party.string("id", withShop ? thread.shopId : nil, &text)
                        party.string("type", withShop ? "shops" : "wristler", &text)
                    case .seller:
                        party.string("id", thread.buyerId, &text)
                        party.string("type", "people", &text)
                    }
                }
                // Also the shop's and the watch's relationships; kept as attributes since /v1 never
                // removes a field (the app guide).
                attributes.string("shopId", thread.shopId, &text)
                attributes.string("side", side.rawValue, &text)
                attributes.bool("unread", thread.unread, &text)
                attributes.string("watchId", thread.watchId, &text)
            }
            resource.string("id", thread.conversationId, &text)
            let link = path + "/" + Documents.pathSegment(thread.conversationId)
            resource.object("links", &text) { links, text in links.string("self", link, &text) }
            // The thread's messages, its shop and its watch (JSON:API relationships; the watch and
            // the shop are the catalogue's resources, so only their linkage).
            resource.object("relationships", &text) { relationships, text in
                relationships.object("messages", &text) { messages, text in
                    messages.object("links", &text) { links, text in links.string("related", link + "/messages", &text) }
                }
                relationships.object("shop", &text) { shop, text in linkage(thread.shopId, type: "shops", in: &shop, &text) }
                relationships.object("watch", &text) { watch, text in linkage(thread.watchId, type: "watches", in: &watch, &text) }
            }
            resource.string("type", type, &text)
        }
    }

    /// A relationship's `data`: the resource identifier of `id`, or null.
    private static func linkage(_ id: String?, type: String, in relationship: inout ObjectWriter, _ text: inout JSONText) {
        guard let id else { return relationship.value("data", .null, &text) }
        relationship.object("data", &text) { data, text in
            data.string("id", id, &text)
            data.string("type", type, &text)
        }
    }

    /// A message as `viewer` on `side` sees it: `mine` when they wrote it; who on the shop's side
    /// wrote it only for the shop's side.
    static func messageResource(_ message: ThreadMessage, in conversation: String, viewer: String, side: ConversationSide, to text: inout JSONText) {
        ObjectWriter.write(&text) { resource, text in
            resource.object("attributes", &text) { attributes, text in
                // An erased message shows none: its author's uploads went with them (404 each).
                let handles = message.body == nil ? [] : message.attachmentHandles
                attributes.value("attachmentHandles", .array(handles.map(JSONValue.string)), &text)
                if side == .seller || message.authorId == viewer { attributes.string("authorId", message.authorId, &text) }
                attributes.string("authorSide", message.authorSide, &text)
                attributes.string("body", message.body, &text)
                attributes.bool("mine", message.authorId == viewer, &text)
                attributes.value(
                    "offer", message.offer.map { .object(["amount": .integer($0.amount), "currency": .string($0.currency)]) } ?? .null, &text)
                attributes.string("sentAt", Documents.timestampText(message.sentAt), &text)
            }
            resource.string("id", message.id, &text)
            // An erased message keeps its place in the thread: body null, meta.erased true.
            if message.body == nil { resource.object("meta", &text) { meta, text in meta.bool("erased", true, &text) } }
            resource.object("relationships", &text) { relationships, text in
                relationships.object("conversation", &text) { thread, text in
                    linkage(conversation, type: type, in: &thread, &text)
                    thread.object("links", &text) { links, text in links.string("related", path + "/" + Documents.pathSegment(conversation), &text) }
                }
            }
            resource.string("type", messageType, &text)
        }
    }

    /// A document whose `data` is one conversation.
    static func response(status: Int = 200, _ thread: ThreadSummary, side: ConversationSide, including message: (ThreadMessage, viewer: String)? = nil)
        -> HTTPResponse
    {
        var document = DocumentWriter()
        document.member("data") { resource(thread, side: side, to: &$0) }
        if let (message, viewer) = message {
            document.member("included", each: [message]) { messageResource($0, in: thread.conversationId, viewer: viewer, side: side, to: &$1) }
        }
        return document.response(status: status)
    }
}

/// What a request says a message is: its body, attachments and offer, checked (422 naming the
/// field) before anything is read from the database.
struct MessageInput: Sendable {
    var body: String
    var attachmentHandles: [String]
    var offer: Money?
    /// The request's `Idempotency-Key`, which names the message (`event`) and its append.
    var idempotencyKey: String?

    init(_ attributes: Attributes, idempotencyKey: String? = nil) throws(APIError) {
        self.idempotencyKey = idempotencyKey
        switch attributes.values["attachmentHandles"] {
        case nil, .null?:
            attachmentHandles = []
        case .array(let items)?:
            guard items.count <= ConversationRoutes.maximumAttachments else {
                throw APIError(
                    status: 422, code: .invalidField, detail: "A message has at most \(ConversationRoutes.maximumAttachments) attachments.",
                    source: Attributes.pointer("attachmentHandles"))
            }
            var handles: [String] = []
            for (index, item) in items.enumerated() {
                guard case .string(let handle) = item, !handle.isEmpty, handle.utf8.count <= 200,
                    !handle.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
                else {
                    throw APIError(
                        status: 422, code: .invalidField, detail: "attachmentHandles[\(index)] must be a handle (1 to 200 characters).",
                        source: .pointer("/data/attributes/attachmentHandles/\(index)"))
                }
                guard !handles.contains(handle) else {
                    throw APIError(
                        status: 422, code: .invalidField, detail: "attachmentHandles[\(index)] names \(handle) a second time.",
                        source: .pointer("/data/attributes/attachmentHandles/\(index)"))
                }
                handles.append(handle)
            }
            attachmentHandles = handles
        default:
            throw APIError(
                status: 422, code: .invalidField, detail: "attachmentHandles must be an array of handles.", source: Attributes.pointer("attachmentHandles"))
        }
        switch attributes.values["body"] {
        case nil, .null?:
            body = ""
        case .string(let text)?:
            // Line breaks and tabs are text; other control characters are not.
            // Characters for people, bytes against a grapheme of ten thousand combining marks.
            guard text.utf8.count <= ConversationRoutes.maximumBodyBytes, text.count <= ConversationRoutes.maximumBodyLength,
                !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control && !["\n", "\r", "\t"].contains($0) })
            else {
                throw APIError(
                    status: 422, code: .invalidField,
                    detail: "body must be at most \(ConversationRoutes.maximumBodyLength) characters (and 16 KiB), without control characters other than line breaks and tabs.",
                    source: Attributes.pointer("body"))
            }
            body = text
        default:
            throw APIError(status: 422, code: .invalidField, detail: "body must be a string.", source: Attributes.pointer("body"))
        }
        if body.allSatisfy(\.isWhitespace) && attachmentHandles.isEmpty {
            throw APIError(
                status: 422, code: .missingField, detail: "A message needs a body or an attachment.", source: Attributes.pointer("body"))
        }
        switch attributes.values["offer"] {
        case nil, .null?:
            offer = nil
        case .object(let members)?:
            for name in members.keys.sorted() where name != "amount" && name != "currency" {
                throw APIError(
                    status: 422, code: .unknownField, detail: "\(APIError.echoed(name)) is not part of an offer.",
                    source: .member(name, of: "/data/attributes/offer"))
            }
            guard case .integer(let amount)? = members["amount"], amount >= 1, amount <= ConversationRoutes.maximumOfferAmount else {
                throw APIError(
                    status: 422, code: members["amount"] == nil ? .missingField : .invalidField,
                    detail: "offer.amount must be a whole number of minor units (cents) from 1 to \(ConversationRoutes.maximumOfferAmount).",
                    source: .pointer("/data/attributes/offer/amount"))
            }
            guard case .string(let currency)? = members["currency"], currency.utf8.count == 3,
                currency.utf8.allSatisfy({ (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) })
            else {
                throw APIError(
                    status: 422, code: members["currency"] == nil ? .missingField : .invalidField,
                    detail: "offer.currency must be an ISO 4217 code (EUR).", source: .pointer("/data/attributes/offer/currency"))
            }
            offer = Money(amount: amount, currency: currency)
        default:
            throw APIError(
                status: 422, code: .invalidField, detail: "offer must be an object with amount and currency.", source: Attributes.pointer("offer"))
        }
    }

    /// The message as an event. Its id is random, or with an idempotency key derived from the
    /// author and the key, so that a retry writes the same event and the log keeps the first.
    func event(conversation: String, side: ConversationSide, person: String) -> MessageSent {
        let id = idempotencyKey.map { SHA256.uuidString(naming: "wristler-message:\(person.utf8.count):\(person):\($0)".utf8) } ?? RandomUUID.string()
        return MessageSent(
            conversationId: conversation, messageId: id, authorSide: side == .buyer ? .buyer : .seller, authorId: person,
            body: body, attachmentHandles: attachmentHandles, offer: offer)
    }

    /// `event` to append: with an idempotency key, under the log's key `message:<id>` (the log
    /// answers a second append of the same event with the first, and refuses another event).
    func newEvent(_ event: MessageSent, metadata: EventMetadata) throws -> NewEvent {
        try NewEvent(event, metadata: metadata, idempotencyKey: idempotencyKey.map { _ in "message:" + event.messageId })
    }

    /// The message as it was stored: its number in the thread is its stream version.
    func message(_ event: MessageSent, recorded: RecordedEvent) -> ThreadMessage {
        ThreadMessage(
            id: event.messageId, seq: recorded.streamVersion, authorSide: event.authorSide.rawValue, authorId: event.authorId, body: event.body.text,
            attachmentHandles: event.attachmentHandles, offer: event.offer, sentAt: recorded.recordedAt)
    }
}

extension ConversationRoutes {
    /// A thread as `resource` writes it for one side: `noReplyNeeded` on the seller's only.
    static let conversation = Schema.resource(
        "Conversation", type: type,
        attributes: [
            "archived": Schema.boolean, "closed": Schema.boolean, "kind": Schema.text, "lastActivityAt": Schema.timestamp,
            "lastMessage": Schema.nullable(
                Schema.record(
                    ["authorSide": Schema.text, "body": Schema.nullable(Schema.text), "erased": Schema.constant(true), "id": Schema.text,
                     "sentAt": Schema.nullable(Schema.timestamp)], optional: ["erased"])),
            "noReplyNeeded": Schema.boolean,
            "otherParty": Schema.record(["id": Schema.nullable(Schema.text), "type": Schema.choice(["shops", "wristler", "people"])]),
            "side": Schema.choice(["buyer", "seller"]), "unread": Schema.boolean, "shopId": Schema.nullable(Schema.text),
            "watchId": Schema.nullable(Schema.text),
        ], optional: ["noReplyNeeded"],
        relationships: [
            "messages": Schema.relationship(linkage: nil, related: true), "shop": Schema.relationship(linkage: "shops", nullable: true, related: false),
            "watch": Schema.relationship(linkage: "watches", nullable: true, related: false),
        ], links: true)
    /// A message as `messageResource` writes it: `authorId` for the shop's side and one's own;
    /// an erased one with body null and `meta.erased`.
    static let message = Schema.resource(
        "Message", type: messageType,
        attributes: [
            "attachmentHandles": Schema.array(Schema.text), "authorId": Schema.text, "authorSide": Schema.text, "body": Schema.nullable(Schema.text),
            "mine": Schema.boolean, "offer": Schema.nullable(Schema.record(["amount": Schema.wholeNumber, "currency": Schema.text])),
            "sentAt": Schema.timestamp,
        ], optional: ["authorId"],
        relationships: ["conversation": Schema.relationship(linkage: type, related: true)],
        meta: Schema.record(["erased": Schema.constant(true)]))
}
