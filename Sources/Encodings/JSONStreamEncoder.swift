import Foundation

/// Encodes an `Encodable` value straight to JSON text, member after member as its `encode(to:)`
/// gives them, where Foundation's `JSONEncoder` first builds a tree of boxed values (a dictionary
/// per object) and then writes it: 22.7 % of the append benchmark's process samples went there
/// (perf, batches of 1,000, 2026-12-06), 15.4 % with this.
///
/// It takes what synthesized `Codable` conformances and single-value wrappers do: containers
/// filled one after another, each finished before its parent goes on. Anything else returns nil,
/// and the caller encodes with `JSONEncoder` instead, which then also gives any error:
/// `nestedContainer`, `nestedUnkeyedContainer` and `superEncoder` (a container left open while
/// its parent goes on), a second container from one encoder, a value that asks for no container,
/// the types `JSONEncoder` writes its own way (`Date`, `Data`, `URL`, `Decimal`) and `Float`, and
/// a number that is not finite. What it writes is what `JSONEncoder` with `.withoutEscapingSlashes`
/// writes, but for the order of an object's members (`JSONEncoder`'s follows a dictionary's hash)
/// and backspace and form feed in strings (`\u0008` and `\u000c` where it writes `\b` and `\f`).
public enum JSONStreamEncoder {
    public static func encode<T: Encodable>(_ value: T) -> [UInt8]? {
        let writer = Writer()
        writer.bytes.reserveCapacity(256)
        do {
            try writer.encode(value, depth: 0, codingPath: [])
        } catch {
            return nil
        }
        return writer.failed ? nil : writer.bytes
    }
}

/// Something this encoder leaves to `JSONEncoder`.
private struct Unsupported: Error {}

private final class Writer {
    var bytes: [UInt8] = []
    /// The containers open, innermost last: an object or an array, and whether it has a member yet.
    var open: [(object: Bool, hasMembers: Bool)] = []
    /// A value is due at depth `open.count` and nothing has been written of it yet.
    var pending = false
    /// Something unsupported was asked of a call that cannot throw: the result is not used.
    var failed = false

    /// Writes `value` at the current position (after a key, an array's comma, or at the top).
    func encode<T: Encodable>(_ value: T, depth: Int, codingPath: [any CodingKey]) throws {
        try Self.refuseFoundationsOwn(T.self)
        pending = true
        try value.encode(to: SlotEncoder(writer: self, depth: depth, codingPath: codingPath))
        // It wrote nothing (JSONEncoder writes `{}` then), or left more than its own container open.
        if pending || failed || open.count > depth + 1 { throw Unsupported() }
        if open.count == depth + 1 {
            bytes.append(open.removeLast().object ? UInt8(ascii: "}") : UInt8(ascii: "]"))
        }
    }

    /// The types `JSONEncoder` writes its own way (and `Float`, left to it rather than matched).
    static func refuseFoundationsOwn<T>(_ type: T.Type) throws {
        if T.self == Date.self || T.self == Data.self || T.self == URL.self || T.self == Decimal.self || T.self == Float.self {
            throw Unsupported()
        }
    }

    /// Takes the value due at `depth`; false when there is none (a second container from one encoder).
    func take(depth: Int) -> Bool {
        guard pending, open.count == depth, !failed else {
            failed = true
            return false
        }
        pending = false
        return true
    }

    func openContainer(object: Bool) {
        bytes.append(object ? UInt8(ascii: "{") : UInt8(ascii: "["))
        open.append((object, false))
    }

    /// Before a member of the container at `level` (its index in `open`): the comma, and the key
    /// for an object. Throws when a container inside it is still open or it was closed.
    func member(level: Int, key: (any CodingKey)?) throws {
        guard !failed, !pending, open.count == level + 1 else { throw Unsupported() }
        if open[level].hasMembers { bytes.append(UInt8(ascii: ",")) } else { open[level].hasMembers = true }
        if let key {
            JSONString.append(key.stringValue, to: &bytes)
            bytes.append(UInt8(ascii: ":"))
        }
    }

