import Encodings
import Foundation

/// A value that can travel as a statement parameter. Parameters are always sent apart from the
/// SQL text (`PQexecParams`), in PostgreSQL's text format.
public protocol PostgresEncodable: Sendable {
    /// The parameter's text form, or nil for SQL NULL.
    var postgresText: String? { get }
    /// The type to declare for the parameter; `.unspecified` lets the server infer it.
    static var postgresType: PostgresDataType { get }
}

/// A value that can be read from a result column (text format).
public protocol PostgresDecodable {
    /// Whether a column of `type` can be decoded as this Swift type.
    static func accepts(_ type: PostgresDataType) -> Bool
    /// Decodes the column's text. Throw `PostgresDecodingFailure` for malformed text.
    static func decode(postgresText text: String, type: PostgresDataType) throws -> Self
    /// The value for SQL NULL; non-optional types refuse it.
    static func decodeNull() throws -> Self
}

extension PostgresDecodable {
    public static func decodeNull() throws -> Self { throw PostgresDecodingFailure.unexpectedNull }
}

/// Why a column's text could not be decoded; the row turns it into a `PostgresError` naming the column.
public enum PostgresDecodingFailure: Error, Sendable {
    case unexpectedNull
    case malformed(String)
}

/// A parameter list entry: its text (nil is NULL) and declared type.
public struct PostgresBind: Sendable {
    public var text: String?
    public var type: PostgresDataType
    public init(text: String?, type: PostgresDataType) {
        self.text = text
        self.type = type
    }
    public init(_ value: some PostgresEncodable) {
        self.text = value.postgresText
        self.type = Swift.type(of: value).postgresType
    }
}

// MARK: Optional

extension Optional: PostgresEncodable where Wrapped: PostgresEncodable {
    public var postgresText: String? { self?.postgresText }
    public static var postgresType: PostgresDataType { Wrapped.postgresType }
}

extension Optional: PostgresDecodable where Wrapped: PostgresDecodable {
    public static func accepts(_ type: PostgresDataType) -> Bool { Wrapped.accepts(type) }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self {
        try Wrapped.decode(postgresText: text, type: type)
    }
    public static func decodeNull() throws -> Self { nil }
}

// MARK: Integers

extension PostgresDecodable where Self: FixedWidthInteger {
    public static func accepts(_ type: PostgresDataType) -> Bool {
        type.isInteger || type == .xid || type == .xid8
    }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self {
        guard let value = Self(text) else {
            throw PostgresDecodingFailure.malformed("\"\(text)\" does not fit in \(Self.self)")
        }
        return value
    }
}

extension Int: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public static var postgresType: PostgresDataType { .int8 }
}
extension Int64: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public static var postgresType: PostgresDataType { .int8 }
}
extension Int32: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public static var postgresType: PostgresDataType { .int4 }
}
extension Int16: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    public static var postgresType: PostgresDataType { .int2 }
}
extension UInt64: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { String(self) }
    /// Unsigned 64-bit values are transaction ids (`xid8`) in this schema.
    public static var postgresType: PostgresDataType { .xid8 }
}

// MARK: Floating point

extension Double: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { "\(self)" }
    public static var postgresType: PostgresDataType { .float8 }
    public static func accepts(_ type: PostgresDataType) -> Bool {
        type == .float4 || type == .float8 || type == .numeric || type.isInteger
    }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self {
        switch text {
        case "NaN": return .nan
        case "Infinity": return .infinity
        case "-Infinity": return -.infinity
        default:
            guard let value = Double(text) else { throw PostgresDecodingFailure.malformed("\"\(text)\" is not a number") }
            return value
        }
    }
}

// MARK: Text, Bool, UUID, bytes

extension String: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { self }
    public static var postgresType: PostgresDataType { .text }
    public static func accepts(_ type: PostgresDataType) -> Bool { type.isTextual }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self { text }
}

extension Bool: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { self ? "t" : "f" }
    public static var postgresType: PostgresDataType { .bool }
    public static func accepts(_ type: PostgresDataType) -> Bool { type == .bool }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self {
        switch text {
        case "t": return true
        case "f": return false
        default: throw PostgresDecodingFailure.malformed("\"\(text)\" is not a boolean")
        }
    }
}

