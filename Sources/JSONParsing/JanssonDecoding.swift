import CJansson
import Foundation

/// `Decodable` values read straight from libjansson's tree of a JSON document, for the values
/// `JSONDecoder` would give, at a fraction of its cost: the event payloads a replay decodes
/// (docs/benchmarks.md, issue 14: `JSONDecoder` was about 12 µs an event, a quarter of the machine
/// during a replay).
///
/// It never decides anything `JSONDecoder` might decide otherwise: it returns nil, and the caller
/// asks `JSONDecoder`, for
/// - whatever `JanssonReader` leaves to `JSONDecoder` (malformed text, a name given twice, a byte
///   order mark, a raw NUL byte, integers beyond 64 bits, deeper nesting than `JSONDecoder` allows);
/// - a value that does not have the shape the type asks for (a missing key, a string where a
///   number is asked, a null where a value is asked): `JSONDecoder`'s error names the field;
/// - a number with a fraction or an exponent, wherever the type reads one (how `1.0` becomes an
///   integer is `JSONDecoder`'s);
/// - a name that is not ASCII, in the document or asked for by the type (`JSONDecoder` compares
///   names as Swift strings, by canonical equivalence, and libjansson by bytes);
/// - the types `JSONDecoder` reads in a way of its own (`Date`, `Data`, `URL`, `Decimal`).
/// So a value it returns is the one `JSONDecoder` returns, which `JanssonDecodingTests` checks for
/// every type of the catalogue.
public enum JanssonDecoding {
    /// `T` from the JSON `bytes`, or nil when `JSONDecoder` must decide.
    public static func decode<T: Decodable>(_ type: T.Type, from bytes: UnsafeRawBufferPointer) -> T? {
        decode(from: bytes) { try T(from: $0) }
    }

    /// What `body` makes of a decoder over the JSON `bytes` (`{ try SomeType(from: $0) }`), or nil
    /// when `JSONDecoder` must decide: `body` threw, or the document is one libjansson leaves to it.
    public static func decode<T>(from bytes: UnsafeRawBufferPointer, _ body: (any Decoder) throws -> T) -> T? {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: CChar.self) else { return nil }
        guard memchr(base, 0, bytes.count) == nil else { return nil }
        var error = json_error_t()
        guard let root = json_loadb(base, bytes.count, Int(JanssonReader.flags), &error) else { return nil }
        defer { json_delete(root) }
        guard JanssonReader.isPlain(root) else { return nil }
        let session = JanssonDecodingSession()
        guard let value = try? body(JanssonValueDecoder(root, session: session, parent: nil, key: nil)), !session.declined else { return nil }
        return value
    }

    /// `decode(_:from:)` of text.
    public static func decode<T: Decodable>(_ type: T.Type, from text: String) -> T? {
        var text = text
        return text.withUTF8 { decode(T.self, from: UnsafeRawBufferPointer($0)) }
    }
}

/// Why the jansson decoder gave up: never shown, the caller asks `JSONDecoder` instead.
struct JanssonDecodingDeclined: Error {}

/// One decoding: set when a step that cannot throw (`contains`) met what `JSONDecoder` must decide.
final class JanssonDecodingSession {
    var declined = false
}

/// A decoder over one node of the tree. Lives only while `JanssonDecoding.decode` runs (the tree
/// is deleted after it).
final class JanssonValueDecoder: Decoder {
    let node: UnsafeMutablePointer<json_t>
    let session: JanssonDecodingSession
    private let parent: JanssonValueDecoder?
    private let key: (any CodingKey)?

    init(_ node: UnsafeMutablePointer<json_t>, session: JanssonDecodingSession, parent: JanssonValueDecoder?, key: (any CodingKey)?) {
        self.node = node
        self.session = session
        self.parent = parent
        self.key = key
    }

