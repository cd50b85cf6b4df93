import Crypto
import Encodings
import Foundation
import PostgresClient
import Synchronization

/// The bounds of an upload.
public enum UploadLimits {
    /// The largest file: images and video up to 10 MB.
    public static let maximumFileBytes = 10 * 1024 * 1024
    /// The largest body of `POST /v1/uploads`: the file and the multipart framing around it. A
    /// file part over `maximumFileBytes` inside it is refused by the route (413) all the same.
    public static let maximumRequestBytes = maximumFileBytes + 64 * 1024
    /// How long a handle nobody attaches lives.
    public static let unattachedLifetime: Duration = .seconds(24 * 3600)
}

/// An uploaded file's record.
public struct Upload: Sendable, Hashable {
    public var handle: String
    public var personId: String
    public var sha256: String
    public var contentType: String
    public var size: Int
    public var createdAt: Date
    public var expiresAt: Date
    public var attached: Bool
    public var conversationId: String?
}

/// Uploaded files: the bytes in a folder under their SHA-256, the records in PostgreSQL's
/// `uploads` table (sql/008_uploads.sql).
///
/// For the conversation routes (issue 12): `invalidHandles` says which `attachmentHandles` of a
/// message a person may not attach (unknown, expired, or somebody else's), so the route can
/// answer 422 naming them; `attach` attaches them to the message's conversation, after which they
/// never expire and the people of that conversation may read them (`ThreadsUploadAccess`). Both
/// take the connection of the route's transaction, so a message and its attachments are written
/// together. Their signatures are those of the conversation routes' `AttachmentValidator`
/// (Sources/InboxAPI/AttachmentValidator.swift on main), so wiring this store in is
/// `extension UploadStore: AttachmentValidator {}` and passing it where `NoUploads()` is passed.
///
/// ```swift
/// let bad = try uploads.invalidHandles(handles, person: person, on: connection)
/// guard bad.isEmpty else { throw APIError(status: 422, ...) }   // name them
/// // append MessageSent, then in the same transaction:
/// try uploads.attach(handles, person: person, conversationId: id, messageId: messageId, on: connection)
/// ```
///
/// A handle may be attached to messages of several conversations (a photo sent twice); each
/// conversation is recorded in `upload_attachments`.
///
/// Files are written to a temporary file in the folder and renamed into place, so a file under a
/// SHA-256 name is always whole; the same bytes uploaded twice are stored once. Storing a file and
/// sweeping one take a transaction-scoped advisory lock on its digest, so a sweep never deletes a
/// file a new record has just come to name.
public final class UploadStore: Sendable {
    public let client: PostgresClient
    public let directory: URL
    /// The time records are made and expire by (a test clock in tests).
    public let now: @Sendable () -> Date
    public let lifetime: Duration
    /// When the last lazy sweep ran (`sweepIfDue`).
    private let lastSweep = Mutex<Date?>(nil)
    public let sweepInterval: Duration
    /// Where the files are kept for every node (`uploads/<sha256>`); nil: the folder alone. With a
    /// bucket the folder is this node's copy of the files it stored or served, fetched again from
    /// the bucket when missing (a file never changes under its digest, so a copy is never stale).
    public let bucket: S3Bucket?

    public init(
        client: PostgresClient, directory: URL, bucket: S3Bucket? = nil, lifetime: Duration = UploadLimits.unattachedLifetime,
        sweepInterval: Duration = .seconds(600), now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.client = client
        self.directory = directory
        self.bucket = bucket
        self.lifetime = lifetime
        self.sweepInterval = sweepInterval
        self.now = now
    }

    /// The bucket's key of a file.
    static func objectKey(_ sha256: String) -> String { "uploads/" + sha256 }

    /// Whether `handle` has the form of a handle this store hands out (24 characters of
    /// base64url): anything else (`../x`, a NUL) is never looked up, nor near a file name.
    public static func isWellFormed(_ handle: String) -> Bool {
        handle.utf8.count == 24
            && handle.utf8.allSatisfy { byte in
                (48...57).contains(byte) || (65...90).contains(byte) || (97...122).contains(byte) || byte == 45 || byte == 95
            }
    }

    /// A new handle: 18 random bytes (144 bits) as base64url.
    static func newHandle() -> String {
        var generator = SystemRandomNumberGenerator()
        return Base64URL.encode((0..<18).map { _ in UInt8.random(in: .min ... .max, using: &generator) })
    }

