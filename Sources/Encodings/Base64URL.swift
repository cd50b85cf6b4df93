/// base64url without padding (RFC 4648 section 5, as JWTs use it in RFC 7515), written by hand over the bytes:
/// Foundation's base64 and three text replacements cost more than the rest of a bell page's links.
public enum Base64URL {
    @usableFromInline static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// The value of each byte in the alphabet, 255 for bytes outside it.
    @usableFromInline static let values: [UInt8] = {
        var table = [UInt8](repeating: 255, count: 256)
        for (value, byte) in alphabet.enumerated() { table[Int(byte)] = UInt8(value) }
        return table
    }()

    @inlinable
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        var output: [UInt8] = []
        append(bytes, to: &output)
        return String(decoding: output, as: UTF8.self)
    }

    /// Appends the encoding of `bytes` to `output`. Inlinable, like `encode` and `decode`: a
    /// generic walk across the module boundary cost more than the encoding.
    @inlinable
    public static func append(_ bytes: some Collection<UInt8>, to output: inout [UInt8]) {
        if bytes.withContiguousStorageIfAvailable({ append(contiguous: $0, to: &output) }) != nil { return }
        Array(bytes).withUnsafeBufferPointer { append(contiguous: $0, to: &output) }
    }

    /// `append(_:to:)` of bytes in memory: `output` grown once, then written through a pointer
    /// (appending character by character checked its capacity each time, a tenth of sealing a
    /// message's text, `inbox-bench sealing`).
    @inlinable
    static func append(contiguous input: UnsafeBufferPointer<UInt8>, to output: inout [UInt8]) {
        let start = output.count
        output.append(contentsOf: repeatElement(0, count: (input.count * 4 + 2) / 3))
        Self.alphabet.withUnsafeBufferPointer { alphabet in
            output.withUnsafeMutableBufferPointer { output in
                var at = start
                var index = 0
                while index + 3 <= input.count {
                    let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8 | UInt32(input[index + 2])
                    output[at] = alphabet[Int(group >> 18 & 63)]
                    output[at + 1] = alphabet[Int(group >> 12 & 63)]
                    output[at + 2] = alphabet[Int(group >> 6 & 63)]
                    output[at + 3] = alphabet[Int(group & 63)]
                    at += 4
                    index += 3
                }
                switch input.count - index {
                case 1:
                    let group = UInt32(input[index]) << 16
                    output[at] = alphabet[Int(group >> 18 & 63)]
                    output[at + 1] = alphabet[Int(group >> 12 & 63)]
                case 2:
                    let group = UInt32(input[index]) << 16 | UInt32(input[index + 1]) << 8
                    output[at] = alphabet[Int(group >> 18 & 63)]
                    output[at + 1] = alphabet[Int(group >> 12 & 63)]
                    output[at + 2] = alphabet[Int(group >> 6 & 63)]
                default: break
                }
            }
        }
    }

    /// The bytes of `text`, or nil when it holds a character outside the alphabet (`+`, `/` and
    /// padding included), or has a length no encoding has, or leftover bits that are not zero.
    @inlinable
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var output: [UInt8] = []
        let decoded =
            text.utf8.withContiguousStorageIfAvailable { decode(contiguous: $0, appendingTo: &output) }
            ?? Array(text.utf8).withUnsafeBufferPointer { decode(contiguous: $0, appendingTo: &output) }
        return decoded ? output : nil
    }

    /// `decode(_:)` of text in memory, its bytes appended to `output` (grown once, then written
    /// through a pointer); false, and `output` as it was, for text that is not base64url.
    @inlinable
    public static func decode(contiguous input: UnsafeBufferPointer<UInt8>, appendingTo output: inout [UInt8]) -> Bool {
        let remainder = input.count % 4
        guard remainder != 1 else { return false }
        let start = output.count
        output.append(contentsOf: repeatElement(0, count: input.count / 4 * 3 + max(0, remainder - 1)))
        let decoded = Self.values.withUnsafeBufferPointer { values in
            output.withUnsafeMutableBufferPointer { output -> Bool in
                // Four characters at a time: a value outside the alphabet is 255, so one test of
                // the high bit of all four refuses it.
                var at = start
                var index = 0
                let whole = input.count - remainder
                while index < whole {
                    let a = values[Int(input[index])], b = values[Int(input[index + 1])]
                    let c = values[Int(input[index + 2])], d = values[Int(input[index + 3])]
                    guard (a | b | c | d) & 0x80 == 0 else { return false }
                    let group = UInt32(a) << 18 | UInt32(b) << 12 | UInt32(c) << 6 | UInt32(d)
                    output[at] = UInt8(truncatingIfNeeded: group >> 16)
                    output[at + 1] = UInt8(truncatingIfNeeded: group >> 8)
                    output[at + 2] = UInt8(truncatingIfNeeded: group)
                    at += 3
                    index += 4
                }
                switch remainder {
                case 2:
                    let a = values[Int(input[index])], b = values[Int(input[index + 1])]
                    guard (a | b) & 0x80 == 0, b & 0x0F == 0 else { return false }
                    output[at] = a << 2 | b >> 4
                case 3:
                    let a = values[Int(input[index])], b = values[Int(input[index + 1])], c = values[Int(input[index + 2])]
                    guard (a | b | c) & 0x80 == 0, c & 0x03 == 0 else { return false }
                    output[at] = a << 2 | b >> 4
                    output[at + 1] = b << 4 | c >> 2
                default: break
                }
                return true
            }
        }
        if !decoded { output.removeSubrange(start...) }
        return decoded
    }
}
