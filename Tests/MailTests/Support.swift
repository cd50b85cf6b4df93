import Foundation
import Mail
import MailTesting

extension MailMessage {
    /// A mail in one of the contact languages, with an unsubscribe link.
    static func sample(to: String = "anna@example.com", subject: String = "Ihre Uhr wurde verkauft – Größe 42", language: String = "de") throws -> MailMessage {
        try MailMessage(
            from: MailAddress("notifications@wristler.eu", displayName: "Wristler"), to: MailAddress(to, displayName: "Anna Müller"),
            subject: subject, textBody: "Hallo Anna,\nIhre Uhr wurde verkauft.\n", htmlBody: "<p>Hallo Anna,</p><p>Ihre Uhr wurde <b>verkauft</b>.</p>",
            unsubscribeURL: "https://api.wristler.eu/v1/unsubscribe?token=v1.abc.def", headers: [MailHeader("Content-Language", language)])
    }
}