extension UUID: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? { withUnsafeBytes(of: uuid) { Hex.uuidString($0) } }
    public static var postgresType: PostgresDataType { .uuid }
    public static func accepts(_ type: PostgresDataType) -> Bool { type == .uuid }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self {
        guard let value = parse(postgresText: text) else { throw PostgresDecodingFailure.malformed("\"\(text)\" is not a UUID") }
        return value
    }

    /// PostgreSQL's text of a UUID, always `8-4-4-4-12` hex digits, read digit by digit:
    /// Foundation's `UUID(uuidString:)` runs `sscanf` on it, and the fan-out reads one per push.
    static func parse(postgresText text: String) -> UUID? {
        var text = text
        return text.withUTF8 { digits -> UUID? in
            guard digits.count == 36 else { return nil }
            var value: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            let read = withUnsafeMutableBytes(of: &value) { bytes -> Bool in
                var index = 0
                for byte in 0..<16 {
                    if index == 8 || index == 13 || index == 18 || index == 23 {
                        guard digits[index] == UInt8(ascii: "-") else { return false }
                        index += 1
                    }
                    guard let high = Hex.value(ofDigit: digits[index]), let low = Hex.value(ofDigit: digits[index + 1]) else { return false }
                    bytes[byte] = high << 4 | low
                    index += 2
                }
                return true
            }
            return read ? UUID(uuid: value) : nil
        }
    }
}

extension Data: PostgresEncodable, PostgresDecodable {
    public var postgresText: String? {
        "\\x" + Hex.encode(self)
    }
    public static var postgresType: PostgresDataType { .bytea }
    public static func accepts(_ type: PostgresDataType) -> Bool { type == .bytea }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self {
        let utf8 = text.utf8
        guard utf8.starts(with: [UInt8(ascii: "\\"), UInt8(ascii: "x")]) else {
            throw PostgresDecodingFailure.malformed("bytea is not in hex format")
        }
        guard let bytes = Hex.decode(utf8.dropFirst(2)) else { throw PostgresDecodingFailure.malformed("bytea has a non-hex digit or half a byte") }
        return Data(bytes)
    }
}

// MARK: Dates

extension Date: PostgresEncodable, PostgresDecodable {
    /// ISO 8601 in UTC with microseconds, which is PostgreSQL's own precision.
    public var postgresText: String? { PostgresTimestamp.format(self) }
    public static var postgresType: PostgresDataType { .timestamptz }
    public static func accepts(_ type: PostgresDataType) -> Bool { type == .timestamptz || type == .timestamp }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self {
        guard let date = PostgresTimestamp.parse(text) else {
            throw PostgresDecodingFailure.malformed("\"\(text)\" is not an ISO timestamp")
        }
        return date
    }
}