    func write(_ value: Bool) { bytes.append(contentsOf: value ? "true".utf8 : "false".utf8) }

    func write(_ value: String) { JSONString.append(value, to: &bytes) }

    func writeNull() { bytes.append(contentsOf: "null".utf8) }

    func write<I: BinaryInteger>(_ value: I) { bytes.append(contentsOf: String(value).utf8) }

    /// As `JSONEncoder` writes a `Double`: its description without a trailing `.0`.
    func write(_ value: Double) throws {
        guard value.isFinite else { throw Unsupported() }
        var text = value.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        bytes.append(contentsOf: text.utf8)
    }
}

/// The encoder of one value, at `depth` open containers.
private struct SlotEncoder: Encoder {
    let writer: Writer
    let depth: Int
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if writer.take(depth: depth) { writer.openContainer(object: true) }
        return KeyedEncodingContainer(ObjectContainer<Key>(writer: writer, level: depth, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if writer.take(depth: depth) { writer.openContainer(object: false) }
        return ArrayContainer(writer: writer, level: depth, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer {
        SingleValue(writer: writer, depth: depth, codingPath: codingPath)
    }
}

private struct ObjectContainer<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let writer: Writer
    let level: Int
    let codingPath: [any CodingKey]

    mutating func encodeNil(forKey key: Key) throws {
        try writer.member(level: level, key: key)
        writer.writeNull()
    }
    mutating func encode(_ value: Bool, forKey key: Key) throws {
        try writer.member(level: level, key: key)
        writer.write(value)
    }
    mutating func encode(_ value: String, forKey key: Key) throws {
        try writer.member(level: level, key: key)
        writer.write(value)
    }
    mutating func encode(_ value: Double, forKey key: Key) throws {
        try writer.member(level: level, key: key)
        try writer.write(value)
    }
    mutating func encode(_ value: Float, forKey key: Key) throws { throw Unsupported() }
    mutating func encode(_ value: Int, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int8, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int16, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int32, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: Int64, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt8, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt16, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt32, forKey key: Key) throws { try integer(value, key) }
    mutating func encode(_ value: UInt64, forKey key: Key) throws { try integer(value, key) }

    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try writer.member(level: level, key: key)
        try writer.encode(value, depth: level + 1, codingPath: codingPath + [key])
    }

    private func integer<I: BinaryInteger>(_ value: I, _ key: Key) throws {
        try writer.member(level: level, key: key)
        writer.write(value)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        writer.failed = true
        return KeyedEncodingContainer(ObjectContainer<NestedKey>(writer: writer, level: level + 1, codingPath: codingPath + [key]))
    }

    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        writer.failed = true
        return ArrayContainer(writer: writer, level: level + 1, codingPath: codingPath + [key])
    }

    mutating func superEncoder() -> any Encoder {
        writer.failed = true
        return SlotEncoder(writer: writer, depth: level + 1, codingPath: codingPath)
    }

    mutating func superEncoder(forKey key: Key) -> any Encoder {
        writer.failed = true
        return SlotEncoder(writer: writer, depth: level + 1, codingPath: codingPath + [key])
    }
}

private struct ArrayContainer: UnkeyedEncodingContainer {
    let writer: Writer
    let level: Int
    let codingPath: [any CodingKey]
    private(set) var count = 0

    init(writer: Writer, level: Int, codingPath: [any CodingKey]) {
        self.writer = writer
        self.level = level
        self.codingPath = codingPath
    }

    private mutating func next() throws {
        try writer.member(level: level, key: nil)
        count += 1
    }