    /// Where the bytes of `sha256` are (the digest is checked to be 64 hex digits first).
    func path(of sha256: String) -> URL? {
        guard sha256.utf8.count == 64, sha256.utf8.allSatisfy({ (48...57).contains($0) || (97...102).contains($0) }) else { return nil }
        return directory.appendingPathComponent(sha256, isDirectory: false)
    }

    /// Stores `bytes` (already checked: an allowed type, within the size limit) for `person`
    /// and returns the new record, with a fresh handle.
    public func store(
        _ bytes: [UInt8], contentType: String, person: String, origin: String, appVersion: String?, source: String
    ) throws -> Upload {
        let sha256 = SHA256.hexDigest(bytes)
        let handle = Self.newHandle()
        let created = now()
        let expires = created.addingTimeInterval(lifetime.inSeconds)
        try Self.makePrivateFolder(directory)
        try client.transactionBlocking { connection in
            _ = try connection.query("SELECT pg_advisory_xact_lock($1::bigint)", Self.lockKey(sha256))
            try write(bytes, as: sha256)
            // In the bucket before the record names it: a record never points at nothing.
            try bucket?.put(bytes, key: Self.objectKey(sha256), contentType: contentType)
            _ = try connection.query(
                """
                INSERT INTO uploads (handle, person_id, sha256, content_type, size_bytes, origin, app_version, source, created_at, expires_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                """, handle, person, sha256, contentType, Int64(bytes.count), origin, appVersion, source, created, expires)
        }
        return Upload(
            handle: handle, personId: person, sha256: sha256, contentType: contentType, size: bytes.count, createdAt: created,
            expiresAt: expires, attached: false, conversationId: nil)
    }

    /// Writes the file of `sha256` unless it is there: to a temporary file in the folder, then
    /// renamed into place (atomic within one file system).
    private func write(_ bytes: [UInt8], as sha256: String) throws {
        guard let target = path(of: sha256) else { throw CocoaError(.fileWriteInvalidFileName) }
        if FileManager.default.fileExists(atPath: target.path) { return }
        let temporary = directory.appendingPathComponent(".incoming-\(Self.newHandle())", isDirectory: false)
        do {
            try Data(bytes).write(to: temporary)
            guard rename(temporary.path, target.path) == 0 else { throw CocoaError(.fileWriteUnknown) }
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
    }

    /// The record of `handle`, unless it is unknown, malformed, or expired without being attached.
    public func upload(_ handle: String) throws -> Upload? {
        guard Self.isWellFormed(handle) else { return nil }
        let rows = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in
            try connection.query(
                """
                SELECT handle, person_id, sha256, content_type, size_bytes, created_at, expires_at, attached, conversation_id
                FROM uploads WHERE handle = $1 AND (attached OR expires_at > $2)
                """, handle, now()
            ).map(Self.upload)
        }
        return rows.first
    }

    static func upload(_ row: PostgresRow) throws -> Upload {
        Upload(
            handle: try row.decode(String.self, "handle"), personId: try row.decode(String.self, "person_id"),
            sha256: try row.decode(String.self, "sha256"), contentType: try row.decode(String.self, "content_type"),
            size: Int(try row.decode(Int64.self, "size_bytes")), createdAt: try row.decode(Date.self, "created_at"),
            expiresAt: try row.decode(Date.self, "expires_at"), attached: try row.decode(Bool.self, "attached"),
            conversationId: try row.decode(String?.self, "conversation_id"))
    }