enum PostgresTimestamp {
    static func format(_ date: Date) -> String {
        let totalMicros = Int64((date.timeIntervalSince1970 * 1_000_000).rounded())
        var seconds = totalMicros / 1_000_000
        var micros = totalMicros % 1_000_000
        if micros < 0 {
            micros += 1_000_000
            seconds -= 1
        }
        var parts = tm()
        var time = time_t(seconds)
        gmtime_r(&time, &parts)
        let year = Int(parts.tm_year) + 1900
        guard (1...9999).contains(year) else {
            // Outside four digits: PostgreSQL reads the year as written.
            return "\(year)-\(parts.tm_mon + 1)-\(parts.tm_mday)T\(parts.tm_hour):\(parts.tm_min):\(parts.tm_sec).\(micros)Z"
        }
        var bytes = [UInt8](repeating: 0, count: 27)
        func put(_ value: Int, _ width: Int, at start: Int) {
            var value = value
            for index in stride(from: start + width - 1, through: start, by: -1) {
                bytes[index] = UInt8(48 + value % 10)
                value /= 10
            }
        }
        put(year, 4, at: 0)
        bytes[4] = UInt8(ascii: "-")
        put(Int(parts.tm_mon) + 1, 2, at: 5)
        bytes[7] = UInt8(ascii: "-")
        put(Int(parts.tm_mday), 2, at: 8)
        bytes[10] = UInt8(ascii: "T")
        put(Int(parts.tm_hour), 2, at: 11)
        bytes[13] = UInt8(ascii: ":")
        put(Int(parts.tm_min), 2, at: 14)
        bytes[16] = UInt8(ascii: ":")
        put(Int(parts.tm_sec), 2, at: 17)
        bytes[19] = UInt8(ascii: ".")
        put(Int(micros), 6, at: 20)
        bytes[26] = UInt8(ascii: "Z")
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Parses PostgreSQL's ISO output: `2026-11-29 11:23:03.123456+00` (offset optional, `T` accepted).
    static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        var index = 0
        func number(_ digits: Int) -> Int? {
            guard index + digits <= bytes.count else { return nil }
            var value = 0
            for _ in 0..<digits {
                let c = bytes[index]
                guard c >= 48, c <= 57 else { return nil }
                value = value * 10 + Int(c - 48)
                index += 1
            }
            return value
        }
        func expect(_ c: UInt8) -> Bool {
            guard index < bytes.count, bytes[index] == c else { return false }
            index += 1
            return true
        }
        guard let year = number(4), expect(UInt8(ascii: "-")), let month = number(2), expect(UInt8(ascii: "-")),
            let day = number(2)
        else { return nil }
        guard index < bytes.count, bytes[index] == UInt8(ascii: " ") || bytes[index] == UInt8(ascii: "T") else {
            return nil
        }
        index += 1
        guard let hour = number(2), expect(UInt8(ascii: ":")), let minute = number(2), expect(UInt8(ascii: ":")),
            let second = number(2)
        else { return nil }
        var fraction = 0.0
        if expect(UInt8(ascii: ".")) {
            var scale = 0.1
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
        }
        var offsetSeconds = 0
        if index < bytes.count {
            let sign: Int
            switch bytes[index] {
            case UInt8(ascii: "Z"): sign = 0; index += 1
            case UInt8(ascii: "+"): sign = 1; index += 1
            case UInt8(ascii: "-"): sign = -1; index += 1
            default: return nil
            }
            if sign != 0 {
                guard let offsetHours = number(2) else { return nil }
                var offsetMinutes = 0
                var offsetSecs = 0
                if expect(UInt8(ascii: ":")) { guard let m = number(2) else { return nil }; offsetMinutes = m }
                if expect(UInt8(ascii: ":")) { guard let s = number(2) else { return nil }; offsetSecs = s }
                offsetSeconds = sign * (offsetHours * 3600 + offsetMinutes * 60 + offsetSecs)
            }
        }
        guard index == bytes.count else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let epoch = timegm(&parts)
        return Date(timeIntervalSince1970: Double(epoch - offsetSeconds) + fraction)
    }
}

// MARK: JSON

/// A `Codable` value stored as `jsonb` (or read from `json`/`jsonb`).
public struct PostgresJSON<Value: Codable & Sendable>: PostgresEncodable, PostgresDecodable, Sendable {
    public var value: Value
    public init(_ value: Value) { self.value = value }

