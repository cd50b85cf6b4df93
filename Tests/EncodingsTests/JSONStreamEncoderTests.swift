import Encodings
import Foundation
import Testing

/// `JSONStreamEncoder` writes what `JSONEncoder` (with `.withoutEscapingSlashes`) writes, and
/// leaves to it every shape it does not write that way.
@Suite struct JSONStreamEncoderTests {
    enum Kind: String, Codable { case watch, aftercare }

    struct Money: Codable, Equatable {
        var amount: Int64
        var currency: String
    }

    struct Nested: Codable, Equatable {
        var id: String
        var kind: Kind
        var offer: Money?
        var handles: [String]
        var counts: [String: Int]
        var flags: [Bool]
        var matrix: [[Int]]
        var note: String?
        var small: UInt8
        var large: UInt64
        var negative: Int32
    }

    /// Optional members nil are left out, as `encodeIfPresent` leaves them; explicit nulls stay.
    struct WithNull: Encodable {
        var id = "x"
        enum CodingKeys: String, CodingKey { case id, gone }
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encodeNil(forKey: .gone)
        }
    }

    static let foundation: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()

    static func both<T: Encodable>(_ value: T) throws -> (stream: String, foundation: String) {
        let stream = try #require(JSONStreamEncoder.encode(value), "left to JSONEncoder: \(value)")
        return (String(decoding: stream, as: UTF8.self), String(decoding: try foundation.encode(value), as: UTF8.self))
    }

    static func parsed(_ text: String) throws -> NSObject {
        try #require(try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed]) as? NSObject)
    }

    @Test func nestedValuesAreWrittenAsJSONEncoderWritesThem() throws {
        let values = [
            Nested(
                id: "c/1", kind: .watch, offer: Money(amount: 1_250_000, currency: "EUR"), handles: ["a", "b"], counts: ["x": 1, "y": -2],
                flags: [true, false], matrix: [[1, 2], [], [3]], note: nil, small: 255, large: UInt64.max, negative: Int32.min),
            Nested(id: "", kind: .aftercare, offer: nil, handles: [], counts: [:], flags: [], matrix: [], note: "", small: 0, large: 0, negative: 0),
        ]
        for value in values {
            let (stream, foundation) = try Self.both(value)
            #expect(try Self.parsed(stream) == Self.parsed(foundation), "\(stream) against \(foundation)")
            #expect(stream.utf8.count == foundation.utf8.count)
            #expect(try JSONDecoder().decode(Nested.self, from: Data(stream.utf8)) == value)
        }
        #expect(try Self.both(WithNull()).stream == #"{"id":"x","gone":null}"#)
        #expect(try Self.both(Money(amount: 5, currency: "EUR")).stream == #"{"amount":5,"currency":"EUR"}"#)
    }

    /// An array keeps its order, so the texts are compared byte for byte.
    @Test func numbersAndStringsAreTheSameBytes() throws {
        let doubles: [Double] = [0, 0.1, 1, -1, 1.5, -0.0, 1e16, 1.5e-7, 123_456_789.123, Double.leastNonzeroMagnitude, Double.greatestFiniteMagnitude, 0.30000000000000004]
        let (streamDoubles, foundationDoubles) = try Self.both(doubles)
        #expect(streamDoubles == foundationDoubles)
        let integers: [Int64] = [0, 1, -1, Int64.max, Int64.min]
        #expect(try Self.both(integers).stream == "[0,1,-1,9223372036854775807,-9223372036854775808]")
        let strings = ["", "plain", "a/b", "quote \" here", "back\\slash", "line\nbreak", "tab\there", "cr\rhere", "\u{1}\u{1F}", "é ⌚️ 漢字", "\u{7F}", "\u{2028}"]
        let (streamStrings, foundationStrings) = try Self.both(strings)
        #expect(streamStrings == foundationStrings)
        // JSON's short escapes for backspace and form feed: JSONEncoder writes \b and \f, this \u0008
        // and \u000c, the same strings.
        let (streamShort, foundationShort) = try Self.both(["\u{8}\u{C}"])
        #expect(try Self.parsed(streamShort) == Self.parsed(foundationShort))
        #expect(try Self.both(true).stream == "true")
        #expect(try Self.both("top").stream == #""top""#)
        #expect(try Self.both([String?]([nil, "a"])).stream == #"[null,"a"]"#)
    }

    struct Dated: Encodable { var at = Date(timeIntervalSince1970: 0) }
    struct Bytes: Encodable { var data = Data([1, 2]) }
    struct Link: Encodable { var url = URL(string: "https://example.com/a")! }
    struct Amount: Encodable { var value = Decimal(string: "1.10")! }
    struct Single: Encodable { var value: Float = 1.1 }
    struct NotANumber: Encodable { var value = Double.nan }
    enum Choice: Encodable {
        case offer(amount: Int)
    }
    /// A container asked for twice, the second after a member of the first.
    struct Twice: Encodable {
        enum CodingKeys: String, CodingKey { case a, b }
        func encode(to encoder: any Encoder) throws {
            var first = encoder.container(keyedBy: CodingKeys.self)
            try first.encode(1, forKey: .a)
            var second = encoder.container(keyedBy: CodingKeys.self)
            try second.encode(2, forKey: .b)
        }
    }
    /// A nested container filled after its parent went on.
    struct LateNested: Encodable {
        enum CodingKeys: String, CodingKey { case a, b }
        func encode(to encoder: any Encoder) throws {
            var outer = encoder.container(keyedBy: CodingKeys.self)
            var inner = outer.nestedContainer(keyedBy: CodingKeys.self, forKey: .a)
            try outer.encode(1, forKey: .b)
            try inner.encode(2, forKey: .a)
        }
    }
    struct Nothing: Encodable {
        func encode(to encoder: any Encoder) throws {}
    }

    /// Each shape this encoder does not take is left to `JSONEncoder` (nil), which then writes it or
    /// throws: never a text of its own that could differ.
    @Test func whatItDoesNotWriteItLeavesToJSONEncoder() throws {
        #expect(JSONStreamEncoder.encode(Dated()) == nil)
        #expect(JSONStreamEncoder.encode(Bytes()) == nil)
        #expect(JSONStreamEncoder.encode(Link()) == nil)
        #expect(JSONStreamEncoder.encode(Amount()) == nil)
        #expect(JSONStreamEncoder.encode(Single()) == nil)
        #expect(JSONStreamEncoder.encode(NotANumber()) == nil)
        #expect(JSONStreamEncoder.encode([Double.infinity]) == nil)
        #expect(JSONStreamEncoder.encode(Choice.offer(amount: 3)) == nil)
        #expect(JSONStreamEncoder.encode(Twice()) == nil)
        #expect(JSONStreamEncoder.encode(LateNested()) == nil)
        #expect(JSONStreamEncoder.encode(Nothing()) == nil)
        #expect(JSONStreamEncoder.encode(["at": Date(timeIntervalSince1970: 0)]) == nil)
        #expect(throws: EncodingError.self) { try Self.foundation.encode(NotANumber()) }
    }
}
