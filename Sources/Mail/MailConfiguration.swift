import Foundation

/// How the tier sends mail, read from environment-style settings. A bad value is refused with a
/// sentence naming the setting.
///
/// | Setting | Meaning |
/// |---|---|
/// | `INBOX_SMTP_URL` | `smtp://host:587` (STARTTLS) or `smtps://host:465`; unset: mails go to `INBOX_MAIL_FOLDER` |
/// | `INBOX_SMTP_USERNAME`, `INBOX_SMTP_PASSWORD` | AUTH credentials, both or neither |
/// | `INBOX_SMTP_CA_FILE` | PEM certificates trusted instead of the system's |
/// | `INBOX_SMTP_ALLOW_PLAIN` | `1`: an smtp:// relay without STARTTLS may be used in plain text (a local relay); default `0` |
/// | `INBOX_SMTP_CONNECT_TIMEOUT_SECONDS`, `INBOX_SMTP_TIMEOUT_SECONDS` | default 10 and 60 |
/// | `INBOX_MAIL_FROM` | `Name <address>` or `address`; required with a relay |
/// | `INBOX_MAIL_FOLDER` | where `.eml` files go without a relay; default `<INBOX_DATA_DIR>/mail` |
/// | `INBOX_UNSUBSCRIBE_KEYS` | `<version>:<base64url secret>,...` (first signs); unset: no unsubscribe links |
public struct MailConfiguration: Sendable {
    public enum Delivery: Sendable, Equatable {
        case smtp(SMTPTransport.Settings)
        case folder(String)
    }

    public var delivery: Delivery
    public var from: MailAddress
    public var unsubscribe: UnsubscribeLink?

    /// The sender used without a relay (files in a folder are never delivered anywhere).
    public static let developmentSender = try! MailAddress("inbox@localhost", displayName: "Wristler")

    public init(delivery: Delivery, from: MailAddress, unsubscribe: UnsubscribeLink? = nil) {
        self.delivery = delivery
        self.from = from
        self.unsubscribe = unsubscribe
    }

    public static func from(environment: [String: String]) throws -> MailConfiguration {
        func value(_ name: String) -> String? {
            guard let text = environment[name]?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
            return text
        }
        func flag(_ name: String) throws -> Bool {
            switch value(name) {
            case nil, "0": return false
            case "1": return true
            case let text?: throw MailError(.invalidSetting, "\(name) must be 0 or 1, not \"\(MailAddress.printable(text))\".")
            }
        }
        func seconds(_ name: String, default fallback: Int) throws -> Duration {
            guard let text = value(name) else { return .seconds(fallback) }
            guard let number = Int(text), (1...3600).contains(number) else {
                throw MailError(.invalidSetting, "\(name) must be a whole number of seconds from 1 to 3600, not \"\(MailAddress.printable(text))\".")
            }
            return .seconds(number)
        }

        var from = developmentSender
        if let text = value("INBOX_MAIL_FROM") {
            do {
                from = try MailAddress(parsing: text)
            } catch let error as MailError {
                throw MailError(.invalidSetting, "INBOX_MAIL_FROM must be an address such as \"Wristler <notifications@example.com>\": \(error.description)")
            }
        }
        let unsubscribe = try value("INBOX_UNSUBSCRIBE_KEYS").map { try UnsubscribeLink(setting: $0) }

        guard let url = value("INBOX_SMTP_URL") else {
            for name in ["INBOX_SMTP_USERNAME", "INBOX_SMTP_PASSWORD", "INBOX_SMTP_CA_FILE"] where value(name) != nil {
                throw MailError(.invalidSetting, "\(name) is set but INBOX_SMTP_URL is not: without a relay mails are written to INBOX_MAIL_FOLDER.")
            }
            let folder = value("INBOX_MAIL_FOLDER") ?? ((value("INBOX_DATA_DIR") ?? ".inbox") as NSString).appendingPathComponent("mail")
            return MailConfiguration(delivery: .folder(folder), from: from, unsubscribe: unsubscribe)
        }
        guard SMTPTransport.isSupported(url) else {
            throw MailError(
                .invalidSetting,
                "INBOX_SMTP_URL must be smtp://host:port (STARTTLS) or smtps://host:port (TLS) without credentials in it (use INBOX_SMTP_USERNAME and INBOX_SMTP_PASSWORD), not \"\(MailAddress.printable(url))\".")
        }
        guard value("INBOX_MAIL_FROM") != nil else {
            throw MailError(.invalidSetting, "INBOX_MAIL_FROM must be set when INBOX_SMTP_URL is: the relay needs a sender it accepts.")
        }
        let username = value("INBOX_SMTP_USERNAME")
        let password = environment["INBOX_SMTP_PASSWORD"].flatMap { $0.isEmpty ? nil : $0 }
        guard (username == nil) == (password == nil) else {
            throw MailError(.invalidSetting, "INBOX_SMTP_USERNAME and INBOX_SMTP_PASSWORD must be set together or not at all.")
        }
        let caFile = value("INBOX_SMTP_CA_FILE")
        if let caFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw MailError(.invalidSetting, "INBOX_SMTP_CA_FILE names \(caFile), which is not a readable file.")
        }
        let settings = SMTPTransport.Settings(
            url: url, username: username, password: password, caFile: caFile, allowPlain: try flag("INBOX_SMTP_ALLOW_PLAIN"),
            connectTimeout: try seconds("INBOX_SMTP_CONNECT_TIMEOUT_SECONDS", default: 10), totalTimeout: try seconds("INBOX_SMTP_TIMEOUT_SECONDS", default: 60))
        return MailConfiguration(delivery: .smtp(settings), from: from, unsubscribe: unsubscribe)
    }

    /// The transport this configuration names.
    public func makeTransport() throws -> any MailTransport {
        switch delivery {
        case .smtp(let settings): try SMTPTransport(settings: settings)
        case .folder(let folder): FolderTransport(folder: folder)
        }
    }
}
