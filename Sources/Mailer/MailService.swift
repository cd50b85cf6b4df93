import Encodings
import Foundation
import InboxDomain
import Lifecycle
import Mail
import NotificationOutbox
import PlantedSlowdown
import PostgresClient

/// The mailer (`inbox mail`, and part of `inbox run`): decides pending outbox entries into
/// people's mail queues, claims the people whose mail may go, renders each mail in the contact's
/// language, hands it to the transport and records the outcome (`MailOutboxStore`).
///
/// - **Any node, any number.** No lease: claims keep people apart, so two mailers never send one
///   mail, except when a mailer dies between handing a mail over and recording it; that mail is
///   sent again once its claim (`claimFor`) runs out, as push does.
/// - **Woken by the outbox** (`LISTEN inbox_outbox`, the NOTIFY of the outbox's trigger), and
///   every `pollInterval` besides: gathered mail falls due with time, not with a notification.
/// - **The address is read at send time** (`Contacts.contacts(for:)`): a contact deleted after
///   the notification was queued gets nothing, and the items are dropped as `no_contact`.
/// - **Logs** one line per mail: sent at info, a temporary failure at warning (the relay's reply,
///   so a misconfiguration shows at once), dropped at warning. Lines name the person id and the
///   address's domain only: the full address is personal data the log should not keep.
/// - Time is injected (`now`), so tests move it instead of waiting.
public struct MailService: Service {
    public struct Options: Sendable {
        /// Pending entries decided, and people claimed, per step.
        public var batchSize: Int
        public var pollInterval: Duration
        /// Mailing loops in this process, each with its own session and its own connection to the
        /// relay. A mail is a few round trips waited on one after the other (the database's, the
        /// relay's), so one loop leaves the machine mostly idle; claims keep the loops apart as
        /// they keep nodes apart.
        public var workers: Int

        public init(batchSize: Int = 100, pollInterval: Duration = .seconds(5), workers: Int = 4) {
            self.batchSize = max(1, batchSize)
            self.pollInterval = pollInterval
            self.workers = max(1, workers)
        }
    }

    private let loops: [LeasedLoop<MailWork>]
    private let logger: Logger

    /// Distinct statements the mailer's session keeps prepared: a round runs the same few dozen, so
    /// PostgreSQL parses and plans each once per session (unprepared, that was most of its time).
    public static let preparedStatements = 64

    public init(
        configuration: PostgresConfiguration, store: MailOutboxStore = MailOutboxStore(), transport: any MailTransport, from: MailAddress,
        links: MailRenderer.Links?, options: Options = Options(), now: @escaping @Sendable () -> Date = { Date() },
        clock: any Clock<Duration> = ContinuousClock(), logger: Logger = .silent
    ) {
        let logger = logger.with(["role": "mail"])
        self.logger = logger
        let work = MailWork(
            sender: MailSender(store: store, transport: transport, from: from, links: links, now: now, logger: logger), batchSize: options.batchSize)
        loops = (1...options.workers).map { worker in
            LeasedLoop(
                name: options.workers == 1 ? "mail" : "mail-\(worker)", work: work,
                configuration: configuration.withPreparedStatements(Self.preparedStatements), channels: [NotificationOutbox.channel],
                options: .init(pollInterval: options.pollInterval), clock: clock,
                logger: logger, isRetryable: Self.isRetryable, appendsEvents: false)
        }
    }

    /// Transient database errors, and read models whose tables no projector has made yet: both pass.
    static func isRetryable(_ error: any Error) -> Bool {
        guard let error = error as? PostgresError else { return false }
        return error.isTransient || error.sqlState == .undefinedTable
    }

    public func run() async throws {
        try await LeasedLoop.runSideBySide(loops, from: MailWork.State(), logger: logger, stopped: "the mailer stopped")
    }
}

/// One round of the mailer on a connection: decide, claim, send, record. `MailService` runs it
/// in a loop; tests call `round` directly with a moved clock.
public struct MailSender: Sendable {
    /// What one round did.
    public struct Round: Sendable, Equatable {
        public var decided: MailOutboxStore.Decided
        /// What became of each mail, by `Round.key`.
        public var outcomes: [String: MailOutboxStore.Recorded]
        /// Mails claimed: a full batch means there may be more.
        public var claimed: Int
        /// The transactional mails of the round (`TransactionalMail`).
        public var transactional = TransactionalMail.Sent()

        /// A mail's key in `outcomes`: the person id for the gathered notifications, the person id
        /// and the stream (`p1 search:s1`, `p1 sold`) for the others.
        public static func key(_ person: String, _ stream: MailStream) -> String {
            stream == .notifications ? person : person + " " + stream.key
        }
    }

    public let store: MailOutboxStore
    public let transport: any MailTransport
    public let from: MailAddress
    public let links: MailRenderer.Links?
    public let now: @Sendable () -> Date
    public let logger: Logger

