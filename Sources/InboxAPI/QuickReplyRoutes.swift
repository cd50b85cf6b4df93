import Foundation
import HTTPServer
import InboxDomain
import PostgresClient

/// A shop's quick replies: the short texts its people answer buyers with, kept per shop
/// (`shop_quick_replies`), read and written by whoever works at the shop (the people read model's
/// `shop_members`), under `/v1/sellers/{sellerId}`, where the API reference keeps a seller's own
/// things. Anybody else hears `404`, as for a shop that does not exist. Numbered pages, oldest first
/// (the order the shop made them in); at most 100 per shop.
public enum QuickReplyRoutes {
    static let type = "quick-replies"
    static let maximumPerShop = 100
    /// What `body` reads: no control character but a line break (U+000A) or a tab, not blank.
    /// (The one character that is not blank is not a control character either: `\S` alone would let one through.)
    static let bodySchema = Schema.string(
        maximumLength: 1000,
        pattern: "^[^\\u0000-\\u0008\\u000B-\\u001F\\u007F-\\u009F]*[^\\s\\u0000-\\u0008\\u000B-\\u001F\\u007F-\\u009F][^\\u0000-\\u0008\\u000B-\\u001F\\u007F-\\u009F]*$")

    public static func routes(client: PostgresClient) -> [Route] {
        let write = Schema.resourceDocument(type: type, attributes: ["body": bodySchema], required: ["body"], id: false)
        let change = Schema.resourceDocument(type: type, attributes: ["body": bodySchema], required: ["body"], id: true)
        return [
            Route(
                .get, "/v1/sellers/{sellerId}/quick-replies", access: .signedIn(scope: .messagesRead),
                describedAs: RouteDescription("The shop's quick replies, in numbered pages, oldest first.", query: QueryParameter.numberedPage).returning(Schema.list(Self.reply))
            ) { context in
                let shop = context.parameters["sellerId"] ?? ""
                let (number, size) = try context.numberedPage()
                let rows = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in
                    try Self.requireMember(context.person, shop, on: connection)
                    return try connection.query(
                        "SELECT id, body, created_at, updated_at FROM shop_quick_replies WHERE shop_id = $1 ORDER BY created_at, id LIMIT $2 OFFSET $3",
                        shop, size + 1, (number - 1) * size
                    ).map(Self.resource)
                }
                let path = "/v1/sellers/\(Documents.pathSegment(shop))/quick-replies"
                var links: [String: JSONValue] = ["self": Documents.link(path, [("page[number]", String(number)), ("page[size]", String(size))])]
                if rows.count > size { links["next"] = Documents.link(path, [("page[number]", String(number + 1)), ("page[size]", String(size))]) }
                return Documents.response(["data": .array(Array(rows.prefix(size))), "links": .object(links)])
            },
            Route(
                .post, "/v1/sellers/{sellerId}/quick-replies", access: .signedIn(scope: .messagesWrite),
                describedAs: RouteDescription("Adds a quick reply to the shop (at most 100).", body: write, responses: [201: .document(Schema.document)]).returning(Schema.single(Self.reply))
            ) { context in
                let shop = context.parameters["sellerId"] ?? ""
                let body = try Self.body(context, id: nil)
                let id = UUID()
                let reply = try client.withConnectionBlocking { connection in
                    try connection.transaction { connection -> JSONValue in
                        try Self.requireMember(context.person, shop, on: connection)
                        // One shop's adds one after another, so the count holds.
                        _ = try connection.query("SELECT pg_advisory_xact_lock(hashtext('shop_quick_replies'), hashtext($1))", shop)
                        let count = try connection.query("SELECT count(*)::int FROM shop_quick_replies WHERE shop_id = $1", shop).scalar(Int.self)
                        guard count < maximumPerShop else {
                            throw APIError(
                                status: 409, code: APIError.Code("too_many_quick_replies"),
                                detail: "A shop keeps at most \(maximumPerShop) quick replies: delete one first.")
                        }
                        return try connection.query(
                            """
                            INSERT INTO shop_quick_replies (id, shop_id, body, created_by) VALUES ($1, $2, $3, $4)
                            RETURNING id, body, created_at, updated_at
                            """, id, shop, body, context.person
                        ).map(Self.resource)[0]
                    }
                }
                let location = "/v1/sellers/\(Documents.pathSegment(shop))/quick-replies/\(id.uuidString.lowercased())"
                return JSONAPI.response(status: 201, .object(["data": reply]), headers: [("Location", location)])
            },
            Route(
                .patch, "/v1/sellers/{sellerId}/quick-replies/{id}", access: .signedIn(scope: .messagesWrite),
                describedAs: RouteDescription("Changes a quick reply's text.", body: change).returning(Schema.single(Self.reply))
            ) { context in
                let shop = context.parameters["sellerId"] ?? ""
                guard let id = UUID(uuidString: context.parameters["id"] ?? "") else { throw Self.notFound }
                let body = try Self.body(context, id: context.parameters["id"])
                let reply = try client.withConnectionBlocking { connection in
                    try Self.requireMember(context.person, shop, on: connection)
                    return try connection.query(
                        """
                        UPDATE shop_quick_replies SET body = $3, updated_at = clock_timestamp() WHERE id = $1 AND shop_id = $2
                        RETURNING id, body, created_at, updated_at
                        """, id, shop, body
                    ).map(Self.resource).first
                }
                guard let reply else { throw Self.notFound }
                return Documents.response(["data": reply])
            },
            Route(
                .delete, "/v1/sellers/{sellerId}/quick-replies/{id}", access: .signedIn(scope: .messagesWrite),
                describedAs: .noContent("Deletes a quick reply.")
            ) { context in
                let shop = context.parameters["sellerId"] ?? ""
                guard let id = UUID(uuidString: context.parameters["id"] ?? "") else { throw Self.notFound }
                let deleted = try client.withConnectionBlocking { connection in
                    try Self.requireMember(context.person, shop, on: connection)
                    return try connection.query("DELETE FROM shop_quick_replies WHERE id = $1 AND shop_id = $2 RETURNING 1", id, shop).count
                }
                guard deleted == 1 else { throw Self.notFound }
                return Documents.noContent
            },
        ]
    }

    static let notFound = APIError(status: 404, code: .notFound, detail: "There is no such quick reply of a shop you work at.")
    static let notAMember = APIError(status: 404, code: .notFound, detail: "There is no shop with this id that you work at.")

    static func requireMember(_ person: String, _ shop: String, on connection: PostgresConnection) throws {
        guard ConversationRoutes.isPlausible(shop), try ConversationRoutes.worksAt(person, shop: shop, on: connection) else { throw notAMember }
    }

    /// The document's `body`: 1 to 1,000 characters (code points, as the schema counts), not blank,
    /// without control characters but line breaks and tabs.
    static func body(_ context: RequestContext, id: String?) throws -> String {
        let data = try context.resourceDocument()
        try Documents.requireType(data, type, id: id)
        _ = try Attributes(data, allowed: ["body"])
        guard case .object(let attributes)? = data["attributes"], case .string(let body)? = attributes["body"] else {
            throw APIError(status: 422, code: .missingField, detail: "body is required, a string.", source: Attributes.pointer("body"))
        }
        let allowed: Set<Unicode.Scalar> = ["\n", "\t"]
        guard body.unicodeScalars.count <= 1000, !body.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty,
            !body.unicodeScalars.contains(where: { $0.properties.generalCategory == .control && !allowed.contains($0) })
        else {
            throw APIError(
                status: 422, code: .invalidField, detail: "body is 1 to 1,000 characters, not blank, without control characters but line breaks and tabs.",
                source: Attributes.pointer("body"))
        }
        return body
    }

    static func resource(_ row: PostgresRow) throws -> JSONValue {
        .object([
            "type": .string(type), "id": .string(try row.decode(UUID.self, "id").uuidString.lowercased()),
            "attributes": .object([
                "body": .string(try row.decode(String.self, "body")), "createdAt": Documents.timestamp(try row.decode(Date.self, "created_at")),
                "updatedAt": Documents.timestamp(try row.decode(Date.self, "updated_at")),
            ]),
        ])
    }
}

extension QuickReplyRoutes {
    static let reply = Schema.resource(
        "QuickReply", type: type, attributes: ["body": Schema.text, "createdAt": Schema.timestamp, "updatedAt": Schema.timestamp])
}
