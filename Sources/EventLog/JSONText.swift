import Encodings
import InboxDomain

/// Writes JSON text directly: the append path builds one document per batch, and going through
/// `JSONEncoder` for the envelope would cost more than the server's insert.
public struct JSONText {
    public private(set) var bytes: [UInt8] = []

    public init(capacity: Int = 1024) { bytes.reserveCapacity(capacity) }

    public var string: String { String(decoding: bytes, as: UTF8.self) }

    public mutating func raw(_ text: String) { bytes.append(contentsOf: text.utf8) }
    public mutating func raw(_ byte: UInt8) { bytes.append(byte) }
    public mutating func raw(_ other: [UInt8]) { bytes.append(contentsOf: other) }

    public mutating func string(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { utf8 in
            if utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
                escaped(utf8)
            } else {
                bytes.append(contentsOf: utf8)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func escaped(_ utf8: UnsafeBufferPointer<UInt8>) {
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: [92, 34])
            case UInt8(ascii: "\\"): bytes.append(contentsOf: [92, 92])
            case 0x0A: bytes.append(contentsOf: [92, UInt8(ascii: "n")])
            case 0x0D: bytes.append(contentsOf: [92, UInt8(ascii: "r")])
            case 0x09: bytes.append(contentsOf: [92, UInt8(ascii: "t")])
            case 0..<0x20:
                bytes.append(contentsOf: [92, UInt8(ascii: "u"), 48, 48])
                Hex.append(byte, to: &bytes)
            default: bytes.append(byte)
            }
        }
    }

    /// `value` as compact JSON, members of objects in the order of their keys, so one value is
    /// always the same bytes. A number that is not finite (which JSON cannot hold) is written `null`.
    public mutating func value(_ value: JSONValue) {
        switch value {
        case .null: raw("null")
        case .bool(let flag): raw(flag ? "true" : "false")
        case .integer(let number): raw(String(number))
        case .number(let number):
            if let exact = Int64(exactly: number), abs(number) < 9e15 {
                raw(String(exact))
            } else {
                raw(number.isFinite ? "\(number)" : "null")
            }
        case .string(let text): string(text)
        case .array(let items):
            raw(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { raw(UInt8(ascii: ",")) }
                self.value(item)
            }
            raw(UInt8(ascii: "]"))
        case .object(let members):
            raw(UInt8(ascii: "{"))
            var first = true
            for name in members.keys.sorted() {
                key(name, first: &first)
                self.value(members[name]!)
            }
            raw(UInt8(ascii: "}"))
        }
    }

    /// `"key":` after a comma unless it is the first member.
    public mutating func key(_ name: String, first: inout Bool) {
        if !first { bytes.append(UInt8(ascii: ",")) }
        first = false
        string(name)
        bytes.append(UInt8(ascii: ":"))
    }
}
