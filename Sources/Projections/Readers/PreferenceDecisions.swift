import Foundation
import InboxDomain
import PostgresClient

/// Which channels a notification goes to for one person, from the live preference and people
/// tables and the rules of `PreferenceRules`, one person at a time. The push fan-out decides whole
/// batches instead (`FanoutDecision`, on the same rules, reading the same tables in five queries);
/// nothing in the tier calls this yet. The mail channel (issue 13) should decide with the fan-out's
/// batch decision, extended to email, and this be removed then.
public enum PreferenceDecisions {
    /// The channels (push, email) `notification` goes to for `person`: nothing for an account
    /// Wristler blocked, nothing of a shop's news for somebody who does not work at the shop, a
    /// saved search's own settings for its matches, the person's switches (locks applied) otherwise.
    public static func channels(
        for notification: PlannedNotification, person: String, on connection: PostgresConnection
    ) throws -> Set<NotificationChannel> {
        if try connection.query("SELECT EXISTS (SELECT 1 FROM blocked_accounts WHERE person_id = $1)", person).scalar(Bool.self) {
            return []
        }
        if case .shop(let shop) = notification.audience {
            let member = try connection.query(
                "SELECT EXISTS (SELECT 1 FROM shop_members WHERE shop_id = $1 AND person_id = $2)", shop, person
            ).scalar(Bool.self)
            if !member { return [] }
        }
        var savedSearch: SavedSearchSettings?
        if PreferenceRules.isManagedPerSearch(notification.category), let id = notification.ids["savedSearchId"],
            let row = try connection.query(
                "SELECT interval, push FROM saved_searches WHERE saved_search_id = $1 AND person_id = $2 AND NOT deleted", id, person
            ).first
        {
            savedSearch = SavedSearchSettings(
                interval: SavedSearchInterval(rawValue: try row.decode(String.self, "interval")) ?? .never,
                push: try row.decode(Bool.self, "push"))
        }
        var stored: [NotificationChannel: Bool] = [:]
        for row in try connection.query(
            "SELECT channel, enabled FROM notification_preferences WHERE person_id = $1 AND category = $2", person,
            notification.category.rawValue)
        {
            if let channel = NotificationChannel(rawValue: try row.decode(String.self, "channel")) {
                stored[channel] = try row.decode(Bool.self, "enabled")
            }
        }
        return PreferenceRules.channels(for: notification.category, stored: { stored[$0] }, savedSearch: savedSearch)
    }
}
