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
///
/// When the handle was attached through `UploadStore.markAttached` (as the conversation routes
/// do), only the conversations recorded in `upload_attachments` are looked at, through their
/// indexes. A handle on a message that came another way (an event appended by another tier) has
/// no such record; then every message is scanned for it (there is no index on
/// `attachment_handles`), which is slower but still answers.
public struct ThreadsUploadAccess: UploadAccess {
    public let client: PostgresClient

    public init(client: PostgresClient) {
        self.client = client
    }

    public func mayRead(handle: String, person: String) throws -> Bool {
        guard UploadStore.isWellFormed(handle), !person.isEmpty else { return false }
        do {
            return try client.withConnectionBlocking(retryIfFoundDead: true) { connection in
                let conversations = try connection.query(
                    "SELECT conversation_id FROM upload_attachments WHERE handle = $1", handle
                ).map { try $0.decode(String.self, "conversation_id") }
                let visible = "(c.buyer_id = $2 OR EXISTS (SELECT 1 FROM shop_members s WHERE s.shop_id = c.shop_id AND s.person_id = $2))"
                if conversations.isEmpty {
                    return try connection.query(
                        """
                        SELECT EXISTS (
                            SELECT 1 FROM messages m JOIN conversations c USING (conversation_id)
                            WHERE m.attachment_handles @> jsonb_build_array($1::text) AND \(visible))
                        """, handle, person
                    ).scalar(Bool.self)
                }
                return try connection.query(
                    """
                    SELECT EXISTS (
                        SELECT 1 FROM conversations c JOIN messages m USING (conversation_id)
                        WHERE c.conversation_id = ANY($3::text[]) AND m.attachment_handles @> jsonb_build_array($1::text) AND \(visible))
                    """, handle, person, conversations
                ).scalar(Bool.self)
            }
        } catch let error as PostgresError where error.sqlState == .undefinedTable {
            // The read models are not made yet (a database no projector has run on): nobody has
            // a message to see a file through.
            return false
        }
    }
}
