import Encodings
import Foundation

/// A place in a list that is walked newest first: the sort key of the last row handed out and its
/// id. Opaque to clients (base64url), exact (microseconds, not a floating-point date), and checked
/// when it comes back: a garbled cursor is an error, never a silent first page.
public struct KeysetCursor: Sendable, Hashable {
    /// The sort key: microseconds since 1970 for times, or a sequence number.
    public var key: Int64
    public var id: String

    public init(key: Int64, id: String) {
        self.key = key
        self.id = id
    }

    public struct Malformed: Error, Sendable, CustomStringConvertible {
        public var description: String { "The cursor is not one this server handed out." }
    }

    /// The opaque text handed to clients.
    public var token: String {
        Base64URL.encode("v1|\(key)|\(id)".utf8)
    }

    public init(token: String) throws {
        guard token.utf8.count <= 512, let bytes = Base64URL.decode(token), let text = String(validating: bytes, as: UTF8.self) else {
            throw Malformed()
        }
        let parts = text.split(separator: "|", maxSplits: 2, omittingEmptySubsequences: false)
        // An id with U+0000 was never handed out, and PostgreSQL could not compare it.
        guard parts.count == 3, parts[0] == "v1", let key = Int64(parts[1]), !parts[2].isEmpty, !parts[2].utf8.contains(0) else { throw Malformed() }
        self.init(key: key, id: String(parts[2]))
    }
}

/// One page of a keyset-paged list, and the cursor of the next (nil on the last page).
public struct KeysetPage<Row: Sendable>: Sendable {
    public var rows: [Row]
    public var next: KeysetCursor?

    public init(rows: [Row], next: KeysetCursor?) {
        self.rows = rows
        self.next = next
    }

    /// A page from up to `limit + 1` rows read in order with their sort keys: the extra row, if
    /// there is one, only says that a next page exists, which starts after the last row kept.
    init(reading rows: [(row: Row, key: Int64, id: String)], limit: Int) {
        if rows.count > limit {
            self.init(rows: rows.prefix(limit).map(\.row), next: KeysetCursor(key: rows[limit - 1].key, id: rows[limit - 1].id))
        } else {
            self.init(rows: rows.map(\.row), next: nil)
        }
    }
}
