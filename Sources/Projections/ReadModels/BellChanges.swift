import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// Who's bell changed, announced on a PostgreSQL channel in the transaction that changed it, so
/// whoever keeps bell pages in memory (the API's `BellCache`) learns of it when, and only when, the
/// change commits. The bell projection announces the people a batch changed, live and inline;
/// a replay's swap announces that everybody's may have.
///
/// A payload is a JSON array of person ids (at most about 7,000 bytes, under PostgreSQL's limit of
/// 8,000), or `*` for everybody.
public enum BellChanges {
    public static let channel = "inbox_bell"
    /// Past this many people in one batch, one `*` is cheaper to send and to act on than their names.
    static let mostNamed = 2_000
    static let payloadBytes = 7_000

    public enum Change: Equatable, Sendable {
        case people([String])
        case everybody
    }

    /// Announces that the bells of `people` changed, on the transaction of `connection`.
    public static func announce(people: some Collection<String>, on connection: PostgresConnection) throws {
        if people.isEmpty { return }
        if people.count > mostNamed { return try announceEverybody(on: connection) }
        var payloads: [[UInt8]] = []
        var current: [UInt8] = []
        for person in people {
            var name = JSONText(capacity: person.utf8.count + 2)
            name.string(person)
            // An id that alone fills a payload cannot be named.
            if name.bytes.count + 2 > payloadBytes { return try announceEverybody(on: connection) }
            if !current.isEmpty && current.count + name.bytes.count + 2 > payloadBytes {
                payloads.append(current + [UInt8(ascii: "]")])
                current = []
            }
            current.append(UInt8(ascii: current.isEmpty ? "[" : ","))
            current.append(contentsOf: name.bytes)
        }
        payloads.append(current + [UInt8(ascii: "]")])
        for payload in payloads { try connection.notify(channel, payload: String(decoding: payload, as: UTF8.self)) }
    }

    /// Announces that anybody's bell may have changed (the tables were swapped for a replay's).
    public static func announceEverybody(on connection: PostgresConnection) throws {
        try connection.notify(channel, payload: "*")
    }

    /// What a payload says; a payload this release cannot read is taken as everybody, the safe side.
    public static func change(from payload: String) -> Change {
        guard payload != "*", let people = try? JSONDecoder().decode([String].self, from: Data(payload.utf8)) else { return .everybody }
        return .people(people)
    }
}
