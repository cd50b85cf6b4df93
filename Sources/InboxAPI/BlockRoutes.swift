import EventLog
import Foundation
import HTTPServer
import InboxDomain
import PostgresClient
import Projections

/// The blocks a person sets (`/v1/me/blocks`, app guide: `account:read` reads them, `account:write`
/// changes them): a person blocks a person or a shop. Kept in `account_blocks`, which every check of
/// who may write to whom reads live (`ThreadReader.blockedBetween`), and told to the rest of the tier
/// in the same transaction: `person_blocked` or `shop_blocked`, and a `conversation_closed_by_block`
/// for each open thread between them, projected inline so the next read shows it closed. Lifting a
/// block appends `person_unblocked` / `shop_unblocked` and a `conversation_reopened` for each of
/// those threads that no other block still closes.
///
/// "Between them": the threads about a watch whose buyer is one of the two and whose shop is the
/// blocked shop, or a shop the other works at (`shop_members`). A shop member who blocks a buyer
/// closes the shop's threads with them for everybody who works there: the seller side is shared.
/// Wristler's aftercare threads are never closed by a person's block.
public enum BlockRoutes {
    static let type = "blocks"
    /// The most blocks one person keeps: the checks read them on every post.
    static let maximumPerPerson = 1000
    static let blockedTypes = ["people", "shops"]

