import CJansson
import Foundation
import InboxDomain

extension JSONValue {
    /// `bytes` as JSON: the same value `JSONDecoder` gives, read by libjansson (docs/api.md,
    /// "Reading JSON").
    ///
    /// `JSONDecoder` decodes a `JSONValue` by trying each kind in turn, and every kind that does not
    /// fit throws an error it first describes in words: a request body of a dozen values cost 68 µs,
    /// about a tenth of the machine while messages are posted (docs/benchmarks.md). libjansson reads
    /// the common shape of a document (objects, arrays, strings, `true`, `false`, `null`, whole
    /// numbers of 64 bits) into its tree, which is copied into a `JSONValue`. Whatever it does not
    /// take as it is (a number with a fraction or an exponent, or beyond 64 bits; a name given twice;
    /// a byte order mark; nesting deeper than `JSONDecoder` allows; a name holding U+0000; a raw NUL
    /// byte; anything malformed) goes to `JSONDecoder`, which decides: so the two never disagree on what is JSON,
    /// or on its value.
    public init(parsing bytes: [UInt8]) throws {
        if let value = JanssonReader.document(bytes) {
            self = value
        } else {
            self = try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
        }
    }

    /// `init(parsing:)`, of text.
    public init(parsing text: String) throws {
        var text = text
        if let value = text.withUTF8({ JanssonReader.document(UnsafeRawBufferPointer($0)) }) {
            self = value
        } else {
            self = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
        }
    }
}

/// The libjansson side of `JSONValue(parsing:)`: nil for anything it leaves to `JSONDecoder`.
enum JanssonReader {
    /// `JSONDecoder` refuses arrays and objects nested 513 deep; 512 and beyond are left to it.
    static let maximumDepth = 511

    /// Names given twice are refused (`JSONDecoder` keeps the first: left to it); U+0000 in a
    /// string is read, as `JSONDecoder` reads it (the tier refuses it later, naming the field).
    static let flags = JSON_REJECT_DUPLICATES | JSON_DECODE_ANY | JSON_ALLOW_NUL

    static func document(_ bytes: [UInt8]) -> JSONValue? {
        bytes.withUnsafeBytes { document($0) }
    }

    static func document(_ bytes: UnsafeRawBufferPointer) -> JSONValue? {
        guard let base = bytes.baseAddress?.assumingMemoryBound(to: CChar.self) else { return nil }
        // libjansson's reader passes over a raw NUL byte between values (`[false\0]` is `[false]`
        // to it), which no JSON holds: such bytes are JSONDecoder's to refuse.
        guard memchr(base, 0, bytes.count) == nil else { return nil }
        var error = json_error_t()
        guard let root = json_loadb(base, bytes.count, Int(flags), &error) else { return nil }
        defer { json_delete(root) }
        return value(root, depth: 0)
    }

    private static func value(_ node: UnsafeMutablePointer<json_t>, depth: Int) -> JSONValue? {
        switch node.pointee.type {
        case JSON_NULL: return .null
        case JSON_TRUE: return .bool(true)
        case JSON_FALSE: return .bool(false)
        case JSON_INTEGER: return .integer(Int64(json_integer_value(node)))
        case JSON_STRING: return .string(string(json_string_value(node), count: json_string_length(node)))
        case JSON_ARRAY:
            guard depth < maximumDepth else { return nil }
            let count = json_array_size(node)
            var items: [JSONValue] = []
            items.reserveCapacity(count)
            for index in 0..<count {
                guard let child = json_array_get(node, index), let item = value(child, depth: depth + 1) else { return nil }
                items.append(item)
            }
            return .array(items)
        case JSON_OBJECT:
            guard depth < maximumDepth else { return nil }
            var members: [String: JSONValue] = [:]
            members.reserveCapacity(json_object_size(node))
            var iterator = json_object_iter(node)
            while let position = iterator {
                guard let child = json_object_iter_value(position), let member = value(child, depth: depth + 1) else { return nil }
                members[string(json_object_iter_key(position), count: json_object_iter_key_len(position))] = member
                iterator = json_object_iter_next(node, position)
            }
            return .object(members)
        default:
            // JSON_REAL: how a fraction or an exponent becomes `.integer` or `.number` is JSONDecoder's.
            return nil
        }
    }

    /// Whether the tree under `node` is one `JSONDecoder` reads as libjansson did: nested at most
    /// `maximumDepth` deep, and without a number that has a fraction or an exponent (how those
    /// round, and which of them `JSONDecoder` refuses, is its own).
    static func isPlain(_ node: UnsafeMutablePointer<json_t>, depth: Int = 0) -> Bool {
        switch node.pointee.type {
        case JSON_ARRAY:
            guard depth < maximumDepth else { return false }
            for index in 0..<json_array_size(node) {
                guard let child = json_array_get(node, index), isPlain(child, depth: depth + 1) else { return false }
            }
            return true
        case JSON_OBJECT:
            guard depth < maximumDepth else { return false }
            var iterator = json_object_iter(node)
            while let position = iterator {
                guard let child = json_object_iter_value(position), isPlain(child, depth: depth + 1) else { return false }
                iterator = json_object_iter_next(node, position)
            }
            return true
        case JSON_REAL: return false
        default: return true
        }
    }

    static func isASCII(_ text: UnsafePointer<CChar>?, count: Int) -> Bool {
        guard let text else { return count == 0 }
        return text.withMemoryRebound(to: UInt8.self, capacity: count) { bytes in
            UnsafeBufferPointer(start: bytes, count: count).allSatisfy { $0 < 0x80 }
        }
    }

    /// libjansson has checked that its strings are UTF-8 (and refuses lone surrogates), so they are
    /// copied as they are.
    static func string(_ text: UnsafePointer<CChar>?, count: Int) -> String {
        guard let text, count > 0 else { return "" }
        return text.withMemoryRebound(to: UInt8.self, capacity: count) {
            String(decoding: UnsafeBufferPointer(start: $0, count: count), as: UTF8.self)
        }
    }
}
