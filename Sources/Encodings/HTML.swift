/// Text put into HTML or XML: a mail's HTML part, the unsubscribe pages, the release benchmark's
/// report and its SVG charts (`&#39;` is XML's too).
public enum HTML {
    /// `text` with the five characters that could end an element or an attribute escaped.
    public static func escape(_ text: String) -> String {
        // The five are ASCII, and no byte of a longer UTF-8 sequence is: the bytes are enough.
        let bytes = text.utf8
        guard bytes.contains(where: { $0 == 38 || $0 == 60 || $0 == 62 || $0 == 34 || $0 == 39 }) else { return text }
        var escaped: [UInt8] = []
        escaped.reserveCapacity(bytes.count + 16)
        for byte in bytes {
            switch byte {
            case UInt8(ascii: "&"): escaped += "&amp;".utf8
            case UInt8(ascii: "<"): escaped += "&lt;".utf8
            case UInt8(ascii: ">"): escaped += "&gt;".utf8
            case UInt8(ascii: "\""): escaped += "&quot;".utf8
            case UInt8(ascii: "'"): escaped += "&#39;".utf8
            default: escaped.append(byte)
            }
        }
        return String(decoding: escaped, as: UTF8.self)
    }
}
