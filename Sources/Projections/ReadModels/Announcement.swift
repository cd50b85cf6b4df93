import EventLog
import Foundation
import PostgresClient

/// Names announced on a PostgreSQL channel in the transaction that changed what they name:
/// JSON arrays of names of at most `payloadBytes` (under PostgreSQL's limit of 8,000), or `*`
/// for everything (past `mostNamed` names, or a name too long for a payload).
public enum Announcement {
    /// Past this many names in one batch, one `*` is cheaper to send and to act on than the names.
    static let mostNamed = 2_000
    static let payloadBytes = 7_000

    public static func announce(_ names: some Collection<String>, channel: String, on connection: PostgresConnection) throws {
        for payload in payloads(names) { try connection.notify(channel, payload: payload) }
    }

    /// The `pg_notify` statements that announce `names`, to send in a pipeline with others.
    public static func statements(_ names: some Collection<String>, channel: String) -> [PostgresStatement] {
        payloads(names).map { PostgresStatement("SELECT pg_notify($1, $2)", channel, $0) }
    }

    /// The payloads that name `names`: none for none, `*` for too many.
    static func payloads(_ names: some Collection<String>) -> [String] {
        if names.isEmpty { return [] }
        if names.count > mostNamed { return ["*"] }
        var payloads: [[UInt8]] = []
        var current: [UInt8] = []
        for name in names {
            var text = JSONText(capacity: name.utf8.count + 2)
            text.string(name)
            // A name that alone fills a payload cannot be named.
            if text.bytes.count + 2 > payloadBytes { return ["*"] }
            if !current.isEmpty && current.count + text.bytes.count + 2 > payloadBytes {
                payloads.append(current + [UInt8(ascii: "]")])
                current = []
            }
            current.append(UInt8(ascii: current.isEmpty ? "[" : ","))
            current.append(contentsOf: text.bytes)
        }
        payloads.append(current + [UInt8(ascii: "]")])
        return payloads.map { String(decoding: $0, as: UTF8.self) }
    }

    /// The names of a payload, nil for everything (`*`, or a payload this release cannot read:
    /// the safe side).
    public static func names(from payload: String) -> [String]? {
        guard payload != "*" else { return nil }
        return try? JSONDecoder().decode([String].self, from: Data(payload.utf8))
    }
}

/// Whose conversation lists changed, announced like `BellChanges` on a channel of its own, for
/// whoever keeps list pages in memory (the API's `ConversationListCache`). The names are
/// subjects a list depends on:
/// - `buyer:<personId>`: the person's threads on the buyer side (a thread, its side, its badge);
/// - `seller:<shopId>`: the shop's threads on the seller side;
/// - `member:<personId>`: which shops the person works at (their seller list's shops);
/// - `conversation:<conversationId>`: the thread's messages.
/// The threads projection announces the first two and the last for every thread a batch changed,
/// the people projection the third; a replay's swap of either announces everything (`*`).
public enum ThreadChanges {
    public static let channel = "inbox_threads"

    public static func buyer(_ person: String) -> String { "buyer:" + person }
    public static func seller(_ shop: String) -> String { "seller:" + shop }
    public static func member(_ person: String) -> String { "member:" + person }
    public static func conversation(_ id: String) -> String { "conversation:" + id }

    public static func announce(_ subjects: some Collection<String>, on connection: PostgresConnection) throws {
        try Announcement.announce(subjects, channel: channel, on: connection)
    }

    public static func announceEverything(on connection: PostgresConnection) throws {
        try connection.notify(channel, payload: "*")
    }
}
