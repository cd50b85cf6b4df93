import Foundation

/// Why a mail, an address or a mail setting was refused. Callers switch on `code`; `description`
/// is a sentence for the log or the operator.
public struct MailError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// An address that is not `local@domain` in the plain ASCII syntax, or too long.
        case invalidAddress
        /// A display name, subject or header value holding CR, LF, NUL or another control
        /// character, or longer than allowed.
        case invalidHeaderValue
        /// A header name that is not printable ASCII without `:`, or one the composer writes itself.
        case invalidHeaderName
        /// An unsubscribe URL that is not `https://` without spaces, `<`, `>` or controls.
        case invalidUnsubscribeURL
        /// A Message-ID that is not `<id@domain>`.
        case invalidMessageID
        /// A setting of `MailConfiguration` (the description names it).
        case invalidSetting
    }

    public var code: Code
    public var description: String

    public init(_ code: Code, _ description: String) {
        self.code = code
        self.description = description
    }
}

/// An e-mail address with an optional display name. Construction validates it, so a value of
/// this type can be written into a header as it is: the address is ASCII `dot-atom@domain`
/// (RFC 5322 section 3.4.1 without quoted local parts or address literals), at most 254 bytes
/// with a local part of at most 64 and domain labels of at most 63; the display name holds no
/// control character (CR, LF and NUL included) and is at most 200 characters.
public struct MailAddress: Sendable, Hashable, CustomStringConvertible {
    public let address: String
    public let displayName: String?

    public init(_ address: String, displayName: String? = nil) throws {
        guard Self.isValid(address) else {
            throw MailError(.invalidAddress, "\"\(Self.printable(address))\" is not an e-mail address of the form name@example.com (ASCII, at most 254 characters).")
        }
        if let displayName {
            try Header.checkText(displayName, what: "The display name of \(address)", limit: 200)
        }
        self.address = address
        self.displayName = displayName.flatMap { $0.isEmpty ? nil : $0 }
    }

    /// Reads `Name <address>` or a bare `address`, the forms a setting such as `INBOX_MAIL_FROM` takes.
    public init(parsing text: String) throws {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if trimmed.hasSuffix(">"), let open = trimmed.lastIndex(of: "<") {
            var name = trimmed[..<open].trimmingCharacters(in: .whitespaces)
            if name.count >= 2 && name.hasPrefix("\"") && name.hasSuffix("\"") { name = String(name.dropFirst().dropLast()) }
            let address = String(trimmed[trimmed.index(after: open)..<trimmed.index(before: trimmed.endIndex)])
            try self.init(address, displayName: name.isEmpty ? nil : name)
        } else {
            try self.init(trimmed)
        }
    }

    /// The part after `@`.
    public var domain: Substring { address[address.index(after: address.lastIndex(of: "@")!)...] }

    public var description: String { displayName.map { "\($0) <\(address)>" } ?? address }

    private static let atext = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+/=?^_`{|}~-".utf8)

    static func isValid(_ address: String) -> Bool {
        let bytes = Array(address.utf8)
        guard bytes.count <= 254, let at = bytes.lastIndex(of: UInt8(ascii: "@")) else { return false }
        let local = bytes[..<at]
        let domain = bytes[(at + 1)...]
        guard (1...64).contains(local.count), !domain.isEmpty else { return false }
        for atom in local.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false) {
            guard !atom.isEmpty, atom.allSatisfy({ atext.contains($0) }) else { return false }
        }
        return isValidDomain(domain)
    }

    static func isValidDomain(_ domain: some BidirectionalCollection<UInt8>) -> Bool {
        guard (1...253).contains(domain.count) else { return false }
        for label in domain.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false) {
            guard (1...63).contains(label.count), label.first != UInt8(ascii: "-"), label.last != UInt8(ascii: "-"),
                label.allSatisfy({ byte in
                    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte | 0x20) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                        || byte == UInt8(ascii: "-")
                })
            else { return false }
        }
        return true
    }

    /// `text` with control characters shown as `\u{..}`, so an error message cannot carry a line break.
    static func printable(_ text: String) -> String {
        String(text.prefix(300).unicodeScalars.map { $0.properties.generalCategory == .control ? "\\u{\(String($0.value, radix: 16))}" : String($0) }.joined())
    }
}

/// A header the caller adds beside the ones the composer writes (`X-Entity-Ref-ID`, `Auto-Submitted`, ...).
public struct MailHeader: Sendable, Hashable {
    public let name: String
    public let value: String

    /// Refused here: the ones the composer writes itself (twice would make the mail ambiguous),
    /// and the ones that would name other recipients or senders than the message's own fields.
    static let reserved: Set<String> = [
        "from", "to", "cc", "bcc", "subject", "date", "message-id", "mime-version", "content-type",
        "content-transfer-encoding", "list-unsubscribe", "list-unsubscribe-post", "sender", "resent-to", "resent-cc", "resent-bcc",
    ]

    public init(_ name: String, _ value: String) throws {
        let bytes = Array(name.utf8)
        guard (1...76).contains(bytes.count), bytes.allSatisfy({ (33...126).contains($0) && $0 != UInt8(ascii: ":") }) else {
            throw MailError(.invalidHeaderName, "\"\(MailAddress.printable(name))\" is not a header name (printable ASCII without \":\", at most 76 characters).")
        }
        guard !Self.reserved.contains(name.lowercased()) else {
            throw MailError(.invalidHeaderName, "The \(name) header is written from the message's own fields; it cannot be added as an extra header.")
        }
        try Header.checkText(value, what: "The value of the \(name) header", limit: 900)
        self.name = name
        self.value = value
    }
}

/// One mail: a sender, one recipient, a subject and the same content as text and as HTML.
///
/// Every field is checked when the message is made, so composing it cannot fail and no field can
/// add a header or a line of its own (CR, LF and NUL are refused in all of them). The
/// Message-ID is `<32 random hex digits@the sender's domain>` unless one is given: an outbox
/// that retries a mail should keep the first one, so that a relay or a mailbox seeing it twice
/// can tell.
public struct MailMessage: Sendable, Hashable {
    public let from: MailAddress
    public let to: MailAddress
    public let subject: String
    public let textBody: String
    public let htmlBody: String
    /// Written as `List-Unsubscribe: <url>` with `List-Unsubscribe-Post: List-Unsubscribe=One-Click` (RFC 8058).
    public let unsubscribeURL: String?
    public let headers: [MailHeader]
    /// With its angle brackets: `<id@domain>`.
    public let messageID: String
    public let date: Date

