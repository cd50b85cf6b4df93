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

    /// Announces that the bells of `people` changed, on the transaction of `connection`.
    public static func announce(people: some Collection<String>, on connection: PostgresConnection) throws {
        try Announcement.announce(people, channel: channel, on: connection)
    }

    /// Announces that anybody's bell may have changed (the tables were swapped for a replay's).
    public static func announceEverybody(on connection: PostgresConnection) throws {
        try connection.notify(channel, payload: "*")
    }
}
