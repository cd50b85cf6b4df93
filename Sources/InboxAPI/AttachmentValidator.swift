import PostgresClient
import Uploads

/// Decides whether a message may name attachment handles, and records that it did. `POST
/// /v1/uploads` hands out the handles and its `UploadStore` is the validator `InboxRoutes.all`
/// wires in; the protocol keeps the conversation routes apart from how files are stored. Both calls run on the request's connection, after the thread's checks and
/// before (`invalidHandles`) and after (`attach`) the message is appended.
public protocol AttachmentValidator: Sendable {
    /// The handles among `handles` that `person` may not attach (unknown, somebody else's, or
    /// expired), in the order given; empty when all may be attached.
    func invalidHandles(_ handles: [String], person: String, on connection: PostgresConnection) throws -> [String]

    /// The handles are now attached to a message of a conversation: they no longer expire, and are
    /// served to the people who may see the thread.
    func attach(_ handles: [String], person: String, conversationId: String, messageId: String, on connection: PostgresConnection) throws
}

/// Uploads' own store: a handle is this person's, not expired, and is recorded attached.
extension UploadStore: AttachmentValidator {}

/// A validator that knows no handle (routes built without uploads): a message with attachments is
/// refused (422 naming them) and one without is unaffected.
public struct NoUploads: AttachmentValidator {
    public init() {}

    public func invalidHandles(_ handles: [String], person: String, on connection: PostgresConnection) throws -> [String] { handles }

    public func attach(_ handles: [String], person: String, conversationId: String, messageId: String, on connection: PostgresConnection) throws {}
}
