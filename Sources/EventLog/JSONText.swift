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
    public mutating func raw(_ other: UnsafeBufferPointer<UInt8>) { bytes.append(contentsOf: other) }

    public mutating func string(_ text: String) { JSONString.append(text, to: &bytes) }

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
            // Sorting the members themselves, not their keys to look each up again: a list page
            // renders thousands of small objects, and the lookups' hashing was a third of it.
            for (name, member) in members.sorted(by: { $0.key < $1.key }) {
                key(name, first: &first)
                self.value(member)
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
