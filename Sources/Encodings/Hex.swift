/// Bytes as hexadecimal text and back, byte by byte: bytea columns, migration checksums, URL
/// escapes, JSON `\u00XX` escapes and UUIDs are all written with these, some on every request, so
/// nothing here goes through `String(format:)`, `String(_:radix:)` or a lookup table built per call.
public enum Hex {
    /// The digit of the low four bits of `nibble`: `0`-`9`, then `a`-`f` (or `A`-`F`).
    @inlinable
    public static func digit(_ nibble: UInt8, uppercase: Bool = false) -> UInt8 {
        let value = nibble & 0x0F
        return value < 10 ? UInt8(ascii: "0") + value : (uppercase ? UInt8(ascii: "A") : UInt8(ascii: "a")) + value - 10
    }

    /// The value of a hex digit (either case), or nil for any other byte.
    @inlinable
    public static func value(ofDigit byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// Appends the two digits of `byte` to `output`.
    @inlinable
    public static func append(_ byte: UInt8, to output: inout [UInt8], uppercase: Bool = false) {
        output.append(digit(byte >> 4, uppercase: uppercase))
        output.append(digit(byte, uppercase: uppercase))
    }

    /// `bytes` as lower-case hex, two digits a byte. Inlinable, so that it is specialized where it
    /// is called (a generic walk across the module boundary cost a sealed event 0.8 µs).
    @inlinable
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        let count = bytes.count * 2
        return String(unsafeUninitializedCapacity: count) { text in
            var index = 0
            for byte in bytes {
                text[index] = digit(byte >> 4)
                text[index + 1] = digit(byte)
                index += 2
            }
            return count
        }
    }

    /// The bytes `digits` spell, or nil when their count is odd or one is not a hex digit.
    /// Inlinable, as `encode` is: every data key read for a replay's batch is a bytea in hex.
    @inlinable
    public static func decode(_ digits: some Collection<UInt8>) -> [UInt8]? {
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        var high: UInt8?
        for byte in digits {
            guard let value = value(ofDigit: byte) else { return nil }
            if let first = high {
                bytes.append(first << 4 | value)
                high = nil
            } else {
                high = value
            }
        }
        return bytes
    }

    /// `decode` of a text's UTF-8.
    @inlinable
    public static func decode(_ text: some StringProtocol) -> [UInt8]? { decode(text.utf8) }

    /// Sixteen bytes as a UUID's text: lower case, `8-4-4-4-12` digits. The bytes are taken as they
    /// are: stamping a version and variant is the caller's (they say how the bytes were made).
    /// Inlinable, so that it is specialized where it is called: across the module boundary the
    /// generic walk over `bytes` cost 3 % of the machine in a replay (a bell entry's id each).
    @inlinable
    public static func uuidString(_ bytes: some Collection<UInt8>) -> String {
        precondition(bytes.count == 16, "a UUID is 16 bytes")
        return String(unsafeUninitializedCapacity: 36) { text in
            var index = 0
            for (position, byte) in bytes.enumerated() {
                if position == 4 || position == 6 || position == 8 || position == 10 {
                    text[index] = UInt8(ascii: "-")
                    index += 1
                }
                text[index] = digit(byte >> 4)
                text[index + 1] = digit(byte)
                index += 2
            }
            return 36
        }
    }
}