    public var postgresText: String? {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        // Encoding a Codable value only fails for values JSON cannot hold (NaN); the server then refuses the NULL.
        guard let data = try? encoder.encode(value) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
    public static var postgresType: PostgresDataType { .jsonb }
    public static func accepts(_ type: PostgresDataType) -> Bool { type == .jsonb || type == .json || type.isTextual }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self {
        do {
            return PostgresJSON(try JSONDecoder().decode(Value.self, from: Data(text.utf8)))
        } catch {
            throw PostgresDecodingFailure.malformed("JSON does not decode as \(Value.self): \(error)")
        }
    }
}

/// JSON text that is already encoded, sent as `jsonb` without re-encoding.
public struct PostgresRawJSON: PostgresEncodable, PostgresDecodable, Sendable, Hashable {
    public var text: String
    public init(_ text: String) { self.text = text }
    public var postgresText: String? { text }
    public static var postgresType: PostgresDataType { .jsonb }
    public static func accepts(_ type: PostgresDataType) -> Bool { type == .jsonb || type == .json }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self { PostgresRawJSON(text) }
}

// MARK: Arrays

/// An element type of one-dimensional arrays.
public protocol PostgresArrayElement: PostgresEncodable, PostgresDecodable {
    static var postgresArrayType: PostgresDataType { get }
}
extension Int: PostgresArrayElement { public static var postgresArrayType: PostgresDataType { .int8Array } }
extension Int64: PostgresArrayElement { public static var postgresArrayType: PostgresDataType { .int8Array } }
extension Int32: PostgresArrayElement { public static var postgresArrayType: PostgresDataType { .int4Array } }
extension String: PostgresArrayElement { public static var postgresArrayType: PostgresDataType { .textArray } }
extension Bool: PostgresArrayElement { public static var postgresArrayType: PostgresDataType { .boolArray } }
extension UUID: PostgresArrayElement { public static var postgresArrayType: PostgresDataType { .uuidArray } }
extension Double: PostgresArrayElement { public static var postgresArrayType: PostgresDataType { .float8Array } }
extension Date: PostgresArrayElement { public static var postgresArrayType: PostgresDataType { .timestamptzArray } }
extension PostgresRawJSON: PostgresArrayElement { public static var postgresArrayType: PostgresDataType { .jsonbArray } }

extension Array: PostgresEncodable where Element: PostgresArrayElement {
    /// `{"a","b\"c",NULL}`, built as bytes: projections send arrays of thousands of values.
    public var postgresText: String? {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count * 24 + 2)
        bytes.append(UInt8(ascii: "{"))
        for (offset, element) in enumerated() {
            if offset > 0 { bytes.append(UInt8(ascii: ",")) }
            guard let item = element.postgresText else {
                bytes.append(contentsOf: "NULL".utf8)
                continue
            }
            bytes.append(UInt8(ascii: "\""))
            for byte in item.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { bytes.append(UInt8(ascii: "\\")) }
                bytes.append(byte)
            }
            bytes.append(UInt8(ascii: "\""))
        }
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }
    public static var postgresType: PostgresDataType { Element.postgresArrayType }
}

extension Array: PostgresDecodable where Element: PostgresArrayElement {
    public static func accepts(_ type: PostgresDataType) -> Bool { type == Element.postgresArrayType }
    public static func decode(postgresText text: String, type: PostgresDataType) throws -> Self {
        let elementType = PostgresDataType.elementType(of: type)
        return try PostgresArrayLiteral.elements(of: text).map { item in
            guard let item else { return try Element.decodeNull() }
            return try Element.decode(postgresText: item, type: elementType)
        }
    }
}

extension PostgresDataType {
    static func elementType(of arrayType: PostgresDataType) -> PostgresDataType {
        switch arrayType {
        case .int8Array: .int8
        case .int4Array: .int4
        case .int2Array: .int2
        case .textArray: .text
        case .varcharArray: .varchar
        case .boolArray: .bool
        case .uuidArray: .uuid
        case .float8Array: .float8
        case .timestamptzArray: .timestamptz
        case .jsonbArray: .jsonb
        default: .unspecified
        }
    }
}

enum PostgresArrayLiteral {
    /// The elements of a one-dimensional array literal (`{1,2,NULL}`, `{"a b","c\"d"}`); nil is NULL.
    static func elements(of text: String) throws -> [String?] {
        let scalars = Array(text.unicodeScalars)
        guard scalars.first == "{", scalars.last == "}" else {
            throw PostgresDecodingFailure.malformed("\"\(text)\" is not an array literal")
        }
        var result: [String?] = []
        var index = 1
        let end = scalars.count - 1
        if index == end { return [] }
        while index <= end {
            var item = String.UnicodeScalarView()
            var quoted = false
            if scalars[index] == "\"" {
                quoted = true
                index += 1
                while index < end, scalars[index] != "\"" {
                    if scalars[index] == "\\" { index += 1 }
                    guard index < end else { break }
                    item.append(scalars[index])
                    index += 1
                }
                index += 1  // closing quote
            } else {
                while index < end, scalars[index] != "," {
                    if scalars[index] == "{" {
                        throw PostgresDecodingFailure.malformed("multi-dimensional arrays are not supported")
                    }
                    item.append(scalars[index])
                    index += 1
                }
            }
            let string = String(item)
            result.append(!quoted && string == "NULL" ? nil : string)
            guard index <= end else { break }
            if index == end { break }
            guard scalars[index] == "," else {
                throw PostgresDecodingFailure.malformed("\"\(text)\" is not an array literal")
            }
            index += 1
        }
        return result
    }
}

extension Optional: PostgresArrayElement where Wrapped: PostgresArrayElement {
    public static var postgresArrayType: PostgresDataType { Wrapped.postgresArrayType }
}
