/// What became of one mail handed to a transport.
///
/// A transport never throws: every failure is an outcome the outbox acts on. `code` is the SMTP
/// reply code, 0 when there was none (no connection, TLS refused, a timeout, a folder that cannot
/// be written). See docs/mail.md for the table of what is which.
public enum MailOutcome: Sendable, Equatable, CustomStringConvertible {
    /// Accepted by the relay (250 after the data) or written to the folder.
    case sent
    /// Try again later: a 4xx reply, a connection or TLS failure, a timeout, and also refused
    /// credentials or a relay without STARTTLS (a configuration problem: dropping the mail would
    /// lose it, and it goes out once the setting is fixed). The outbox retries with backoff and logs.
    case temporary(code: Int, text: String)
    /// Do not try again: a 5xx reply about this mail (550 no such user, 552 too large, 554 ...).
    /// The outbox drops the mail and counts it.
    case permanent(code: Int, text: String)

    public var description: String {
        switch self {
        case .sent: "sent"
        case .temporary(let code, let text): "temporary failure \(code): \(text)"
        case .permanent(let code, let text): "permanent failure \(code): \(text)"
        }
    }
}

/// Sends mails. `send` blocks the calling thread until the mail is accepted, refused or given up
/// (at most the transport's total timeout), so call it from a blocking thread, not from a task
/// on the cooperative pool. Implementations are safe to call from many threads at once.
public protocol MailTransport: Sendable {
    func send(_ message: MailMessage) -> MailOutcome
}
