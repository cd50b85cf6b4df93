import EventLog
import Foundation
import InboxDomain
import Testing

/// `JSONText.value`, which writes every JSON:API document: the same bytes JSONEncoder writes with
/// sorted keys, and JSON that decodes back to the value.
@Suite struct JSONTextTests {
    static func written(_ value: JSONValue) -> String {
        var text = JSONText()
        text.value(value)
        return text.string
    }

    @Test func aDocumentIsWhatJSONEncoderWritesWithSortedKeys() throws {
        let value: JSONValue = .object([
            "data": .array([
                .object([
                    "type": .string("devices"), "id": .string("d-1"),
                    "attributes": .object([
                        "name": .string("Ada's \"iPhone\"\n\t\\ ☕ / \u{1}"), "appVersion": .string("2.4.0"), "count": .integer(-42),
                        "ratio": .number(0.25), "whole": .number(3), "big": .integer(Int64.max), "on": .bool(true), "off": .bool(false),
                        "none": .null, "empty": .object([:]), "list": .array([]),
                    ]),
                ])
            ]),
            "links": .object(["self": .string("/v1/me/devices?page[number]=1")]),
        ])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let expected = String(decoding: try encoder.encode(value), as: UTF8.self)
        #expect(Self.written(value) == expected)
        #expect(try JSONDecoder().decode(JSONValue.self, from: Data(Self.written(value).utf8)) == value)
    }

    @Test func numbersJSONCannotHoldAreWrittenNull() {
        #expect(Self.written(.array([.number(.nan), .number(.infinity), .number(1e300), .number(-0.5)])) == "[null,null,1e+300,-0.5]")
    }
}
