import InboxDomain
import PostgresClient

/// The bell's facts about the people of notifications (who works at which shop, switches, saved
/// searches, blocked accounts) as its live tables hold them: the one reader of them besides the
/// bell's own batches, which decide every notification with them at its place in the log.
///
/// The live tables stand at the bell's checkpoint, which is at or past the place in the log of every
/// notification in the outbox (the bell writes both in one transaction). So what they say is never
/// older than a notification: the mailer reads them to withdraw a waiting mail that a later change
/// no longer wants (an unsubscribe, somebody who left the shop), never to send one the notification
/// was not decided for, and the schedule decides its reminders on them.
public enum AudienceReader {
    /// The facts about `people`, the members of `shops` (and their facts), and `searches`.
    public static func read(
        people: some Collection<String>, shops: some Collection<String>, searches: some Collection<String> = [String](),
        on connection: PostgresConnection
    ) throws -> AudienceFacts {
        var facts = AudienceFacts()
        let shops = Array(Set(shops))
        if !shops.isEmpty {
            for row in try connection.query("SELECT shop_id, person_id FROM bell_shop_members WHERE shop_id = ANY($1::text[])", shops) {
                try addMember(row, to: &facts)
            }
        }
        let everybody = Array(Set(people).union(facts.members.values.joined()))
        if !everybody.isEmpty {
            for row in try connection.query(
                "SELECT person_id, category, channel, enabled FROM bell_switches WHERE person_id = ANY($1::text[])", everybody)
            {
                try addSwitch(row, to: &facts)
            }
            for row in try connection.query("SELECT person_id FROM bell_blocked_accounts WHERE person_id = ANY($1::text[])", everybody) {
                try addBlocked(row, to: &facts)
            }
        }
        let searches = Array(Set(searches))
        if !searches.isEmpty {
            for row in try connection.query("SELECT * FROM bell_saved_searches WHERE saved_search_id = ANY($1::text[])", searches) {
                try addSearch(row, to: &facts)
            }
        }
        return facts
    }

    /// A row of `bell_shop_members`.
    static func addMember(_ row: PostgresRow, to facts: inout AudienceFacts) throws {
        facts.members[try row.decode(String.self, "shop_id"), default: []].insert(try row.decode(String.self, "person_id"))
    }

    /// A row of `bell_switches`.
    static func addSwitch(_ row: PostgresRow, to facts: inout AudienceFacts) throws {
        guard let category = NotificationCategory(rawValue: try row.decode(String.self, "category")),
            let channel = NotificationChannel(rawValue: try row.decode(String.self, "channel"))
        else { return }
        facts.switches[try row.decode(String.self, "person_id"), default: [:]][category, default: [:]][channel] = try row.decode(Bool.self, "enabled")
    }

    /// A row of `bell_blocked_accounts`.
    static func addBlocked(_ row: PostgresRow, to facts: inout AudienceFacts) throws {
        facts.blocked.insert(try row.decode(String.self, "person_id"))
    }

    /// A row of `bell_saved_searches`.
    static func addSearch(_ row: PostgresRow, to facts: inout AudienceFacts) throws {
        facts.searches[try row.decode(String.self, "saved_search_id")] = AudienceFacts.Search(
            personId: try row.decode(String.self, "person_id"), deleted: try row.decode(Bool.self, "deleted"),
            settings: SavedSearchSettings(
                interval: SavedSearchInterval(rawValue: try row.decode(String.self, "interval")) ?? .never, push: try row.decode(Bool.self, "push")))
    }
}