    public init(
        store: MailOutboxStore, transport: any MailTransport, from: MailAddress, links: MailRenderer.Links?, now: @escaping @Sendable () -> Date = { Date() },
        logger: Logger = .silent
    ) {
        self.store = store
        self.transport = transport
        self.from = from
        self.links = links
        self.now = now
        self.logger = logger
    }

    /// Decides up to `limit` entries, then claims up to `limit` people and mails each, on
    /// `connection` (a blocking call: the transport blocks too).
    public func round(limit: Int, on connection: PostgresConnection) throws -> Round {
        // The verification mails first: somebody is waiting for theirs.
        let transactional = try sendTransactional(limit: limit, on: connection)
        let decided = try store.decide(limit: limit, now: now(), on: connection)
        let claimed = try store.claim(now: now(), limit: limit, on: connection)
        var outcomes: [String: MailOutboxStore.Recorded] = [:]
        if claimed.isEmpty { return Round(decided: decided, outcomes: outcomes, claimed: 0, transactional: transactional) }
        let contacts = try Contacts.contacts(for: claimed.map(\.personId), on: connection)
        // The claims end together, and the mails go one after the other: a slow relay must not
        // keep sending after the claims ran out (another mailer could take the same people and
        // mail them too). Past half the claim, the rest is let go for the next round.
        let sendUntil = now().addingTimeInterval(store.settings.claimFor.inSeconds / 2)
        for (index, person) in claimed.enumerated() {
            if now() >= sendUntil {
                let rest = Array(claimed[index...])
                try store.release(rest, on: connection)
                logger.warning("the relay is slow: let go of people claimed and not mailed yet", metadata: ["people": .int(rest.count)])
                break
            }
            let resolution = mail(person, contact: contacts[person.personId])
            let recorded = try store.record(person, resolution, now: now(), on: connection)
            log(person, contact: contacts[person.personId], resolution, recorded)
            outcomes[Round.key(person.personId, person.stream)] = recorded
        }
        return Round(decided: decided, outcomes: outcomes, claimed: claimed.count, transactional: transactional)
    }

    func mail(_ person: MailOutboxStore.Claimed, contact: Contact?) -> MailOutboxStore.Resolution {
        guard let contact else { return .noContact }
        let message: MailMessage
        do {
            Planted.spend(.mail)
            message = try MailRenderer.render(person, to: contact, from: from, links: links, date: now())
        } catch {
            // Only a bad setting (a public URL the links refuse) gets here; keep the mail for when it is fixed.
            return .temporary(reason: "the mail could not be composed: \(error)", messageID: person.messageID(domain: from.domain))
        }
        switch transport.send(message) {
        case .sent: return .sent(messageID: message.messageID)
        case .temporary(let code, let text): return .temporary(reason: "\(code) \(text)", messageID: message.messageID)
        case .permanent(let code, let text): return .permanent(reason: "\(code) \(text)")
        }
    }

    func log(_ person: MailOutboxStore.Claimed, contact: Contact?, _ resolution: MailOutboxStore.Resolution, _ recorded: MailOutboxStore.Recorded) {
        var metadata: Logger.Metadata = ["person": .string(person.personId), "stream": .string(person.stream.key), "notifications": .int(person.items.count)]
        if let contact { metadata["domain"] = .string(String(contact.address.domain)) }
        switch (recorded, resolution) {
        case (.sent, _):
            logger.info("mailed", metadata: metadata)
        case (.retry(let at, let attempts), .temporary(let reason, _)):
            metadata["reason"] = .string(reason)
            metadata["attempts"] = .int(attempts)
            metadata["retryAt"] = .string(ISO8601DateFormatter().string(from: at))
            logger.warning("a mail failed for now; it is tried again later", metadata: metadata)
        case (.dropped(let attempts), .temporary(let reason, _)), (.dropped(let attempts), .permanent(let reason)):
            metadata["reason"] = .string(reason)
            metadata["attempts"] = .int(attempts)
            logger.warning("gave up a mail", metadata: metadata)
        case (.noContact, _):
            logger.info("dropped mail for a person without a contact", metadata: metadata)
        case (.claimLost, _):
            logger.warning(
                "recorded nothing: the claim ran out and another mailer took the person over; the mail may arrive twice", metadata: metadata)
        default:
            break
        }
    }
}

/// The mailer's turn: a round on the loop's session, again at once while batches are full.
struct MailWork: LoopWork {
    struct State: Sendable {}

    let sender: MailSender
    let batchSize: Int

    func begin(_ state: inout State, on session: LeasedSession) async throws {}

    func step(_ state: inout State, on session: LeasedSession) async throws -> LoopStep {
        let sender = sender
        let batchSize = batchSize
        let round = try await session.run { connection in try sender.round(limit: batchSize, on: connection) }
        let transactional = round.transactional.sent + round.transactional.retried + round.transactional.dropped
        return round.decided.entries >= batchSize || round.claimed >= batchSize || transactional >= batchSize ? .more : .wait(nil)
    }
}