    mutating func encodeNil() throws {
        try next()
        writer.writeNull()
    }
    mutating func encode(_ value: Bool) throws {
        try next()
        writer.write(value)
    }
    mutating func encode(_ value: String) throws {
        try next()
        writer.write(value)
    }
    mutating func encode(_ value: Double) throws {
        try next()
        try writer.write(value)
    }
    mutating func encode(_ value: Float) throws { throw Unsupported() }
    mutating func encode(_ value: Int) throws { try integer(value) }
    mutating func encode(_ value: Int8) throws { try integer(value) }
    mutating func encode(_ value: Int16) throws { try integer(value) }
    mutating func encode(_ value: Int32) throws { try integer(value) }
    mutating func encode(_ value: Int64) throws { try integer(value) }
    mutating func encode(_ value: UInt) throws { try integer(value) }
    mutating func encode(_ value: UInt8) throws { try integer(value) }
    mutating func encode(_ value: UInt16) throws { try integer(value) }
    mutating func encode(_ value: UInt32) throws { try integer(value) }
    mutating func encode(_ value: UInt64) throws { try integer(value) }

    mutating func encode<T: Encodable>(_ value: T) throws {
        let index = count
        try next()
        try writer.encode(value, depth: level + 1, codingPath: codingPath + [ArrayIndex(intValue: index)])
    }

    private mutating func integer<I: BinaryInteger>(_ value: I) throws {
        try next()
        writer.write(value)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        writer.failed = true
        return KeyedEncodingContainer(ObjectContainer<NestedKey>(writer: writer, level: level + 1, codingPath: codingPath))
    }

    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        writer.failed = true
        return ArrayContainer(writer: writer, level: level + 1, codingPath: codingPath)
    }

    mutating func superEncoder() -> any Encoder {
        writer.failed = true
        return SlotEncoder(writer: writer, depth: level + 1, codingPath: codingPath)
    }
}

/// One value, written in the place its encoder stands for.
private struct SingleValue: SingleValueEncodingContainer {
    let writer: Writer
    let depth: Int
    let codingPath: [any CodingKey]

    private func take() throws {
        guard writer.take(depth: depth) else { throw Unsupported() }
    }

    mutating func encodeNil() throws {
        try take()
        writer.writeNull()
    }
    mutating func encode(_ value: Bool) throws {
        try take()
        writer.write(value)
    }
    mutating func encode(_ value: String) throws {
        try take()
        writer.write(value)
    }
    mutating func encode(_ value: Double) throws {
        try take()
        try writer.write(value)
    }
    mutating func encode(_ value: Float) throws { throw Unsupported() }
    mutating func encode(_ value: Int) throws { try integer(value) }
    mutating func encode(_ value: Int8) throws { try integer(value) }
    mutating func encode(_ value: Int16) throws { try integer(value) }
    mutating func encode(_ value: Int32) throws { try integer(value) }
    mutating func encode(_ value: Int64) throws { try integer(value) }
    mutating func encode(_ value: UInt) throws { try integer(value) }
    mutating func encode(_ value: UInt8) throws { try integer(value) }
    mutating func encode(_ value: UInt16) throws { try integer(value) }
    mutating func encode(_ value: UInt32) throws { try integer(value) }
    mutating func encode(_ value: UInt64) throws { try integer(value) }

    /// The value's own `encode(to:)`, in this same place.
    mutating func encode<T: Encodable>(_ value: T) throws {
        guard writer.pending, writer.open.count == depth, !writer.failed else { throw Unsupported() }
        try Writer.refuseFoundationsOwn(T.self)
        try value.encode(to: SlotEncoder(writer: writer, depth: depth, codingPath: codingPath))
    }

    private func integer<I: BinaryInteger>(_ value: I) throws {
        try take()
        writer.write(value)
    }
}

private struct ArrayIndex: CodingKey {
    let intValue: Int?
    var stringValue: String { "Index \(intValue ?? 0)" }
    init(intValue: Int) { self.intValue = intValue }
    init?(stringValue: String) { nil }
}
