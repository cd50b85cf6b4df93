import Foundation
import Lifecycle
import Mail
import Mailer
import PostgresClient

extension Roles {
    /// The mailer: every category whose `email` is on, gathered into at most one mail per person
    /// per INBOX_MAIL_GATHER_SECONDS, sent through the relay of INBOX_SMTP_URL or written to
    /// INBOX_MAIL_FOLDER (docs/mail.md, "The mail outbox"). Any number of nodes may run it.
    static func mail(database: Database, configuration: InboxConfiguration, log: Logger) throws -> ServiceGroup.Member {
        let log = log.with(["role": "mail"])
        let mail: MailConfiguration
        let transport: any MailTransport
        do {
            mail = try configuration.mailConfiguration()
            transport = try mail.makeTransport()
        } catch {
            throw UsageError(description: "\(error)")
        }
        switch mail.delivery {
        case .smtp(let settings): log.info("mail goes to the relay", metadata: ["url": .string(settings.url), "from": .string(mail.from.address)])
        case .folder(let folder): log.notice("no INBOX_SMTP_URL: mails are written to a folder, not sent", metadata: ["folder": .string(folder)])
        }
        var links: MailRenderer.Links?
        if let publicURL = configuration.publicURL {
            if let signer = mail.unsubscribe {
                links = MailRenderer.Links(signer: signer, publicURL: publicURL)
            } else {
                log.warning("INBOX_PUBLIC_URL is set but INBOX_UNSUBSCRIBE_KEYS is not: mails carry no unsubscribe link")
            }
        }
        // A round sends for half the claim at most, and a mail takes up to the SMTP timeout: a
        // claim shorter than twice that could run out while its mail is still being handed over.
        let claimFor = Duration.seconds(configuration.mailClaimSeconds)
        if case .smtp(let settings) = mail.delivery, claimFor <= settings.totalTimeout * 2 {
            throw UsageError(
                description: "INBOX_MAIL_CLAIM_SECONDS (\(configuration.mailClaimSeconds)) must be more than twice INBOX_SMTP_TIMEOUT_SECONDS "
                    + "(\(settings.totalTimeout.components.seconds)): a claim could run out while its mail is still being sent, and the mail go twice.")
        }
        let store = MailOutboxStore(
            settings: MailOutboxStore.Settings(
                gather: .seconds(configuration.mailGatherSeconds), claimFor: claimFor, maximumAttempts: configuration.mailAttempts,
                shopDigest: .seconds(configuration.shopDigestSeconds), staleAfter: .seconds(configuration.mailStaleSeconds)))
        let service = MailService(
            configuration: database.client.configuration.connection, store: store, transport: transport, from: mail.from, links: links,
            options: MailService.Options(
                batchSize: configuration.mailBatch, pollInterval: .seconds(configuration.mailPollSeconds), workers: configuration.mailWorkers),
            logger: log)
        // A mail in flight takes at most the SMTP timeout; what is not recorded is sent again later.
        return ServiceGroup.Member("the mailer", service, shutdownDeadline: .seconds(10))
    }

    /// Where mail goes, for `inbox run`'s first words.
    static func mailDestination(_ configuration: InboxConfiguration) -> String {
        switch (try? configuration.mailConfiguration())?.delivery {
        case .smtp(let settings)?: "Mail goes to the relay \(settings.url)."
        case .folder(let folder)?: "Mail is written to \(URL(fileURLWithPath: folder).standardizedFileURL.path) as .eml files (no INBOX_SMTP_URL)."
        case nil: "Mail is not set up right (see the log)."
        }
    }

    /// `inbox status`'s lines about the mail outbox.
    static func mailStatus(database: Database) async throws -> [String] {
        let status = try await database.client.withConnection { try MailOutboxStore.status(on: $0) }
        var lines = ["mail outbox: \(status.undecided) to decide, \(status.queued) notifications queued for \(status.peopleWaiting) people"]
        for (name, count) in status.counters.sorted(by: { $0.key < $1.key }) { lines.append("mail \(name): \(count)") }
        return lines
    }
}
