import Crypto
import Encodings
import Foundation

/// Writes a `MailMessage` as RFC 5322 bytes.
///
/// Guarantees: every line ends in CRLF and no bare CR or LF is left anywhere; no line is longer
/// than 998 octets (RFC 5322 section 2.1.1), and all but a long Message-ID or unsubscribe URL
/// (single tokens that cannot be folded) keep to 78, because headers that do not fit are folded
/// or written as RFC 2047 encoded-words and both bodies are UTF-8 in quoted-printable; the body
/// is `multipart/alternative` with text/plain first and text/html second (the last part is the
/// preferred one); the boundary cannot occur in a quoted-printable
/// body (it holds `=_`, which quoted-printable never writes).
public enum MailComposer {
    public static func compose(_ message: MailMessage) -> [UInt8] {
        // Derived from the Message-ID, so the same message is always the same bytes (a retry sends
        // what the first try sent).
        let boundary = "=_wristler_\(SHA256.hexDigest("boundary \(message.messageID)").prefix(32))"
        var out: [UInt8] = []
        out.reserveCapacity(message.textBody.utf8.count * 2 + message.htmlBody.utf8.count * 2 + 2048)
        func line(_ text: String) {
            out.append(contentsOf: text.utf8)
            out.append(contentsOf: [13, 10])
        }
        line("From: \(mailbox(message.from, headerLength: 6))")
        line("To: \(mailbox(message.to, headerLength: 4))")
        line("Subject: \(unstructured(message.subject, headerLength: 9))")
        line("Date: \(rfc5322Date(message.date))")
        line("Message-ID: \(message.messageID)")
        line("MIME-Version: 1.0")
        if let url = message.unsubscribeURL {
            line("List-Unsubscribe: \(fold(["<\(url)>"], headerLength: 18))")
            line("List-Unsubscribe-Post: List-Unsubscribe=One-Click")
        }
        for header in message.headers {
            line("\(header.name): \(unstructured(header.value, headerLength: header.name.utf8.count + 2))")
        }
        line("Content-Type: multipart/alternative;")
        line(" boundary=\"\(boundary)\"")
        line("")
        line("This is a multi-part message in MIME format.")
        line("")
        for (type, body) in [("text/plain", message.textBody), ("text/html", message.htmlBody)] {
            line("--\(boundary)")
            line("Content-Type: \(type); charset=utf-8")
            line("Content-Transfer-Encoding: quoted-printable")
            line("")
            out.append(contentsOf: QuotedPrintable.encode(body))
            line("")
        }
        line("--\(boundary)--")
        return out
    }

    /// `"Name" <address>` (quoted ASCII) or `=?UTF-8?B?...?= <address>`; the address alone without a name.
    static func mailbox(_ mailbox: MailAddress, headerLength: Int) -> String {
        guard let name = mailbox.displayName else { return mailbox.address }
        let phrase: [String]
        if name.unicodeScalars.allSatisfy({ (32...126).contains($0.value) }) && !name.contains("=?") {
            let escaped = name.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            let quoted = "\"\(escaped)\""
            phrase = quoted.utf8.count <= 70 ? [quoted] : EncodedWord.encode(name)
        } else {
            phrase = EncodedWord.encode(name)
        }
        return fold(phrase + ["<\(mailbox.address)>"], headerLength: headerLength)
    }

    /// Unstructured text (a subject): as it is when it is printable ASCII and folds into short
    /// lines; otherwise as encoded-words, one per folded line.
    static func unstructured(_ text: String, headerLength: Int) -> String {
        let plain = text.unicodeScalars.allSatisfy { (32...126).contains($0.value) } && !text.contains("=?")
            && !text.hasPrefix(" ") && !text.hasSuffix(" ") && !text.contains("  ")
        if plain {
            let pieces = words(text)
            if pieces.allSatisfy({ $0.utf8.count <= 70 }) { return fold(pieces, headerLength: headerLength) }
        }
        return fold(EncodedWord.encode(text), headerLength: headerLength)
    }

    private static func words(_ text: String) -> [String] { text.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }

