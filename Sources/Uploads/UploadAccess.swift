import Foundation
import PostgresClient

/// Who besides its uploader may read an uploaded file. `GET /v1/uploads/{handle}` asks this
/// for anybody but the uploader; a `false` is a 404, as for a handle that does not exist.
///
/// Synchronous, like the route handlers that call it: they run on the HTTP server's blocking
/// threads and wait on PostgreSQL there.
public protocol UploadAccess: Sendable {
    func mayRead(handle: String, person: String) throws -> Bool
}

/// The default: a person may read a file attached to a message of a conversation they may see,
/// from the threads read model: the messages' `attachment_handles`, the conversation's buyer,
/// and, for its shop, the people who work there (`shop_members`, from the people projection).
/// When a handle has been marked attached to a conversation (`UploadStore.markAttached`), only
/// that conversation's messages are looked at (through its index); otherwise every message.
public struct ThreadsUploadAccess: UploadAccess {
    public let client: PostgresClient

    public init(client: PostgresClient) {
        self.client = client
    }

    public func mayRead(handle: String, person: String) throws -> Bool {
        guard UploadStore.isWellFormed(handle), !person.isEmpty else { return false }
        do {
            return try client.withConnectionBlocking(retryIfFoundDead: true) { connection in
                try connection.query(
                    """
                    SELECT EXISTS (
                        SELECT 1 FROM messages m JOIN conversations c USING (conversation_id)
                        WHERE m.attachment_handles @> jsonb_build_array($1::text)
                          AND m.conversation_id = coalesce((SELECT u.conversation_id FROM uploads u WHERE u.handle = $1), m.conversation_id)
                          AND (c.buyer_id = $2
                               OR EXISTS (SELECT 1 FROM shop_members s WHERE s.shop_id = c.shop_id AND s.person_id = $2)))
                    """, handle, person
                ).scalar(Bool.self)
            }
        } catch let error as PostgresError where error.sqlState == .undefinedTable {
            // The read models are not made yet (a database no projector has run on): nobody has
            // a message to see a file through.
            return false
        }
    }
}