    /// Walked up only when asked (no catalogue type asks; errors are `JSONDecoder`'s).
    var codingPath: [any CodingKey] {
        var path: [any CodingKey] = []
        var current: JanssonValueDecoder? = self
        while let decoder = current {
            if let key = decoder.key { path.append(key) }
            current = decoder.parent
        }
        return path.reversed()
    }

    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard node.pointee.type == JSON_OBJECT else { throw JanssonDecodingDeclined() }
        // Names compared by bytes are names compared as Swift strings only when they are ASCII.
        var iterator = json_object_iter(node)
        while let position = iterator {
            guard JanssonReader.isASCII(json_object_iter_key(position), count: json_object_iter_key_len(position)) else {
                throw JanssonDecodingDeclined()
            }
            iterator = json_object_iter_next(node, position)
        }
        return KeyedDecodingContainer(JanssonKeyedContainer<Key>(decoder: self))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard node.pointee.type == JSON_ARRAY else { throw JanssonDecodingDeclined() }
        return JanssonUnkeyedContainer(decoder: self)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { JanssonSingleValue(decoder: self) }

    // MARK: Values of this node

    func decodeNil() -> Bool { node.pointee.type == JSON_NULL }

    func decodeBool() throws -> Bool {
        switch node.pointee.type {
        case JSON_TRUE: return true
        case JSON_FALSE: return false
        default: throw JanssonDecodingDeclined()
        }
    }

    func decodeString() throws -> String {
        guard node.pointee.type == JSON_STRING else { throw JanssonDecodingDeclined() }
        return JanssonReader.string(json_string_value(node), count: json_string_length(node))
    }

    /// Whole numbers only: one with a fraction or an exponent is `JSONDecoder`'s.
    func decodeInteger<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        guard node.pointee.type == JSON_INTEGER, let value = T(exactly: Int64(json_integer_value(node))) else {
            throw JanssonDecodingDeclined()
        }
        return value
    }

    /// A whole number as a floating-point one (what `JSONDecoder` gives for `3`); a number with a
    /// fraction or an exponent is `JSONDecoder`'s to round.
    func decodeFloatingPoint<T: BinaryFloatingPoint>(_ type: T.Type) throws -> T {
        guard node.pointee.type == JSON_INTEGER else { throw JanssonDecodingDeclined() }
        let value = Int64(json_integer_value(node))
        // Exactly representable, so no question of how to round.
        guard let exact = T(exactly: value) else { throw JanssonDecodingDeclined() }
        return exact
    }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        // What JSONDecoder reads in a way of its own.
        if T.self == Date.self || T.self == Data.self || T.self == URL.self || T.self == Decimal.self { throw JanssonDecodingDeclined() }
        return try T(from: self)
    }

    func child(_ node: UnsafeMutablePointer<json_t>, key: (any CodingKey)?) -> JanssonValueDecoder {
        JanssonValueDecoder(node, session: session, parent: self, key: key)
    }
}

private struct JanssonKeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let decoder: JanssonValueDecoder

    var codingPath: [any CodingKey] { decoder.codingPath }

    var allKeys: [Key] {
        var keys: [Key] = []
        var iterator = json_object_iter(decoder.node)
        while let position = iterator {
            let name = JanssonReader.string(json_object_iter_key(position), count: json_object_iter_key_len(position))
            if let key = Key(stringValue: name) { keys.append(key) }
            iterator = json_object_iter_next(decoder.node, position)
        }
        return keys
    }

    /// The member `key`, nil when absent. A name that is not ASCII is `JSONDecoder`'s to look up.
    private func member(_ key: Key) throws -> UnsafeMutablePointer<json_t>? {
        var name = key.stringValue
        return try name.withUTF8 { bytes -> UnsafeMutablePointer<json_t>? in
            guard bytes.allSatisfy({ $0 < 0x80 && $0 != 0 }) else { throw JanssonDecodingDeclined() }
            return bytes.withMemoryRebound(to: CChar.self) { json_object_getn(decoder.node, $0.baseAddress, $0.count) }
        }
    }

    private func value(_ key: Key) throws -> JanssonValueDecoder {
        guard let node = try member(key) else { throw JanssonDecodingDeclined() }
        return decoder.child(node, key: key)
    }

    func contains(_ key: Key) -> Bool {
        do {
            return try member(key) != nil
        } catch {
            decoder.session.declined = true
            return false
        }
    }

    func decodeNil(forKey key: Key) throws -> Bool { try value(key).decodeNil() }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try value(key).decodeBool() }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try value(key).decodeString() }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try value(key).decodeFloatingPoint(Double.self) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try value(key).decodeFloatingPoint(Float.self) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try value(key).decodeInteger(Int.self) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try value(key).decodeInteger(Int8.self) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try value(key).decodeInteger(Int16.self) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try value(key).decodeInteger(Int32.self) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try value(key).decodeInteger(Int64.self) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try value(key).decodeInteger(UInt.self) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try value(key).decodeInteger(UInt8.self) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try value(key).decodeInteger(UInt16.self) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try value(key).decodeInteger(UInt32.self) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try value(key).decodeInteger(UInt64.self) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try value(key).decode(T.self) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try value(key).container(keyedBy: NestedKey.self)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer { try value(key).unkeyedContainer() }

    /// `JSONDecoder` gives a decoder of null for a missing `super`: too rare to mirror here.
    func superDecoder() throws -> any Decoder { throw JanssonDecodingDeclined() }
    func superDecoder(forKey key: Key) throws -> any Decoder { try value(key) }
}

