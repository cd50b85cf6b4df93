import Crypto
import Encodings
import Foundation
import InboxDomain

/// A payload's personal members sealed in its text (docs/event-log.md, "Personal data"): one pass
/// over the bytes finds the object's top-level members, and only the values of the personal ones
/// are replaced, the rest copied as they are. Parsing the payload into a tree and writing it again
/// cost four times the sealing itself (`inbox-bench sealing`, `seal-only`).
///
/// Every top-level member whose name is a personal field is sealed (a name given twice included,
/// and a name spelt with escapes, as a JSON parser reads it), so no personal text reaches the log
/// in the clear whichever of the two a reader would take.
enum PersonalDataSplice {
    struct Member {
        var key: Range<Int>
        var keyHasEscape: Bool
        /// The value's bytes, quotes included for a string.
        var value: Range<Int>
        var valueIsString: Bool
        var valueHasEscape: Bool
    }

    /// The top-level members of the JSON object in `bytes` and the index of its closing brace;
    /// nil when the text is not one object (the caller then takes the slow path, which says why).
    static func members(_ bytes: UnsafeBufferPointer<UInt8>) -> (members: [Member], close: Int)? {
        guard let base = bytes.baseAddress else { return nil }
        let count = bytes.count
        var index = 0
        @inline(__always) func skipSpace() {
            while index < count, base[index] == 0x20 || base[index] == 0x0A || base[index] == 0x0D || base[index] == 0x09 { index += 1 }
        }
        /// From an opening quote to just past the closing one (libc's `memchr` to each quote);
        /// whether an escape was met.
        @inline(__always) func skipString() -> Bool? {
            let start = index + 1
            var from = start
            while from < count {
                guard let found = memchr(base + from, Int32(UInt8(ascii: "\"")), count - from) else { return nil }
                let quote = UnsafeRawPointer(found) - UnsafeRawPointer(base)
                // Escaped when an odd number of backslashes stands before it.
                var backslashes = 0
                while quote - backslashes - 1 >= start, base[quote - backslashes - 1] == UInt8(ascii: "\\") { backslashes += 1 }
                if backslashes % 2 == 0 {
                    index = quote + 1
                    return memchr(base + start, Int32(UInt8(ascii: "\\")), quote - start) != nil
                }
                from = quote + 1
            }
            return nil
        }
        skipSpace()
        guard index < count, base[index] == UInt8(ascii: "{") else { return nil }
        index += 1
        var members: [Member] = []
        members.reserveCapacity(8)
        while true {
            skipSpace()
            guard index < count else { return nil }
            if base[index] == UInt8(ascii: "}") {
                let close = index
                index += 1
                skipSpace()
                return index == count ? (members, close) : nil
            }
            if !members.isEmpty {
                guard base[index] == UInt8(ascii: ",") else { return nil }
                index += 1
                skipSpace()
            }
            guard index < count, base[index] == UInt8(ascii: "\"") else { return nil }
            let keyStart = index
            guard let keyHasEscape = skipString() else { return nil }
            let key = (keyStart + 1)..<(index - 1)
            skipSpace()
            guard index < count, base[index] == UInt8(ascii: ":") else { return nil }
            index += 1
            skipSpace()
            guard index < count else { return nil }
            let valueStart = index
            var isString = false
            var hasEscape = false
            switch base[index] {
            case UInt8(ascii: "\""):
                guard let escaped = skipString() else { return nil }
                isString = true
                hasEscape = escaped
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                // The closing brackets expected, innermost last.
                var closers: [UInt8] = []
                repeat {
                    switch base[index] {
                    case UInt8(ascii: "\""):
                        guard skipString() != nil else { return nil }
                        continue
                    case UInt8(ascii: "{"): closers.append(UInt8(ascii: "}"))
                    case UInt8(ascii: "["): closers.append(UInt8(ascii: "]"))
                    case UInt8(ascii: "}"), UInt8(ascii: "]"):
                        guard closers.popLast() == base[index] else { return nil }
                    default: break
                    }
                    index += 1
                } while !closers.isEmpty && index < count
                guard closers.isEmpty else { return nil }
            default:
                while index < count {
                    let byte = base[index]
                    if byte == UInt8(ascii: ",") || byte == UInt8(ascii: "}") || byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 { break }
                    index += 1
                }
                guard index > valueStart else { return nil }
            }
            members.append(Member(key: key, keyHasEscape: keyHasEscape, value: valueStart..<index, valueIsString: isString, valueHasEscape: hasEscape))
        }
    }

