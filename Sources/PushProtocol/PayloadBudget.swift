import Encodings

/// Why a push could not be encoded.
public enum PushPayloadError: Error, Sendable, Hashable {
    /// Without any body, the payload is still over the limit: the routing data (ids, token, title,
    /// collapse key) alone is too big, and none of it may be cut. Drop the push and log it.
    case routingDataTooLarge(bytes: Int, limit: Int)
}

/// Keeps a payload within its provider's limit by cutting the body, never the routing data:
/// a payload over the limit is encoded again with the longest prefix of the body (cut between
/// characters, never inside one) that fits with a closing "…".
enum PayloadBudget {
    static let ellipsis = "…"

    /// What `encode` makes of `body`, or of the longest cut of it that keeps the result within
    /// `limit` bytes.
    static func fit(body: String, limit: Int, _ encode: (String) -> [UInt8]) throws(PushPayloadError) -> [UInt8] {
        let whole = encode(body)
        if whole.count <= limit { return whole }
        let fixed = whole.count - escapedCount(body)
        guard fixed <= limit else { throw .routingDataTooLarge(bytes: fixed, limit: limit) }
        let room = limit - fixed
        let cut = room >= 3 ? prefix(of: body, escapedBytes: room - 3) + ellipsis : ""
        let bytes = encode(cut)
        assert(bytes.count <= limit)
        return bytes
    }

    /// How many bytes `JSONString.append` writes for `text` between the quotes.
    static func escapedCount(_ text: String) -> Int {
        var count = 0
        for byte in text.utf8 { count += escapedWidth(byte) }
        return count
    }

    @inline(__always)
    static func escapedWidth(_ byte: UInt8) -> Int {
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x0A, 0x0D, 0x09: 2
        case 0..<0x20: 6
        default: 1
        }
    }

    /// The longest prefix of `text` that ends between two characters (not inside a UTF-8 sequence,
    /// nor between a character and its combining marks) and escapes to at most `escapedBytes`.
    static func prefix(of text: String, escapedBytes: Int) -> String {
        var used = 0
        var end = text.startIndex
        for index in text.indices {
            let character = text[index]
            var width = 0
            for byte in character.utf8 { width += escapedWidth(byte) }
            if used + width > escapedBytes { break }
            used += width
            end = text.index(after: index)
        }
        return String(text[..<end])
    }
}

/// The JSON writing the payloads share: bytes appended directly, strings through the tier's one
/// escaper.
extension Array where Element == UInt8 {
    @inline(__always)
    mutating func appendRaw(_ text: StaticString) {
        text.withUTF8Buffer { append(contentsOf: $0) }
    }

    @inline(__always)
    mutating func appendJSON(_ text: String) { JSONString.append(text, to: &self) }

    /// `"key":"value"` with both escaped.
    @inline(__always)
    mutating func appendMember(_ key: String, _ value: String) {
        JSONString.append(key, to: &self)
        append(UInt8(ascii: ":"))
        JSONString.append(value, to: &self)
    }
}