private struct JanssonUnkeyedContainer: UnkeyedDecodingContainer {
    let decoder: JanssonValueDecoder
    let count: Int?
    private(set) var currentIndex = 0

    init(decoder: JanssonValueDecoder) {
        self.decoder = decoder
        count = json_array_size(decoder.node)
    }

    var codingPath: [any CodingKey] { decoder.codingPath }
    var isAtEnd: Bool { currentIndex >= (count ?? 0) }

    private mutating func next() throws -> JanssonValueDecoder {
        guard !isAtEnd, let node = json_array_get(decoder.node, currentIndex) else { throw JanssonDecodingDeclined() }
        defer { currentIndex += 1 }
        return decoder.child(node, key: IndexKey(intValue: currentIndex))
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, let node = json_array_get(decoder.node, currentIndex) else { throw JanssonDecodingDeclined() }
        // Like JSONDecoder: a null is taken, anything else stays for the next decode.
        guard node.pointee.type == JSON_NULL else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try next().decodeBool() }
    mutating func decode(_ type: String.Type) throws -> String { try next().decodeString() }
    mutating func decode(_ type: Double.Type) throws -> Double { try next().decodeFloatingPoint(Double.self) }
    mutating func decode(_ type: Float.Type) throws -> Float { try next().decodeFloatingPoint(Float.self) }
    mutating func decode(_ type: Int.Type) throws -> Int { try next().decodeInteger(Int.self) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try next().decodeInteger(Int8.self) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try next().decodeInteger(Int16.self) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try next().decodeInteger(Int32.self) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try next().decodeInteger(Int64.self) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try next().decodeInteger(UInt.self) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next().decodeInteger(UInt8.self) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next().decodeInteger(UInt16.self) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next().decodeInteger(UInt32.self) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next().decodeInteger(UInt64.self) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next().decode(T.self) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next().container(keyedBy: NestedKey.self)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer { try next().unkeyedContainer() }
    mutating func superDecoder() throws -> any Decoder { try next() }
}

private struct JanssonSingleValue: SingleValueDecodingContainer {
    let decoder: JanssonValueDecoder

    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool { decoder.decodeNil() }
    func decode(_ type: Bool.Type) throws -> Bool { try decoder.decodeBool() }
    func decode(_ type: String.Type) throws -> String { try decoder.decodeString() }
    func decode(_ type: Double.Type) throws -> Double { try decoder.decodeFloatingPoint(Double.self) }
    func decode(_ type: Float.Type) throws -> Float { try decoder.decodeFloatingPoint(Float.self) }
    func decode(_ type: Int.Type) throws -> Int { try decoder.decodeInteger(Int.self) }
    func decode(_ type: Int8.Type) throws -> Int8 { try decoder.decodeInteger(Int8.self) }
    func decode(_ type: Int16.Type) throws -> Int16 { try decoder.decodeInteger(Int16.self) }
    func decode(_ type: Int32.Type) throws -> Int32 { try decoder.decodeInteger(Int32.self) }
    func decode(_ type: Int64.Type) throws -> Int64 { try decoder.decodeInteger(Int64.self) }
    func decode(_ type: UInt.Type) throws -> UInt { try decoder.decodeInteger(UInt.self) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try decoder.decodeInteger(UInt8.self) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try decoder.decodeInteger(UInt16.self) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try decoder.decodeInteger(UInt32.self) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try decoder.decodeInteger(UInt64.self) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.decode(T.self) }
}

private struct IndexKey: CodingKey {
    var stringValue: String { "Index \(intValue ?? 0)" }
    var intValue: Int?
    init?(stringValue: String) { nil }
    init(intValue: Int) { self.intValue = intValue }
}