    /// The text of a JSON string's bytes (quotes included).
    static func string(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, escaped: Bool) -> String? {
        if !escaped { return String(decoding: UnsafeBufferPointer(rebasing: bytes[(range.lowerBound + 1)..<(range.upperBound - 1)]), as: UTF8.self) }
        return try? JSONDecoder().decode(String.self, from: Data(bytes[range]))
    }

    /// `payload` with each top-level string member named in `fields` replaced by what `sealing`
    /// writes for its text, given as UTF-8 bytes with escapes undone (`{"$sealed": ...}` or
    /// `{"$erased": true}`), and `"$seal": seal` added, appended to `output`; false (nothing
    /// appended) when the payload is not one JSON object.
    static func seal(
        _ payload: String, fields: [String], seal: String, to output: inout [UInt8],
        sealing: (_ text: UnsafeRawBufferPointer, _ field: String, _ output: inout [UInt8]) throws -> Void
    ) throws -> Bool {
        var payload = payload
        let start = output.count
        return try payload.withUTF8 { bytes -> Bool in
            guard let (members, close) = members(bytes) else { return false }
            output.reserveCapacity(output.count + bytes.count + 256)
            var copied = 0
            for member in members where member.valueIsString {
                let name: String
                if member.keyHasEscape {
                    guard let decoded = string(bytes, (member.key.lowerBound - 1)..<(member.key.upperBound + 1), escaped: true) else {
                        output.removeSubrange(start...)
                        return false
                    }
                    name = decoded
                } else {
                    guard let field = fields.first(where: { $0.utf8.elementsEqual(bytes[member.key]) }) else { continue }
                    name = field
                }
                guard fields.contains(name) else { continue }
                if member.valueHasEscape {
                    guard var text = string(bytes, member.value, escaped: true) else {
                        output.removeSubrange(start...)
                        return false
                    }
                    output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[copied..<member.value.lowerBound]))
                    try text.withUTF8 { try sealing(UnsafeRawBufferPointer($0), name, &output) }
                } else {
                    output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[copied..<member.value.lowerBound]))
                    try sealing(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[(member.value.lowerBound + 1)..<(member.value.upperBound - 1)])), name, &output)
                }
                copied = member.value.upperBound
            }
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[copied..<close]))
            if !members.isEmpty { output.append(UInt8(ascii: ",")) }
            output.append(contentsOf: #""$seal":"#.utf8)
            JSONString.append(seal, to: &output)
            output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[close...]))
            return true
        }
    }

    /// A sealed member's `v` and `h`, as bytes of the payload.
    struct SealedBytes {
        let v: UnsafeBufferPointer<UInt8>
        let h: UnsafeBufferPointer<UInt8>
    }

    /// What a sealed member whose key is gone is read as.
    static let erased = Array(#"{"$erased":true}"#.utf8)

    /// A stored payload as readers decode it: each top-level `{"$sealed": {"v": ..., "h": ...}}`
    /// replaced by what `open` appends to the output for it (a JSON string, or `erased`), given
    /// the member's name unescaped, and `$seal` left out; nil when the payload has another shape
    /// (the caller decodes it with an opener bound). The decoder then parses a text of the
    /// unsealed one's length: libjansson's parse of the sealed bytes cost as much as the rest of a
    /// message's decoding. Nothing is allocated for a member but what `open` does.
    static func opened(
        _ payload: String, open: (_ sealed: SealedBytes, _ field: UnsafeBufferPointer<UInt8>, _ output: inout [UInt8]) throws -> Void
    ) throws -> String? {
        var payload = payload
        return try payload.withUTF8 { bytes -> String? in
            guard let (members, _) = members(bytes) else { return nil }
            var output: [UInt8] = []
            output.reserveCapacity(bytes.count)
            output.append(UInt8(ascii: "{"))
            var first = true
            for member in members {
                let key = UnsafeBufferPointer(rebasing: bytes[member.key])
                if !member.keyHasEscape, equal(key, "$seal") { continue }
                if !first { output.append(UInt8(ascii: ",")) }
                first = false
                let value = UnsafeBufferPointer(rebasing: bytes[member.value])
                guard value[0] == UInt8(ascii: "{"), let sealed = sealedBytes(value) else {
                    output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[(member.key.lowerBound - 1)..<member.value.upperBound]))
                    continue
                }
                output.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[(member.key.lowerBound - 1)..<member.value.lowerBound]))
                if member.keyHasEscape {
                    guard var field = string(bytes, (member.key.lowerBound - 1)..<(member.key.upperBound + 1), escaped: true) else { return nil }
                    try field.withUTF8 { try open(sealed, $0, &output) }
                } else {
                    try open(sealed, key, &output)
                }
            }
            output.append(UInt8(ascii: "}"))
            return String(decoding: output, as: UTF8.self)
        }
    }

    /// The `v` and `h` of `{"$sealed": {"v": ..., "h": ...}}` (in either order, nothing else in
    /// either object, neither escaped: as the log writes it, with any spacing); nil for anything
    /// else. Read in one pass, without the general parse of `members`.
    static func sealedBytes(_ bytes: UnsafeBufferPointer<UInt8>) -> SealedBytes? {
        var cursor = Cursor(bytes: bytes)
        guard cursor.take(UInt8(ascii: "{")), let name = cursor.plainString(), equal(name, "$sealed"), cursor.take(UInt8(ascii: ":")),
            cursor.take(UInt8(ascii: "{"))
        else { return nil }
        var v: UnsafeBufferPointer<UInt8>?
        var h: UnsafeBufferPointer<UInt8>?
        for member in 0..<2 {
            guard member == 0 || cursor.take(UInt8(ascii: ",")), let key = cursor.plainString(), key.count == 1, cursor.take(UInt8(ascii: ":")),
                let value = cursor.plainString()
            else { return nil }
            switch key[0] {
            case UInt8(ascii: "v"): v = value
            case UInt8(ascii: "h"): h = value
            default: return nil
            }
        }
        guard cursor.take(UInt8(ascii: "}")), cursor.take(UInt8(ascii: "}")), let v, let h else { return nil }
        cursor.skipSpace()
        return cursor.index == bytes.count ? SealedBytes(v: v, h: h) : nil
    }

    /// Whether `bytes` are the text `literal`.
    @inline(__always)
    static func equal(_ bytes: UnsafeBufferPointer<UInt8>, _ literal: StaticString) -> Bool {
        bytes.count == literal.utf8CodeUnitCount && (bytes.isEmpty || memcmp(bytes.baseAddress!, literal.utf8Start, bytes.count) == 0)
    }

    /// A reading position in JSON text: a value, not a closure's captured variable, so moving it
    /// costs no exclusivity check.
    private struct Cursor {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        mutating func skipSpace() {
            while index < bytes.count, bytes[index] == 0x20 || bytes[index] == 0x0A || bytes[index] == 0x0D || bytes[index] == 0x09 { index += 1 }
        }

        /// Past `byte`, after any space; false when another byte (or the end) comes first.
        mutating func take(_ byte: UInt8) -> Bool {
            skipSpace()
            guard index < bytes.count, bytes[index] == byte else { return false }
            index += 1
            return true
        }

        /// A string without escapes, its bytes without the quotes.
        mutating func plainString() -> UnsafeBufferPointer<UInt8>? {
            guard take(UInt8(ascii: "\"")), let base = bytes.baseAddress,
                let found = memchr(base + index, Int32(UInt8(ascii: "\"")), bytes.count - index)
            else { return nil }
            let end = UnsafeRawPointer(found) - UnsafeRawPointer(base)
            guard memchr(base + index, Int32(UInt8(ascii: "\\")), end - index) == nil else { return nil }
            defer { index = end + 1 }
            return UnsafeBufferPointer(rebasing: bytes[index..<end])
        }
    }
}
