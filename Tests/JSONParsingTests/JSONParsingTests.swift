import Foundation
import InboxDomain
@testable import JSONParsing
import Testing

/// `JSONValue(parsing:)` reads what libjansson takes as it is and leaves the rest to `JSONDecoder`:
/// the two must agree on every input, what is JSON and what its value is.
@Suite struct JSONParsingTests {
    static func decoder(_ bytes: [UInt8]) -> JSONValue? { try? JSONDecoder().decode(JSONValue.self, from: Data(bytes)) }
    static func jansson(_ bytes: [UInt8]) -> JSONValue? { JanssonReader.document(bytes) }

    /// libjansson's reading never accepts what JSONDecoder refuses, nor gives another value; and
    /// the parse as a whole gives JSONDecoder's answer, of bytes and of text.
    static func expectAgreement(_ bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
        let expected = decoder(bytes)
        if let scanned = jansson(bytes) {
            #expect(scanned == expected, "\(String(decoding: bytes, as: UTF8.self).debugDescription)", sourceLocation: sourceLocation)
        }
        #expect((try? JSONValue(parsing: bytes)) == expected, "\(String(decoding: bytes, as: UTF8.self).debugDescription)", sourceLocation: sourceLocation)
        if let text = String(validating: bytes, as: UTF8.self) {
            #expect((try? JSONValue(parsing: text)) == expected, "\(text.debugDescription)", sourceLocation: sourceLocation)
        }
    }

    static let edges: [String] = [
        "{}", "[]", "  {}  ", "\u{FEFF}{}", "", " ", "null", "true", "false", "tru", "nul", "falsey", "0", "-0", "01", "-", "--1", "1x",
        "[1,]", "{\"a\":1,}", "[,1]", "{,}", "{\"a\" 1}", "{\"a\":}", "{1:2}", "{\"a\":1,\"a\":2}", "{\"a\":1}x", "[1 2]",
        "[1.0, 1e2, 1.5, -0.0, 0.0, 1E+2, 1e-400, 0.1e1]", "1e400", "[-1e400]", "[.5]", "[1.]", "[1e]", "[NaN]", "[Infinity]",
        "[123456789012345678]", "[-123456789012345678]", "[1234567890123456789]", "[9223372036854775807]", "[9223372036854775808]",
        "[-9223372036854775808]", "[-9223372036854775809]", "[12345678901234567890123]",
        "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\udc00\"", "\"\\udbff\\udfff\"", "\"\\ud800\\u0041\"", "\"\\ud800x\"", "\"\\u12\"", "\"\\u00e9\\u00C9\"",
        "\"a\u{0}b\"", "\"\\u0000\"", "\"\t\"", "\"\\t\\n\\r\\b\\f\\/\\\\\\\"\"", "\"\\x\"", "\"\\", "\"abc", "[\"\u{7f}\"]", "\"☕ 𝄞 é\"",
        "{\"data\":{\"type\":\"messages\",\"attributes\":{\"body\":\"Is it still available?\",\"attachmentHandles\":[\"upl_1\"],\"offer\":{\"amount\":125000,\"currency\":\"EUR\"}}}}",
        "{\"\":\"\",\"\\u0000\":1}", "[false\u{0}]", "[1,\u{0}2]", "{\"a\":\u{0}1}", "\u{0}{}", "{}\u{0}", "[[[[]]]]", "{\"a\":[{\"b\":[null,true,{\"c\":\"d\"}]}]}",
    ]

    @Test func edgeCasesAgreeWithJSONDecoder() {
        for text in Self.edges { Self.expectAgreement(Array(text.utf8)) }
        for bytes: [UInt8] in [[0x22, 0xFF, 0x22], [0x22, 0xC3, 0x22], [0x22, 0xED, 0xA0, 0x80, 0x22], [0x22, 0xC0, 0xAF, 0x22], [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22], [0x5B, 0x00, 0x5D]] {
            Self.expectAgreement(bytes)
        }
    }

