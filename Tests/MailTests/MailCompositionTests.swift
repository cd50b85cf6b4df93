import Foundation
import Testing

import MailTesting
@testable import Mail

@Suite struct MailCompositionTests {
    static let languages: [(code: String, subject: String, text: String, html: String, name: String)] = [
        ("en", "Your watch was sold – size 42", "Hello Anna,\nyour watch was sold for €1,250.\n", "<p>Your watch was <b>sold</b> for €1,250.</p>", "Anna O’Brien"),
        ("nl", "Uw horloge is verkocht – maat 42, één koper", "Hallo Anna,\nuw horloge is verkocht voor € 1.250.\n", "<p>Uw horloge is <b>verkocht</b>: één koper.</p>", "Anna van der Berg-IJsselmeer"),
        ("de", "Ihre Uhr wurde verkauft – Größe", "Hallo Anna,\nIhre Uhr wurde für 1.250 € verkauft. Schöne Grüße!\n", "<p>Ihre Uhr wurde <b>verkauft</b>. Größe: 42</p>", "Jürgen Größmann"),
        ("fr", "Votre montre a été vendue", "Bonjour Anna,\nvotre montre a été vendue à 1 250 €. À bientôt !\n", "<p>Votre montre a été <b>vendue</b> — félicitations.</p>", "Hélène Dupré"),
    ]

    private func lines(_ bytes: [UInt8]) -> [ArraySlice<UInt8>] {
        var result: [ArraySlice<UInt8>] = []
        var start = 0
        var index = 0
        while index + 1 < bytes.count {
            if bytes[index] == 13 && bytes[index + 1] == 10 {
                result.append(bytes[start..<index])
                start = index + 2
                index += 2
            } else {
                index += 1
            }
        }
        result.append(bytes[start...])
        return result
    }

    @Test(arguments: 0..<4)
    func aMailInEachLanguageDecodesBackWithPythonsEmailPackage(_ index: Int) throws {
        let language = Self.languages[index]
        let message = try MailMessage(
            from: MailAddress("notifications@wristler.eu", displayName: "Wristler – Benachrichtigungen"),
            to: MailAddress("anna@example.com", displayName: language.name), subject: language.subject, textBody: language.text,
            htmlBody: language.html, unsubscribeURL: "https://api.wristler.eu/v1/unsubscribe?token=v1.abc.def",
            headers: [MailHeader("Content-Language", language.code)])
        let parsed = try ParsedMail.parse(message.rendered())
        #expect(parsed.defects == [])
        #expect(parsed.subject == language.subject)
        #expect(parsed.fromName == "Wristler – Benachrichtigungen")
        #expect(parsed.fromAddress == "notifications@wristler.eu")
        #expect(parsed.toName == language.name)
        #expect(parsed.toAddress == "anna@example.com")
        #expect(parsed.messageId == message.messageID)
        #expect(parsed.mimeVersion == "1.0")
        #expect(parsed.contentType == "multipart/alternative")
        #expect(parsed.parts.map(\.contentType) == ["text/plain", "text/html"])
        #expect(parsed.parts.map(\.charset) == ["utf-8", "utf-8"])
        #expect(parsed.parts.map(\.transferEncoding) == ["quoted-printable", "quoted-printable"])
        // Python's reader writes line breaks as \n; the mail carried them as CRLF.
        #expect(parsed.parts.first?.content == language.text)
        #expect(parsed.parts.last?.content.trimmingCharacters(in: .newlines) == language.html)
        #expect(parsed.listUnsubscribe == "<https://api.wristler.eu/v1/unsubscribe?token=v1.abc.def>")
        #expect(parsed.listUnsubscribePost == "List-Unsubscribe=One-Click")
        #expect(parsed.date == message.date.timeIntervalSince1970.rounded(.down))
        #expect(parsed.bareLineFeeds == 0)
        #expect(parsed.longestLine <= 78)
    }

    @Test func everyLineEndsInCRLFAndLongNonASCIILinesAreCutBelow78Octets() throws {
        // A 5,000-character line of two-byte characters, a line of spaces, a line that starts with
        // a dot, a trailing space and a tab, and every kind of line break.
        let long = String(repeating: "Größe ", count: 800) + String(repeating: "é", count: 900)
        let text = long + "\r\n.hidden line\n" + "ends in a space \rends in a tab\t\n" + String(repeating: " ", count: 200) + "\nlast"
        let subject = String(repeating: "Ihre Uhr wurde verkauft – Größe 42, ", count: 20)
        let message = try MailMessage(
            from: MailAddress("notifications@wristler.eu"), to: MailAddress("anna@example.com"), subject: subject, textBody: text,
            htmlBody: "<p>" + long + "</p>")
        let bytes = message.rendered()
        let all = lines(bytes)
        #expect(all.allSatisfy { $0.count <= 78 }, "longest line: \(all.map(\.count).max() ?? 0)")
        #expect(all.allSatisfy { !$0.contains(13) && !$0.contains(10) })
        #expect(bytes.allSatisfy { $0 < 128 }, "a quoted-printable mail is 7-bit")
        #expect(!all.contains { $0.first == UInt8(ascii: ".") }, "no line starts with a dot a relay might strip")
        let parsed = try ParsedMail.parse(bytes)
        #expect(parsed.defects == [])
        #expect(parsed.subject == subject)
        #expect(parsed.parts.first?.content == text.replacingOccurrences(of: "\r\n", with: "\n").replacingOccurrences(of: "\r", with: "\n"))
        #expect(parsed.parts.last?.content == "<p>" + long + "</p>")
    }

