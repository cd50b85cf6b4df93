import Lifecycle
import PostgresClient
import Schedule

extension Roles {
    /// The schedule: the shop reminders, checked every INBOX_SCHEDULE_INTERVAL_SECONDS by the one
    /// node that holds its lease (docs/schedule.md).
    static func schedule(database: Database, configuration: InboxConfiguration, log: Logger) -> ServiceGroup.Member {
        let reminders = ShopReminders(
            settings: ShopReminders.Settings(
                gap: .seconds(configuration.shopReminderGapSeconds), window: .seconds(configuration.shopReminderWindowDays * 86_400)))
        let service = ScheduleService(
            configuration: database.client.configuration.connection, reminders: reminders,
            options: ScheduleService.Options(interval: .seconds(configuration.scheduleIntervalSeconds)), logger: log)
        // A check in flight is one short transaction.
        return ServiceGroup.Member("the schedule", service, shutdownDeadline: .seconds(10))
    }

    /// `inbox status`'s line about the schedule.
    static func scheduleStatus(database: Database) async throws -> [String] {
        let totals = try await database.client.withConnection { try ShopReminders.totals(on: $0) }
        return ["shop reminders: \(totals.reminders) sent to \(totals.shops) shops, covering \(totals.messages) waiting messages"]
    }
}