    @Test func nestingAtAndBeyondJSONDecodersLimitAgrees() {
        for depth in [510, 511, 512, 513, 5_000] {
            Self.expectAgreement(Array((String(repeating: "[", count: depth) + String(repeating: "]", count: depth)).utf8))
            Self.expectAgreement(Array((String(repeating: "{\"a\":", count: depth) + "1" + String(repeating: "}", count: depth)).utf8))
        }
    }

    /// The shapes the API's bodies have are read by libjansson itself (that is the point of it).
    @Test func theCommonShapeIsReadWithoutJSONDecoder() {
        let body = "{\"data\":{\"type\":\"messages\",\"attributes\":{\"body\":\"Caf\\u00e9 \\\"au lait\\\" ☕\\n\",\"attachmentHandles\":[],\"offer\":{\"amount\":-125000,\"currency\":\"EUR\"},\"flag\":true,\"none\":null}}}"
        let scanned = Self.jansson(Array(body.utf8))
        #expect(scanned != nil)
        #expect(scanned == Self.decoder(Array(body.utf8)))
        guard case .object(let document)? = scanned, case .object(let data)? = document["data"], case .object(let attributes)? = data["attributes"] else {
            Issue.record("not an object")
            return
        }
        #expect(attributes["body"] == .string("Café \"au lait\" ☕\n"))
        #expect(attributes["offer"] == .object(["amount": .integer(-125000), "currency": .string("EUR")]))
    }

    /// Random documents, written with random spacing, and random damage to them: both readers
    /// agree on every one. `JSON_FUZZ_ROUNDS=1000000` runs more than the suite's 3,000.
    @Test func randomDocumentsAndTheirDamageAgree() {
        var generator = SystemRandomNumberGenerator()
        let pieces = ["\"", "\\", "\\u", "d800", ",", ":", "[", "]", "{", "}", " ", "1", "-", ".", "e", "0", "\u{0}", "é", "true", "null"]
        for _ in 0..<(Int(ProcessInfo.processInfo.environment["JSON_FUZZ_ROUNDS"] ?? "") ?? 3_000) {
            let text = Self.randomDocument(depth: 0, using: &generator)
            Self.expectAgreement(Array(text.utf8))
            var bytes = Array(text.utf8)
            for _ in 0..<Int.random(in: 1...3, using: &generator) where !bytes.isEmpty {
                let at = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: bytes.remove(at: at)
                case 1: bytes.insert(contentsOf: Array(pieces.randomElement(using: &generator)!.utf8), at: at)
                default: bytes[at] = UInt8.random(in: 0...255, using: &generator)
                }
            }
            Self.expectAgreement(bytes)
        }
    }

    static func randomDocument(depth: Int, using generator: inout SystemRandomNumberGenerator) -> String {
        let space = [" ", "", "", "\n", "\t", "\r\n"].randomElement(using: &generator)!
        switch Int.random(in: 0..<(depth > 4 ? 5 : 7), using: &generator) {
        case 0: return ["true", "false", "null"].randomElement(using: &generator)!
        case 1: return String(Int64.random(in: Int64.min...Int64.max, using: &generator) >> UInt64.random(in: 0...63, using: &generator))
        case 2: return ["1.5", "-0.25", "1e3", "2E-2", "0", "-0", "123456789012345678901", "0.1"].randomElement(using: &generator)!
        case 3, 4:
            let scalars = ["a", "Z", " ", "é", "☕", "𝄞", "\\n", "\\\"", "\\\\", "\\/", "\\u00e9", "\\ud83d\\ude00", "\\u0000", "\\t"]
            return "\"" + (0..<Int.random(in: 0...6, using: &generator)).map { _ in scalars.randomElement(using: &generator)! }.joined() + "\""
        case 5:
            let items = (0..<Int.random(in: 0...4, using: &generator)).map { _ in space + randomDocument(depth: depth + 1, using: &generator) + space }
            return "[" + items.joined(separator: ",") + "]"
        default:
            let names = ["a", "b", "c", "data", "é", ""]
            let members = (0..<Int.random(in: 0...4, using: &generator)).map { _ in
                "\"\(names.randomElement(using: &generator)!)\"" + space + ":" + space + randomDocument(depth: depth + 1, using: &generator)
            }
            return "{" + space + members.joined(separator: "," + space) + "}"
        }
    }
}