    @Test func aShortASCIISubjectAndNameAreWrittenAsTheyAre() throws {
        let message = try MailMessage(
            from: MailAddress("notifications@wristler.eu", displayName: "Wristler \"Inbox\""), to: MailAddress("anna@example.com"),
            subject: "Your watch was sold", textBody: "a", htmlBody: "<p>a</p>")
        let text = String(decoding: message.rendered(), as: UTF8.self)
        #expect(text.hasPrefix("From: \"Wristler \\\"Inbox\\\"\" <notifications@wristler.eu>\r\nTo: anna@example.com\r\nSubject: Your watch was sold\r\n"))
        #expect(text.contains("\r\nMIME-Version: 1.0\r\n"))
        #expect(!text.contains("List-Unsubscribe"), "no unsubscribe URL, no List-Unsubscribe headers")
        let parsed = try ParsedMail.parse(message.rendered())
        #expect(parsed.fromName == "Wristler \"Inbox\"")
    }

    @Test func aSubjectThatLooksLikeAnEncodedWordIsEncodedItself() throws {
        let subject = "=?UTF-8?B?SGFja2Vk?= stays literal"
        let message = try MailMessage(from: MailAddress("a@wristler.eu"), to: MailAddress("b@example.com"), subject: subject, textBody: "", htmlBody: "")
        #expect(try ParsedMail.parse(message.rendered()).subject == subject)
    }

    @Test func theDateIsRFC5322InUTC() {
        #expect(MailComposer.rfc5322Date(Date(timeIntervalSince1970: 1_796_089_681)) == "Tue, 01 Dec 2026 01:48:01 +0000")
        #expect(MailComposer.rfc5322Date(Date(timeIntervalSince1970: 0)) == "Thu, 01 Jan 1970 00:00:00 +0000")
    }

