import Encodings

/// Percent-decoding of a request's path and query (RFC 3986; `+` is a space in a query, as HTML
/// forms send it). A malformed escape (`%4`, `%zz`) is kept as it is, and bytes that do not make
/// UTF-8 become U+FFFD: the handler sees what was sent, and refuses it if it must.
public enum URLDecoding {
    public static func decode(_ text: String, plusIsSpace: Bool) -> String {
        guard text.utf8.contains(where: { $0 == UInt8(ascii: "%") || (plusIsSpace && $0 == UInt8(ascii: "+")) }) else { return text }
        let bytes = Array(text.utf8)
        var result: [UInt8] = []
        result.reserveCapacity(bytes.count)
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%"), index + 2 < bytes.count,
                let high = Hex.value(ofDigit: bytes[index + 1]), let low = Hex.value(ofDigit: bytes[index + 2])
            {
                result.append(high << 4 | low)
                index += 3
            } else if plusIsSpace && byte == UInt8(ascii: "+") {
                result.append(UInt8(ascii: " "))
                index += 1
            } else {
                result.append(byte)
                index += 1
            }
        }
        return String(decoding: result, as: UTF8.self)
    }
}