    /// Joins `pieces` with spaces, breaking the line (CRLF and a space) before a piece that would
    /// take it past 78 octets. Each piece must fit on a line of its own. The header's own
    /// `Name: ` is `headerLength` octets and ends in a space, which becomes the folding space
    /// when the first piece must go to the next line.
    static func fold(_ pieces: [String], headerLength: Int) -> String {
        var result = ""
        var length = headerLength
        for (index, piece) in pieces.enumerated() {
            let size = piece.utf8.count
            if index == 0 && length + size > 78 && length > 1 {
                // After a long header name: the first piece goes on a line of its own.
                result += "\r\n "
                length = 1
            } else if index > 0 {
                if length + 1 + size > 78 {
                    result += "\r\n "
                    length = 1
                } else {
                    result += " "
                    length += 1
                }
            }
            result += piece
            length += size
        }
        return result
    }

    /// `Tue, 01 Dec 2026 01:48:01 +0000` (RFC 5322 section 3.3), always in UTC.
    public static func rfc5322Date(_ date: Date) -> String {
        UTCTime.format(date, "%a, %d %b %Y %H:%M:%S +0000")
    }
}

/// RFC 2047 encoded-words in UTF-8 and base64 (`=?UTF-8?B?...?=`).
enum EncodedWord {
    /// `text` as encoded-words of at most 75 characters each (RFC 2047 section 2), split between
    /// characters so each word decodes on its own. A decoder joins adjacent words without the
    /// folding white space between them.
    static func encode(_ text: String) -> [String] {
        // 39 bytes of UTF-8 are 52 characters of base64, a word of 64 characters: it fits beside
        // "Subject: " or "From: " within 78, and under RFC 2047's 75 everywhere.
        let limit = 39
        var words: [String] = []
        var chunk: [UInt8] = []
        for character in text {
            let bytes = Array(String(character).utf8)
            if !chunk.isEmpty && chunk.count + bytes.count > limit {
                words.append(word(chunk))
                chunk = []
            }
            // A single character of more than 45 bytes (a long grapheme cluster) is split by scalars.
            if bytes.count > limit {
                for scalar in character.unicodeScalars {
                    let scalarBytes = Array(String(scalar).utf8)
                    if chunk.count + scalarBytes.count > limit {
                        words.append(word(chunk))
                        chunk = []
                    }
                    chunk += scalarBytes
                }
            } else {
                chunk += bytes
            }
        }
        if !chunk.isEmpty || words.isEmpty { words.append(word(chunk)) }
        return words
    }

    private static func word(_ bytes: [UInt8]) -> String { "=?UTF-8?B?\(Data(bytes).base64EncodedString())?=" }
}

/// Quoted-printable (RFC 2045 section 6.7) of UTF-8 text with CRLF line breaks.
enum QuotedPrintable {
    /// `text` with its line breaks (CRLF, LF or CR alone) written as CRLF, and every line cut
    /// into pieces of at most 76 characters with soft line breaks (`=` CRLF). Bytes other than
    /// printable ASCII, `=` itself, and a space or tab at the end of a line are written `=XX`.
    /// The result ends without a line break.
    static func encode(_ text: String) -> [UInt8] {
        let hex = Array("0123456789ABCDEF".utf8)
        var out: [UInt8] = []
        let bytes = Array(text.utf8)
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var index = 0
        while index < bytes.count {
            if bytes[index] == 13 || bytes[index] == 10 {
                lines.append(bytes[start..<index])
                if bytes[index] == 13 && index + 1 < bytes.count && bytes[index + 1] == 10 { index += 1 }
                start = index + 1
            }
            index += 1
        }
        lines.append(bytes[start..<bytes.count])
        for (number, line) in lines.enumerated() {
            if number > 0 { out += [13, 10] }
            var length = 0
            for position in line.indices {
                let byte = line[position]
                let last = position == line.index(before: line.endIndex)
                let literal = (byte >= 33 && byte <= 126 && byte != UInt8(ascii: "=")) || ((byte == 32 || byte == 9) && !last)
                // A leading "." is written =2E so no relay's dot-stuffing can change the line.
                var escaped = !literal || (length == 0 && byte == UInt8(ascii: "."))
                // Room for the soft break's "=" unless this is the line's last piece.
                let room = last ? 76 : 75
                if length + (escaped ? 3 : 1) > room {
                    out += [UInt8(ascii: "="), 13, 10]
                    length = 0
                    if byte == UInt8(ascii: ".") { escaped = true }
                }
                if escaped {
                    out.append(UInt8(ascii: "="))
                    out.append(hex[Int(byte >> 4)])
                    out.append(hex[Int(byte & 15)])
                    length += 3
                } else {
                    out.append(byte)
                    length += 1
                }
            }
        }
        return out
    }
}