    @Test func messageIDsAreUniqueAndOnTheSendersDomain() throws {
        let ids = try (0..<1000).map { _ in
            try MailMessage(from: MailAddress("notifications@wristler.eu"), to: MailAddress("b@example.com"), subject: "s", textBody: "", htmlBody: "").messageID
        }
        #expect(Set(ids).count == 1000)
        #expect(ids.allSatisfy { $0.hasPrefix("<") && $0.hasSuffix("@wristler.eu>") && $0.count == 1 + 32 + 1 + 11 + 1 })
        let kept = try MailMessage(
            from: MailAddress("a@wristler.eu"), to: MailAddress("b@example.com"), subject: "s", textBody: "", htmlBody: "", messageID: "<retry-1@wristler.eu>")
        #expect(kept.messageID == "<retry-1@wristler.eu>")
        #expect(throws: MailError.self) {
            try MailMessage(from: MailAddress("a@wristler.eu"), to: MailAddress("b@example.com"), subject: "s", textBody: "", htmlBody: "", messageID: "<x@y>\r\nBcc: z@z")
        }
    }

    // MARK: - Header injection

    private func code(_ body: () throws -> Any) -> MailError.Code? {
        do {
            _ = try body()
            return nil
        } catch let error as MailError {
            #expect(!error.description.contains("\r") && !error.description.contains("\n"), "an error message is one line: \(error.description)")
            return error.code
        } catch {
            return nil
        }
    }

    @Test(arguments: ["\r", "\n", "\r\n", "\0", "\u{0B}", "\u{85}", "\u{2028}"])
    func controlCharactersInAnyHeaderFieldAreRefused(_ control: String) throws {
        let from = try MailAddress("a@wristler.eu")
        let to = try MailAddress("b@example.com")
        #expect(code { try MailAddress("b@example.com", displayName: "Anna\(control)Bcc: evil@example.com") } == .invalidHeaderValue)
        #expect(code { try MailAddress("b@example.com\(control)") } == .invalidAddress)
        #expect(code { try MailAddress("b\(control)@example.com") } == .invalidAddress)
        #expect(code { try MailMessage(from: from, to: to, subject: "Hi\(control)Bcc: evil@example.com", textBody: "", htmlBody: "") } == .invalidHeaderValue)
        #expect(code { try MailHeader("X-Ref", "1\(control)Bcc: evil@example.com") } == .invalidHeaderValue)
        #expect(code { try MailHeader("X-Ref\(control)", "1") } == .invalidHeaderName)
        #expect(
            code { try MailMessage(from: from, to: to, subject: "s", textBody: "", htmlBody: "", unsubscribeURL: "https://x.eu/u\(control)Bcc: e@e.eu") }
                == .invalidUnsubscribeURL)
    }

    @Test func headersTheComposerWritesCannotBeAddedAgain() {
        for name in ["Bcc", "to", "Subject", "Content-Type", "List-Unsubscribe", "MIME-Version"] {
            #expect(code { try MailHeader(name, "x") } == .invalidHeaderName, "\(name)")
        }
        #expect(code { try MailHeader("Bad Name", "x") } == .invalidHeaderName)
        #expect(code { try MailHeader("X-Colon:", "x") } == .invalidHeaderName)
        #expect(code { try MailHeader("X-Fine", "x") } == nil)
    }

    @Test func addressesAreCheckedForSyntaxAndLength() {
        let valid = ["a@b.c", "anna.muller+watch@example.co.uk", "x_y-z@sub-domain.example", "o'brien@example.ie", "inbox@localhost"]
        for address in valid { #expect(MailAddress.isValid(address), "\(address)") }
        let invalid = [
            "", "@example.com", "anna@", "anna", "anna@@example.com", "an na@example.com", "anna@exa mple.com", ".anna@example.com", "anna.@example.com",
            "an..na@example.com", "anna@-example.com", "anna@example-.com", "anna@example..com", "anna@example.com.", "<anna@example.com>",
            "anna@example.com>", "\"anna\"@example.com", "anna@[127.0.0.1]", "jürgen@example.de", "anna@exämple.de",
            String(repeating: "a", count: 65) + "@example.com", "a@" + String(repeating: "b", count: 64) + ".com",
            "a@" + Array(repeating: String(repeating: "b", count: 60), count: 5).joined(separator: ".") + ".com",
        ]
        for address in invalid { #expect(!MailAddress.isValid(address), "\(address)") }
        #expect(code { try MailAddress("anna@example.com", displayName: String(repeating: "x", count: 201)) } == .invalidHeaderValue)
    }

    @Test func theUnsubscribeURLMustBeHTTPS() throws {
        let from = try MailAddress("a@wristler.eu")
        let to = try MailAddress("b@example.com")
        for url in ["http://x.eu/u", "mailto:u@x.eu", "https://", "https://x.eu/a b", "https://x.eu/<a>", "https://x.eu/ü"] {
            #expect(code { try MailMessage(from: from, to: to, subject: "s", textBody: "", htmlBody: "", unsubscribeURL: url) } == .invalidUnsubscribeURL, "\(url)")
        }
    }

    @Test func addressesAreReadFromSettingForms() throws {
        let named = try MailAddress(parsing: "Wristler <notifications@wristler.eu>")
        #expect(named.displayName == "Wristler" && named.address == "notifications@wristler.eu")
        let quoted = try MailAddress(parsing: "\"Wristler Inbox\" <notifications@wristler.eu>")
        #expect(quoted.displayName == "Wristler Inbox")
        let bare = try MailAddress(parsing: " notifications@wristler.eu ")
        #expect(bare.displayName == nil && bare.address == "notifications@wristler.eu")
        #expect(code { try MailAddress(parsing: "Wristler <notifications@wristler.eu") } == .invalidAddress)
    }

    @Test func quotedPrintableOfKnownInputs() {
        func qp(_ text: String) -> String { String(decoding: QuotedPrintable.encode(text), as: UTF8.self) }
        #expect(qp("a=b") == "a=3Db")
        #expect(qp("Größe") == "Gr=C3=B6=C3=9Fe")
        #expect(qp("end \nnext\t") == "end=20\r\nnext=09")
        #expect(qp(".dot") == "=2Edot")
        #expect(qp(String(repeating: "a", count: 80)) == String(repeating: "a", count: 75) + "=\r\n" + String(repeating: "a", count: 5))
        // An escape is never split by a soft break.
        let split = qp(String(repeating: "a", count: 74) + "é")
        #expect(split == String(repeating: "a", count: 74) + "=\r\n=C3=A9")
    }

    @Test func encodedWordsStayUnder76CharactersAndDoNotSplitCharacters() {
        let words = EncodedWord.encode(String(repeating: "Größe – ", count: 30) + "👩‍👩‍👧‍👦")
        #expect(words.allSatisfy { $0.count <= 75 && $0.hasPrefix("=?UTF-8?B?") && $0.hasSuffix("?=") })
        for word in words {
            let base64 = String(word.dropFirst(10).dropLast(2))
            let bytes = Data(base64Encoded: base64)
            #expect(bytes.flatMap { String(data: $0, encoding: .utf8) } != nil, "\(word) is whole UTF-8")
        }
    }
}
