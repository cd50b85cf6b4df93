import Foundation
import InboxDomain
import Lifecycle
import Mail
import PostgresClient

/// Mails that are not notifications (`mail_transactional`): the verification mail of an address.
/// Written by an API node with its link; the mailer renders each in its language and hands it to
/// the relay, at most once per `claimFor` (a lease), and deletes it once the relay took it or
/// refused it for good, or when it expired unsent. A temporary failure tries again after a backoff
/// (30 s, doubling, at most an hour).
public enum TransactionalMail {
    public struct Due: Sendable {
        public var id: Int64
        public var kind: String
        public var recipient: String
        public var language: Language
        public var link: String
        public var attempts: Int
        public var expiresAt: Date
    }

    /// What a round did with the mails it took.
    public struct Sent: Sendable, Equatable {
        public var sent = 0
        public var retried = 0
        public var dropped = 0
    }

    /// Queues the verification mail of `recipient` for `personId`, with its `link`, in the caller's
    /// transaction; the mailers are woken at its commit. Earlier ones waiting for the person go:
    /// their links are dead.
    public static func queueVerification(
        personId: String, recipient: String, language: Language, link: String, expiresAt: Date, on connection: PostgresConnection
    ) throws {
        _ = try connection.query("DELETE FROM mail_transactional WHERE person_id = $1 AND kind = 'email_verification'", personId)
        _ = try connection.query(
            """
            INSERT INTO mail_transactional (person_id, kind, recipient, language, link, expires_at)
            VALUES ($1, 'email_verification', $2, $3, $4, $5)
            """, personId, recipient, language.rawValue, link, expiresAt)
        _ = try connection.query("SELECT pg_notify('inbox_outbox', '')")
    }

    /// Takes up to `limit` due mails, leased for `claimFor`.
    static func take(limit: Int, claimFor: TimeInterval, now: Date, on connection: PostgresConnection) throws -> [Due] {
        try connection.query(
            """
            UPDATE mail_transactional t SET attempts = attempts + 1, next_attempt_at = $1::timestamptz + $3 * interval '1 second'
            FROM (SELECT id FROM mail_transactional WHERE next_attempt_at <= $1 ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED) d
            WHERE t.id = d.id
            RETURNING t.id, t.kind, t.recipient, t.language, t.link, t.attempts, t.expires_at
            """, now, limit, claimFor
        ).map {
            Due(
                id: try $0.decode(Int64.self, "id"), kind: try $0.decode(String.self, "kind"), recipient: try $0.decode(String.self, "recipient"),
                language: Language(rawValue: try $0.decode(String.self, "language")) ?? .en, link: try $0.decode(String.self, "link"),
                attempts: try $0.decode(Int.self, "attempts"), expiresAt: try $0.decode(Date.self, "expires_at"))
        }
    }

    /// The verification mail: the link, how long it lives, and that nothing happens without it.
    public static func verificationMail(to recipient: MailAddress, language: Language, link: String, from: MailAddress, date: Date) throws -> MailMessage {
        let words = Texts.verification[Language.allCases.firstIndex(of: language) ?? 0]
        let text = "\(words.intro)\n\n\(link)\n\n\(words.outro)\n"
        let html = """
            <!doctype html>
            <html lang="\(language.rawValue)"><head><meta charset="utf-8"><title>\(MailRenderer.escape(words.subject))</title></head><body>
            <p>\(MailRenderer.escape(words.intro))</p>
            <p><a href="\(MailRenderer.escape(link))">\(MailRenderer.escape(words.action))</a></p>
            <p><small>\(MailRenderer.escape(words.outro))</small></p>
            </body></html>

            """
        return try MailMessage(from: from, to: recipient, subject: words.subject, textBody: text, htmlBody: html, date: date)
    }

    enum Texts {
        struct Words {
            var subject: String
            var intro: String
            var action: String
            var outro: String
        }

        /// In the order of `Language.allCases`: en, nl, de, fr.
        static let verification = [
            Words(
                subject: "Wristler: confirm your e-mail address", intro: "Open this link to confirm that this is your address on Wristler:",
                action: "Confirm my address", outro: "The link works once, for 24 hours. If you did not ask for this, ignore this mail: nothing changes."),
            Words(
                subject: "Wristler: bevestig je e-mailadres", intro: "Open deze link om te bevestigen dat dit je adres op Wristler is:",
                action: "Mijn adres bevestigen", outro: "De link werkt één keer, 24 uur lang. Heb je hier niet om gevraagd? Negeer deze mail dan: er verandert niets."),
            Words(
                subject: "Wristler: bestätige deine E-Mail-Adresse", intro: "Öffne diesen Link, um zu bestätigen, dass dies deine Adresse bei Wristler ist:",
                action: "Meine Adresse bestätigen",
                outro: "Der Link funktioniert einmal, 24 Stunden lang. Wenn du das nicht angefordert hast, ignoriere diese Mail: Es ändert sich nichts."),
            Words(
                subject: "Wristler : confirmez votre adresse e-mail", intro: "Ouvrez ce lien pour confirmer que c'est votre adresse sur Wristler :",
                action: "Confirmer mon adresse",
                outro: "Le lien fonctionne une fois, pendant 24 heures. Si vous ne l'avez pas demandé, ignorez ce mail : rien ne change."),
        ]
    }
}

extension MailSender {
    /// Sends up to `limit` due transactional mails on `connection`.
    public func sendTransactional(limit: Int, on connection: PostgresConnection) throws -> TransactionalMail.Sent {
        var outcome = TransactionalMail.Sent()
        let due = try TransactionalMail.take(limit: limit, claimFor: store.settings.claimFor.inSeconds, now: now(), on: connection)
        for mail in due {
            var metadata: Logger.Metadata = ["kind": .string(mail.kind), "attempts": .int(mail.attempts)]
            guard mail.expiresAt > now(), let recipient = try? MailAddress(mail.recipient) else {
                _ = try connection.query("DELETE FROM mail_transactional WHERE id = $1", mail.id)
                outcome.dropped += 1
                logger.warning("dropped a mail that expired unsent or has no address", metadata: metadata)
                continue
            }
            metadata["domain"] = "\(recipient.domain)"
            let message = try TransactionalMail.verificationMail(to: recipient, language: mail.language, link: mail.link, from: from, date: now())
            switch transport.send(message) {
            case .sent:
                _ = try connection.query("DELETE FROM mail_transactional WHERE id = $1", mail.id)
                outcome.sent += 1
                logger.info("mailed", metadata: metadata)
            case .permanent(let code, let text):
                _ = try connection.query("DELETE FROM mail_transactional WHERE id = $1", mail.id)
                outcome.dropped += 1
                metadata["reason"] = "\(code) \(text)"
                logger.warning("gave up a mail", metadata: metadata)
            case .temporary(let code, let text):
                let backoff = min(30 * pow(2, Double(mail.attempts - 1)), 3600)
                _ = try connection.query(
                    "UPDATE mail_transactional SET next_attempt_at = $2 WHERE id = $1", mail.id, now().addingTimeInterval(backoff))
                outcome.retried += 1
                metadata["reason"] = "\(code) \(text)"
                logger.warning("a mail failed for now; it is tried again later", metadata: metadata)
            }
        }
        return outcome
    }
}