    public init(
        from: MailAddress, to: MailAddress, subject: String, textBody: String, htmlBody: String, unsubscribeURL: String? = nil,
        headers: [MailHeader] = [], messageID: String? = nil, date: Date = Date()
    ) throws {
        try Header.checkText(subject, what: "The subject", limit: 998)
        if let unsubscribeURL {
            let bytes = Array(unsubscribeURL.utf8)
            guard unsubscribeURL.lowercased().hasPrefix("https://"), bytes.count > 8, bytes.count <= 900,
                bytes.allSatisfy({ (33...126).contains($0) && $0 != UInt8(ascii: "<") && $0 != UInt8(ascii: ">") })
            else {
                throw MailError(.invalidUnsubscribeURL, "The unsubscribe URL must be an https:// URL of at most 900 printable ASCII characters without spaces or angle brackets (RFC 8058).")
            }
        }
        if let messageID {
            guard Self.isValidMessageID(messageID) else {
                throw MailError(.invalidMessageID, "\"\(MailAddress.printable(messageID))\" is not a Message-ID of the form <id@domain>.")
            }
            self.messageID = messageID
        } else {
            self.messageID = Self.newMessageID(domain: from.domain)
        }
        self.from = from
        self.to = to
        self.subject = subject
        self.textBody = textBody
        self.htmlBody = htmlBody
        self.unsubscribeURL = unsubscribeURL
        self.headers = headers
        self.date = date
    }

    /// `<32 random hex digits@domain>`: 128 bits from the system's generator, unique without coordination.
    public static func newMessageID(domain: some StringProtocol) -> String {
        var generator = SystemRandomNumberGenerator()
        let random = (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        return "<\(random)@\(domain)>"
    }

    static func isValidMessageID(_ text: String) -> Bool {
        guard text.utf8.count <= 250, text.hasPrefix("<"), text.hasSuffix(">") else { return false }
        let inner = text.dropFirst().dropLast()
        return MailAddress.isValid(String(inner))
    }

    /// The message as RFC 5322 bytes (see `MailComposer`).
    public func rendered() -> [UInt8] { MailComposer.compose(self) }
}

public enum Header {
    /// Text from data (a saved search's name, written by another tier) made fit for a subject
    /// or header value that `checkText` accepts: each character that could start a header of its
    /// own becomes a space, and past `limit` characters the rest becomes `…`. A mailer that passed
    /// such text on as it is would fail to compose the mail on every try, and lose it.
    public static func fitting(_ text: String, limit: Int = 200) -> String {
        var fitted = String(String.UnicodeScalarView(text.unicodeScalars.map { isRefused($0) ? " " : $0 }))
        if fitted.count > limit { fitted = String(fitted.prefix(max(0, limit - 1))) + "…" }
        return fitted
    }

    static func isRefused(_ scalar: Unicode.Scalar) -> Bool {
        (scalar.properties.generalCategory == .control && scalar != "\t") || scalar == "\u{2028}" || scalar == "\u{2029}"
    }

    /// Refuses text with control characters (CR, LF, NUL, ...; tab is allowed) or over `limit` characters.
    static func checkText(_ text: String, what: String, limit: Int) throws {
        guard text.count <= limit else {
            throw MailError(.invalidHeaderValue, "\(what) is longer than \(limit) characters.")
        }
        if let bad = text.unicodeScalars.first(where: isRefused) {
            let name =
                switch bad {
                case "\r": "a carriage return (CR)"
                case "\n": "a line feed (LF)"
                case "\0": "a NUL character"
                default: "the control character U+\(String(format: "%04X", bad.value))"
                }
            throw MailError(.invalidHeaderValue, "\(what) contains \(name), which could start a header of its own; it was refused.")
        }
    }
}
