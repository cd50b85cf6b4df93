import Foundation
import Lifecycle
import PostgresClient
import Schedule

extension Roles {
    /// The schedule: the shop reminders, checked every INBOX_SCHEDULE_INTERVAL_SECONDS by the one
    /// node that holds its lease (docs/schedule.md).
    static func schedule(database: Database, configuration: InboxConfiguration, log: Logger) -> ServiceGroup.Member {
        let reminders = shopReminders(configuration)
        let service = ScheduleService(
            configuration: database.client.configuration.connection, reminders: reminders,
            options: ScheduleService.Options(interval: .seconds(configuration.scheduleIntervalSeconds)), logger: log)
        // A check in flight is one short transaction.
        return ServiceGroup.Member("the schedule", service, shutdownDeadline: .seconds(10))
    }

    static func shopReminders(_ configuration: InboxConfiguration) -> ShopReminders {
        ShopReminders(
            settings: ShopReminders.Settings(
                gap: .seconds(configuration.shopReminderGapSeconds), window: .seconds(configuration.shopReminderWindowDays * 86_400)))
    }

    /// `inbox schedule --once`: one check of the shop reminders, now, without the lease (a check is
    /// serialized on its own, so one running beside a node's schedule reminds nobody twice).
    /// Returns the line it prints; throws `TemporaryFailure` when the read models are behind the log.
    static func checkOnce(database: Database, configuration: InboxConfiguration) async throws -> String {
        let reminders = shopReminders(configuration)
        let outcome = try await database.client.withConnection { try reminders.check(now: Date(), on: $0) }
        if !outcome.projectionsBehind.isEmpty {
            throw TemporaryFailure(
                description: "the read models are behind the log (\(outcome.projectionsBehind.joined(separator: ", "))): nothing was checked; run it again once they caught up")
        }
        return "reminded \(outcome.reminders.count) shops of \(outcome.messages) messages waiting for an answer"
    }

    /// `inbox status`'s line about the schedule.
    static func scheduleStatus(database: Database) async throws -> [String] {
        let totals = try await database.client.withConnection { try ShopReminders.totals(on: $0) }
        return ["shop reminders: \(totals.reminders) sent to \(totals.shops) shops, covering \(totals.messages) waiting messages"]
    }
}