    /// Where an upload's bytes are on this node, to be read as they are sent: with a bucket, a file
    /// this node does not have is fetched from it first (into a temporary file, its digest checked,
    /// then renamed into place), so memory holds none of it.
    public func file(of upload: Upload) throws -> URL {
        guard let path = path(of: upload.sha256) else { throw CocoaError(.fileReadInvalidFileName) }
        guard let bucket, !FileManager.default.fileExists(atPath: path.path) else { return path }
        try Self.makePrivateFolder(directory)
        let temporary = directory.appendingPathComponent(".incoming-\(Self.newHandle())", isDirectory: false)
        let descriptor = open(temporary.path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: temporary.path]) }
        do {
            // Closed once, whatever happens: a second close could close another thread's new file.
            let found: Bool
            do {
                defer { close(descriptor) }
                found = try bucket.get(key: Self.objectKey(upload.sha256), to: descriptor, limit: UploadLimits.maximumFileBytes)
            }
            guard found else { throw CocoaError(.fileReadNoSuchFile, userInfo: [NSFilePathErrorKey: Self.objectKey(upload.sha256)]) }
            let bytes = try Data(contentsOf: temporary, options: .alwaysMapped)
            guard SHA256.hexDigest(bytes) == upload.sha256 else {
                throw S3Bucket.Failure(description: "The object \(Self.objectKey(upload.sha256)) is not the file its name says (another digest).")
            }
            guard rename(temporary.path, path.path) == 0 else { throw CocoaError(.fileWriteUnknown) }
            return path
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
    }

    // MARK: For the conversation routes

    /// Some handles could not be attached: they expired (or were swept) between the check and
    /// the attach. The route's transaction should fail with a 422 naming them.
    public struct AttachFailure: Error, Sendable, CustomStringConvertible {
        public var handles: [String]
        public var description: String { "These handles cannot be attached (unknown, expired or somebody else's): \(handles.joined(separator: ", "))" }
    }

    /// Of `handles`, those `person` may not attach to a message: unknown (or malformed), expired
    /// without being attached, or uploaded by somebody else. Empty: all may be attached. In the
    /// order given, each once.
    public func invalidHandles(_ handles: [String], person: String, on connection: PostgresConnection) throws -> [String] {
        let formed = handles.filter(Self.isWellFormed)
        var usable = Set<String>()
        if !formed.isEmpty {
            for row in try connection.query(
                "SELECT handle FROM uploads WHERE handle = ANY($1::text[]) AND person_id = $2 AND (attached OR expires_at > $3)",
                formed, person, now())
            {
                usable.insert(try row.decode(String.self, "handle"))
            }
        }
        var seen = Set<String>()
        return handles.filter { !usable.contains($0) && seen.insert($0).inserted }
    }

    /// Marks `handles` of `person` attached to a message of `conversationId`: they never expire
    /// from then on, and the conversation is recorded for `ThreadsUploadAccess`. Returns those it
    /// could not mark (as `invalidHandles` would name them: one may have expired since it was
    /// checked); empty when all are attached.
    @discardableResult
    public func markAttached(
        _ handles: [String], person: String, conversationId: String, messageId: String? = nil, on connection: PostgresConnection
    ) throws -> [String] {
        let formed = Array(Set(handles.filter(Self.isWellFormed))).sorted()
        var marked = Set<String>()
        if !formed.isEmpty {
            let at = now()
            for row in try connection.query(
                """
                UPDATE uploads SET attached = true, conversation_id = coalesce(conversation_id, $4), attached_at = coalesce(attached_at, $3)
                WHERE handle = ANY($1::text[]) AND person_id = $2 AND (attached OR expires_at > $3)
                RETURNING handle
                """, formed, person, at, conversationId)
            {
                marked.insert(try row.decode(String.self, "handle"))
            }
            if !marked.isEmpty {
                _ = try connection.query(
                    """
                    INSERT INTO upload_attachments (handle, conversation_id, message_id, attached_at)
                    SELECT h, $2, $3, $4 FROM unnest($1::text[]) AS h
                    ON CONFLICT (handle, conversation_id) DO NOTHING
                    """, marked.sorted(), conversationId, messageId, at)
            }
        }
        var seen = Set<String>()
        return handles.filter { !marked.contains($0) && seen.insert($0).inserted }
    }

    /// `markAttached` as the conversation routes' `AttachmentValidator` has it: throws
    /// `AttachFailure` naming the handles it could not attach.
    public func attach(_ handles: [String], person: String, conversationId: String, messageId: String, on connection: PostgresConnection) throws {
        let failed = try markAttached(handles, person: person, conversationId: conversationId, messageId: messageId, on: connection)
        if !failed.isEmpty { throw AttachFailure(handles: failed) }
    }

    // MARK: Expiry

    /// Deletes the records of handles that expired unattached (an erased person's among them), and
    /// the file of each digest no record names any longer; temporary files an hour old (left by a
    /// process that stopped while writing one); and this node's copies of files another node
    /// swept (`forgetUnnamedCopies`). Returns the number of records deleted.
    @discardableResult
    public func sweep() throws -> Int {
        let cutoff = now()
        removeAbandonedTemporaryFiles(olderThan: Date().addingTimeInterval(-3600))
        let digests = try client.withConnectionBlocking { connection in
            try connection.query(
                "SELECT DISTINCT sha256 FROM uploads WHERE NOT attached AND expires_at <= $1 LIMIT 1000", cutoff
            ).map { try $0.decode(String.self, "sha256") }
        }
        var deleted = 0
        for sha256 in digests {
            deleted += try client.transactionBlocking { connection in
                _ = try connection.query("SELECT pg_advisory_xact_lock($1::bigint)", Self.lockKey(sha256))
                let gone = try connection.query(
                    "DELETE FROM uploads WHERE sha256 = $1 AND NOT attached AND expires_at <= $2 RETURNING handle", sha256, cutoff
                ).count
                try deleteFileIfUnnamed(sha256, on: connection)
                return gone
            }
        }
        try forgetUnnamedCopies()
        return deleted
    }

    /// The uploads of an erased person (docs/event-log.md, "Erasing a person"), in the caller's
    /// transaction: their records expire at once, unattached, so every handle of theirs is `404`
    /// to everybody from that commit on and cannot be attached, and the next `sweep` of any node
    /// deletes the records, the bucket's objects and the files no other record names. The same
    /// bytes uploaded by somebody else are theirs too, and stay. Returns how many records.
    public static func forget(person: String, on connection: PostgresConnection) throws -> Int {
        _ = try connection.query(
            "DELETE FROM upload_attachments WHERE handle IN (SELECT handle FROM uploads WHERE person_id = $1)", person)
        return try connection.query(
            "UPDATE uploads SET attached = false, expires_at = '-infinity' WHERE person_id = $1 RETURNING handle", person
        ).count
    }

    /// Deletes this node's copies of files no record names any longer: one whose last record
    /// another node swept (or a sweep that stopped between its commit and its files), so the bytes
    /// of an erased person leave every node's folder, not only the sweeping one's. The bucket's
    /// object of such a digest is deleted too. Each digest is checked again under its lock, so a
    /// file a new record has just come to name stays. Returns how many copies were deleted.
    @discardableResult
    public func forgetUnnamedCopies() throws -> Int {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory.path) else { return 0 }
        let digests = names.filter { path(of: $0) != nil }
        var deleted = 0
        var start = 0
        while start < digests.count {
            let chunk = Array(digests[start..<min(start + 1_000, digests.count)])
            start += chunk.count
            let unnamed = try client.withConnectionBlocking { connection in
                try connection.query(
                    "SELECT d FROM unnest($1::text[]) AS d WHERE NOT EXISTS (SELECT 1 FROM uploads WHERE sha256 = d)", chunk
                ).map { try $0.decode(String.self, "d") }
            }
            for sha256 in unnamed {
                deleted += try client.transactionBlocking { connection in
                    _ = try connection.query("SELECT pg_advisory_xact_lock($1::bigint)", Self.lockKey(sha256))
                    return try deleteFileIfUnnamed(sha256, on: connection) ? 1 : 0
                }
            }
        }
        return deleted
    }

    /// Under the digest's lock (held by the caller's transaction): when no record names `sha256`,
    /// its object leaves the bucket and its file this node's folder. True when a file was deleted.
    @discardableResult
    private func deleteFileIfUnnamed(_ sha256: String, on connection: PostgresConnection) throws -> Bool {
        guard try connection.query("SELECT count(*)::int FROM uploads WHERE sha256 = $1", sha256).scalar(Int.self) == 0,
            let path = path(of: sha256)
        else { return false }
        try bucket?.delete(key: Self.objectKey(sha256))
        guard unlink(path.path) == 0 else {
            if errno == ENOENT { return false }
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path.path])
        }
        return true
    }

    /// Removes `.incoming-…` files last changed before `date`: a write in progress changes its
    /// file far more often than that.
    func removeAbandonedTemporaryFiles(olderThan date: Date) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory.path) else { return }
        for name in names where name.hasPrefix(".incoming-") {
            let path = directory.appendingPathComponent(name, isDirectory: false).path
            guard let changed = (try? FileManager.default.attributesOfItem(atPath: path))?[.modificationDate] as? Date, changed < date else { continue }
            _ = unlink(path)
        }
    }

    /// Sweeps when the last sweep of this store is `sweepInterval` old or more (or there was
    /// none): the API calls it on uploads, so expired files go without a role of their own. A
    /// failed sweep is tried again on a later call.
    public func sweepIfDue() throws {
        let due = lastSweep.withLock { last -> Bool in
            let current = now()
            if let last, current.timeIntervalSince(last) < sweepInterval.inSeconds { return false }
            last = current
            return true
        }
        if due { try sweep() }
    }

    /// The folder, readable by this user alone; the folders above it that are missing are made with
    /// the usual mode, since Foundation would give them the folder's 0700 and close the data folder
    /// to the embedded PostgreSQL's user (`make run` as root after a run with DATABASE_URL).
    static func makePrivateFolder(_ directory: URL) throws {
        try FileManager.default.createDirectory(at: directory.deletingLastPathComponent(), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    /// The advisory lock of a digest: its first 64 bits.
    static func lockKey(_ sha256: String) -> Int64 {
        Int64(bitPattern: UInt64(sha256.prefix(16), radix: 16) ?? 0)
    }
}
