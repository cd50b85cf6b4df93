/// A JSON string literal written as bytes: the one escaper of the tier (event documents, API
/// documents, log lines), with a fast path for text that needs no escape.
public enum JSONString {
    /// Appends `text` to `output` as a quoted, escaped JSON string.
    public static func append(_ text: String, to output: inout [UInt8]) {
        var text = text
        text.withUTF8 { append(utf8: $0, to: &output) }
    }

    /// `append(_:to:)` of text given as UTF-8 bytes.
    public static func append(utf8: UnsafeBufferPointer<UInt8>, to output: inout [UInt8]) {
        output.append(UInt8(ascii: "\""))
        if utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            appendEscaped(utf8, to: &output)
        } else {
            output.append(contentsOf: utf8)
        }
        output.append(UInt8(ascii: "\""))
    }

    private static func appendEscaped(_ utf8: UnsafeBufferPointer<UInt8>, to output: inout [UInt8]) {
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "\""): output.append(contentsOf: [92, 34])
            case UInt8(ascii: "\\"): output.append(contentsOf: [92, 92])
            case 0x0A: output.append(contentsOf: [92, UInt8(ascii: "n")])
            case 0x0D: output.append(contentsOf: [92, UInt8(ascii: "r")])
            case 0x09: output.append(contentsOf: [92, UInt8(ascii: "t")])
            case 0..<0x20:
                output.append(contentsOf: [92, UInt8(ascii: "u"), 48, 48])
                Hex.append(byte, to: &output)
            default: output.append(byte)
            }
        }
    }
}
