import Encodings

/// An `application/x-www-form-urlencoded` body (the token endpoint's, RFC 6749 §3.2, and Apple's
/// `form_post`), read strictly: every field a client controls is bounded and anything that is
/// not plainly a form is refused with a sentence naming it, never guessed at.
///
/// - at most `maximumFields` fields, names of at most 64 bytes, values of at most their field's
///   bound (`limits`, else `defaultLimit`);
/// - a field given twice is refused (RFC 6749 §3.2: parameters "MUST NOT be included more than once");
/// - a malformed escape (`%4`, `%zz`), bytes that are not UTF-8, U+0000 or another control
///   character (tab, line breaks) in a value are refused;
/// - a field with an empty value is one that was not sent (RFC 6749 §3.1).
public struct FormBody: Sendable {
    public private(set) var fields: [String: String] = [:]

    public static let maximumFields = 32
    public static let maximumNameBytes = 64
    public static let defaultLimit = 1024

    public struct Refusal: Error, Sendable, CustomStringConvertible {
        public var description: String
    }

    public init(fields: [String: String] = [:]) { self.fields = fields }

    /// Reads `body`; `limits` bounds the values of the named fields in bytes (after decoding).
    public init(_ body: [UInt8], limits: [String: Int] = [:]) throws(Refusal) {
        if body.isEmpty { return }
        var count = 0
        for pair in body.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            count += 1
            guard count <= Self.maximumFields else { throw Refusal(description: "The form has more than \(Self.maximumFields) fields.") }
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            let name = try Self.decode(parts[0], field: nil, limit: Self.maximumNameBytes)
            guard !name.isEmpty else { throw Refusal(description: "The form has a field without a name.") }
            let value = parts.count == 2 ? try Self.decode(parts[1], field: name, limit: limits[name] ?? Self.defaultLimit) : ""
            guard fields[name] == nil else { throw Refusal(description: "\(name) is given more than once.") }
            // A repeated empty field is still repeated: remember it was seen.
            fields[name] = value
        }
        fields = fields.filter { !$0.value.isEmpty }
    }

    public subscript(name: String) -> String? { fields[name] }

    /// Percent-decoding with `+` as a space, refusing what is not a clean UTF-8 value.
    static func decode(_ bytes: ArraySlice<UInt8>, field: String?, limit: Int) throws(Refusal) -> String {
        let what = field.map { "The value of \($0)" } ?? "A field's name"
        // An escape shrinks 3 bytes to 1: more than 3 × limit encoded bytes cannot fit.
        guard bytes.count <= 3 * limit else { throw Refusal(description: "\(what) is longer than \(limit) bytes.") }
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.endIndex,
                    let high = Hex.value(ofDigit: bytes[index + 1]), let low = Hex.value(ofDigit: bytes[index + 2])
                else { throw Refusal(description: "\(what) has a malformed percent escape.") }
                decoded.append(high << 4 | low)
                index += 3
            } else {
                decoded.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
                index += 1
            }
        }
        guard decoded.count <= limit else { throw Refusal(description: "\(what) is longer than \(limit) bytes.") }
        guard let text = String(validating: decoded, as: UTF8.self) else { throw Refusal(description: "\(what) is not UTF-8.") }
        if decoded.contains(where: { $0 < 0x20 || $0 == 0x7F }) {
            throw Refusal(description: "\(what) holds a control character (such as U+0000 or a line break).")
        }
        return text
    }
}

extension FormBody {
    /// `fields` as a form body (or a query), every byte outside RFC 3986's unreserved characters
    /// percent-escaped.
    public static func encode(_ fields: [(String, String)]) -> String {
        fields.map { "\(escape($0.0))=\(escape($0.1))" }.joined(separator: "&")
    }

    static func escape(_ text: String) -> String {
        var output = ""
        output.reserveCapacity(text.utf8.count)
        for byte in text.utf8 {
            switch byte {
            case 48...57, 65...90, 97...122, UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                output.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                output += "%" + Hex.encode([byte]).uppercased()
            }
        }
        return output
    }
}