    public static func routes(client: PostgresClient, inline: InlineProjections) -> [Route] {
        let target = Schema.object(
            ["type": Schema.choice(blockedTypes), "id": Schema.string(maximumLength: 200, pattern: "^[^\\u0000]*$")], required: ["id", "type"])
        let body = Schema.object(
            [
                "data": Schema.object(
                    [
                        "type": .object(["type": .string("string"), "const": .string(type)]),
                        "relationships": Schema.object(["blocked": Schema.object(["data": target], required: ["data"])], required: ["blocked"]),
                    ], required: ["relationships", "type"])
            ], required: ["data"])
        return [
            Route(
                .get, "/v1/me/blocks", access: .signedIn(scope: .accountRead),
                describedAs: RouteDescription("The people and shops you block, newest first, in numbered pages.", query: QueryParameter.numberedPage).returning(Schema.list(Self.block))
            ) { context in
                let (number, size) = try context.numberedPage()
                let rows = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in
                    try connection.query(
                        """
                        SELECT blocked_type, blocked_id, created_at, origin, app_version FROM account_blocks WHERE blocker_id = $1
                        ORDER BY created_at DESC, blocked_type, blocked_id LIMIT $2 OFFSET $3
                        """, context.person, size + 1, (number - 1) * size
                    ).map(Self.resource)
                }
                let path = "/v1/me/blocks"
                var links: [String: JSONValue] = ["self": Documents.link(path, [("page[number]", String(number)), ("page[size]", String(size))])]
                if rows.count > size { links["next"] = Documents.link(path, [("page[number]", String(number + 1)), ("page[size]", String(size))]) }
                return Documents.response(["data": .array(Array(rows.prefix(size))), "links": .object(links)])
            },
            Route(
                .post, "/v1/me/blocks", access: .signedIn(scope: .accountWrite),
                describedAs: RouteDescription(
                    "Blocks a person or a shop: the threads between you close at once. Blocking again answers the block (200).", body: body,
                    responses: [200: .document(Schema.document), 201: .document(Schema.document)]).returning(Schema.single(Self.block))
            ) { context in
                let (blockedType, blockedId) = try Self.target(context)
                let person = context.person
                if blockedType == "people" && blockedId == person {
                    throw APIError(status: 422, code: .invalidField, detail: "You cannot block yourself.", source: .pointer("/data/relationships/blocked/data/id"))
                }
                let metadata = context.eventMetadata
                let (block, created) = try client.withConnectionBlocking { connection in
                    try connection.transaction { connection -> (JSONValue, Bool) in
                        try Self.lock(on: connection)
                        if let existing = try Self.find(person, blockedType, blockedId, on: connection) { return (existing, false) }
                        if blockedType == "shops", try ConversationRoutes.worksAt(person, shop: blockedId, on: connection) {
                            throw APIError(
                                status: 422, code: .invalidField, detail: "You work at this shop: you cannot block it.",
                                source: .pointer("/data/relationships/blocked/data/id"))
                        }
                        let count = try connection.query("SELECT count(*)::int FROM account_blocks WHERE blocker_id = $1", person).scalar(Int.self)
                        guard count < maximumPerPerson else {
                            throw APIError(
                                status: 409, code: APIError.Code("too_many_blocks"),
                                detail: "A person keeps at most \(maximumPerPerson) blocks: lift one first.")
                        }
                        let block = try connection.query(
                            """
                            INSERT INTO account_blocks (blocker_id, blocked_type, blocked_id, origin, app_version) VALUES ($1, $2, $3, $4, $5)
                            RETURNING blocked_type, blocked_id, created_at, origin, app_version
                            """, person, blockedType, blockedId, metadata.origin.rawValue, metadata.appVersion
                        ).map(Self.resource)[0]
                        var events: [any CatalogueEvent] = [
                            blockedType == "people"
                                ? PersonBlocked(blockerId: person, blockedId: blockedId) as any CatalogueEvent
                                : ShopBlocked(blockerId: person, shopId: blockedId)
                        ]
                        for thread in try Self.threads(between: person, blockedType, blockedId, on: connection) where !thread.closed {
                            events.append(ConversationClosedByBlock(conversationId: thread.id, blockerId: person, blockedId: blockedId))
                        }
                        try inline.append(try events.map { try NewEvent(catalogueEvent: $0, metadata: metadata) }, on: connection)
                        return (block, true)
                    }
                }
                guard created else { return Documents.response(["data": block]) }
                return JSONAPI.response(
                    status: 201, .object(["data": block, "jsonapi": Documents.version]),
                    headers: [("Location", "/v1/me/blocks/\(Documents.pathSegment(Self.id(blockedType, blockedId)))")])
            },
            Route(
                .delete, "/v1/me/blocks/{id}", access: .signedIn(scope: .accountWrite),
                describedAs: .noContent("Lifts a block (its id is `people:<id>` or `shops:<id>`): the threads it alone closed open again.")
            ) { context in
                guard let (blockedType, blockedId) = Self.parse(context.parameters["id"] ?? "") else { throw Self.notFound }
                let person = context.person
                let metadata = context.eventMetadata
                let lifted = try client.withConnectionBlocking { connection in
                    try connection.transaction { connection -> Bool in
                        try Self.lock(on: connection)
                        let deleted = try connection.query(
                            "DELETE FROM account_blocks WHERE blocker_id = $1 AND blocked_type = $2 AND blocked_id = $3 RETURNING 1", person, blockedType,
                            blockedId
                        ).count
                        guard deleted == 1 else { return false }
                        var events: [any CatalogueEvent] = [
                            blockedType == "people"
                                ? PersonUnblocked(blockerId: person, blockedId: blockedId) as any CatalogueEvent
                                : ShopUnblocked(blockerId: person, shopId: blockedId)
                        ]
                        for thread in try Self.threads(between: person, blockedType, blockedId, on: connection) where thread.closed {
                            // Another block (the other's, or one of a colleague's) keeps it closed.
                            if try !ThreadReader.isBlockedBetween(thread.buyerId, shop: thread.shopId, on: connection) {
                                events.append(ConversationReopened(conversationId: thread.id, personId: person))
                            }
                        }
                        try inline.append(try events.map { try NewEvent(catalogueEvent: $0, metadata: metadata) }, on: connection)
                        return true
                    }
                }
                guard lifted else { throw Self.notFound }
                return Documents.noContent
            },
        ]
    }

    static let notFound = APIError(status: 404, code: .notFound, detail: "You do not block anybody with this id.")

    /// Blocks and their lifts one at a time, tier-wide: whether a thread is still closed by
    /// another block is then read after every other change to blocks has committed. Blocks are
    /// rare; the lock is held for a few statements.
    static func lock(on connection: PostgresConnection) throws {
        try connection.execute("SELECT pg_advisory_xact_lock(hashtext('account_blocks'))")
    }

    /// The block's id: `people:<id>` or `shops:<id>`.
    static func id(_ blockedType: String, _ blockedId: String) -> String { "\(blockedType):\(blockedId)" }

    static func parse(_ id: String) -> (String, String)? {
        guard let colon = id.firstIndex(of: ":") else { return nil }
        let (type, rest) = (String(id[..<colon]), String(id[id.index(after: colon)...]))
        guard blockedTypes.contains(type), ConversationRoutes.isPlausible(rest) else { return nil }
        return (type, rest)
    }

    /// `data.relationships.blocked.data` of the document: the type and id blocked.
    static func target(_ context: RequestContext) throws -> (String, String) {
        let data = try context.resourceDocument()
        try Documents.requireType(data, type, id: nil)
        let pointer = "/data/relationships/blocked/data"
        guard case .object(let relationships)? = data["relationships"], case .object(let blocked)? = relationships["blocked"],
            case .object(let target)? = blocked["data"]
        else {
            throw APIError(
                status: 422, code: .missingField, detail: "relationships.blocked.data names whom to block: {\"type\": \"people\" or \"shops\", \"id\": ...}.",
                source: .pointer(pointer))
        }
        guard case .string(let blockedType)? = target["type"], blockedTypes.contains(blockedType) else {
            throw APIError(status: 422, code: .invalidField, detail: "The blocked type is people or shops.", source: .pointer(pointer + "/type"))
        }
        guard case .string(let blockedId)? = target["id"], ConversationRoutes.isPlausible(blockedId), blockedId.unicodeScalars.count <= 200 else {
            throw APIError(status: 422, code: .invalidField, detail: "The blocked id is a string of 1 to 200 characters.", source: .pointer(pointer + "/id"))
        }
        return (blockedType, blockedId)
    }

    static func find(_ person: String, _ blockedType: String, _ blockedId: String, on connection: PostgresConnection) throws -> JSONValue? {
        try connection.query(
            """
            SELECT blocked_type, blocked_id, created_at, origin, app_version FROM account_blocks
            WHERE blocker_id = $1 AND blocked_type = $2 AND blocked_id = $3
            """, person, blockedType, blockedId
        ).first.map(Self.resource)
    }

    struct Thread {
        var id: String
        var buyerId: String
        var shopId: String
        var closed: Bool
    }

    /// The threads about a watch between `person` and whom they block (see the type's comment).
    static func threads(between person: String, _ blockedType: String, _ blockedId: String, on connection: PostgresConnection) throws -> [Thread] {
        // (buyer, shops) pairs: the person as buyer with the blocked shop or the blocked person's
        // shops, and the blocked person as buyer with the person's shops.
        var pairs: [(String, [String])] = []
        if blockedType == "shops" {
            pairs = [(person, [blockedId])]
        } else {
            let shops = try connection.query(
                "SELECT person_id, shop_id FROM shop_members WHERE person_id = ANY($1::text[])", [person, blockedId]
            ).map { (try $0.decode(String.self, "person_id"), try $0.decode(String.self, "shop_id")) }
            pairs = [
                (person, shops.filter { $0.0 == blockedId }.map(\.1)), (blockedId, shops.filter { $0.0 == person }.map(\.1)),
            ]
        }
        var threads: [Thread] = []
        for (buyer, shops) in pairs where !shops.isEmpty {
            threads += try connection.query(
                """
                SELECT c.conversation_id, c.shop_id, c.closed_by_block FROM thread_sides t JOIN conversations c USING (conversation_id)
                WHERE t.owner_id = $1 AND t.side = 'buyer' AND c.kind = 'watch' AND c.shop_id = ANY($2::text[])
                """, buyer, shops
            ).map {
                Thread(
                    id: try $0.decode(String.self, "conversation_id"), buyerId: buyer, shopId: try $0.decode(String.self, "shop_id"),
                    closed: try $0.decode(Bool.self, "closed_by_block"))
            }
        }
        return threads
    }

    static func resource(_ row: PostgresRow) throws -> JSONValue {
        let blockedType = try row.decode(String.self, "blocked_type")
        let blockedId = try row.decode(String.self, "blocked_id")
        return .object([
            "type": .string(type), "id": .string(id(blockedType, blockedId)),
            "attributes": .object([
                "blockedAt": Documents.timestamp(try row.decode(Date.self, "created_at")), "origin": .string(try row.decode(String.self, "origin")),
                "appVersion": try row.decode(String?.self, "app_version").map(JSONValue.string) ?? .null,
            ]),
            "relationships": .object(["blocked": .object(["data": .object(["type": .string(blockedType), "id": .string(blockedId)])])]),
            "links": .object(["self": .string("/v1/me/blocks/\(Documents.pathSegment(id(blockedType, blockedId)))")]),
        ])
    }
}

extension BlockRoutes {
    /// A block as `resource` writes it: the blocked person or shop is its relationship.
    static let block = Schema.resource(
        "Block", type: type, attributes: ["blockedAt": Schema.timestamp, "origin": Schema.text, "appVersion": Schema.nullable(Schema.text)],
        relationships: [
            "blocked": Schema.object(
                ["data": Schema.record(["type": Schema.choice(["people", "shops"]), "id": Schema.text])], required: ["data"])
        ], links: true)
}
