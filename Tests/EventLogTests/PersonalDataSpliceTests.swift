import Encodings
import Foundation
import InboxDomain
import Testing

@testable import EventLog

/// `PersonalDataSplice`, which seals a payload's personal members in its text: every top-level
/// member of a personal name is replaced (spelt with escapes or given twice included), nothing
/// else changes, and a text that is not one object is left to the slow path.
@Suite struct PersonalDataSpliceTests {
    /// The payload spliced with a marker that holds the text it was given, written after bytes
    /// that were in the output before (which stay, and are all there is when the splice fails).
    static func spliced(_ payload: String, fields: [String] = ["body"]) throws -> String? {
        let before = Array("[earlier batch],".utf8)
        var output = before
        let spliced = try PersonalDataSplice.seal(payload, fields: fields, seal: "0123:per\"son", to: &output) { text, field, output in
            output.append(contentsOf: #"{"sealedText":"#.utf8)
            JSONString.append(field + "=" + String(decoding: text, as: UTF8.self), to: &output)
            output.append(UInt8(ascii: "}"))
        }
        #expect(Array(output.prefix(before.count)) == before)
        guard spliced else {
            #expect(output == before)
            return nil
        }
        return String(decoding: output.dropFirst(before.count), as: UTF8.self)
    }

    static func value(_ text: String) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
    }

    @Test(arguments: [
        (#"{"body":"hi","conversationId":"c"}"#, #"{"body":{"sealedText":"body=hi"},"conversationId":"c","$seal":"0123:per\"son"}"#),
        (
            #" { "body" : "a \"quoted\" } { text" , "x" : [1, {"body": "nested"}, "]"] , "y":{"body":"n","z":{}} } "#,
            #"{"body":{"sealedText":"body=a \"quoted\" } { text"},"x":[1,{"body":"nested"},"]"],"y":{"body":"n","z":{}},"$seal":"0123:per\"son"}"#
        ),
        (#"{"bo\u0064y":"secret \u00fc\n"}"#, #"{"body":{"sealedText":"body=secret ü\n"},"$seal":"0123:per\"son"}"#),
        (#"{"n":-1.5e3,"t":true,"f":false,"z":null,"body":"Grüße 🎉"}"#, #"{"n":-1.5e3,"t":true,"f":false,"z":null,"body":{"sealedText":"body=Grüße 🎉"},"$seal":"0123:per\"son"}"#),
        (#"{"body":null,"other":"x"}"#, #"{"body":null,"other":"x","$seal":"0123:per\"son"}"#),
        ("{}", #"{"$seal":"0123:per\"son"}"#),
        (#"{"a":"x\"}\\","body":"b\\"}"#, #"{"a":"x\"}\\","body":{"sealedText":"body=b\\"},"$seal":"0123:per\"son"}"#),
    ])
    func sealsTheTopLevelPersonalMembersOnly(payload: String, expected: String) throws {
        let spliced = try #require(try Self.spliced(payload))
        #expect(try Self.value(spliced) == Self.value(expected))
    }

    @Test func sealsEveryCopyOfANameGivenTwice() throws {
        let spliced = try #require(try Self.spliced(#"{"body":"one","x":1,"body":"two"}"#))
        #expect(spliced == #"{"body":{"sealedText":"body=one"},"x":1,"body":{"sealedText":"body=two"},"$seal":"0123:per\"son"}"#)
    }

    @Test func sealsEachPersonalFieldByItsName() throws {
        let spliced = try #require(try Self.spliced(#"{"device":"iPhone","location":"Zürich","accountId":"a"}"#, fields: ["device", "location"]))
        #expect(try Self.value(spliced) == Self.value(#"{"device":{"sealedText":"device=iPhone"},"location":{"sealedText":"location=Zürich"},"accountId":"a","$seal":"0123:per\"son"}"#))
    }

    @Test(arguments: [#"{"body":"x""#, "[1]", #"{"a":1} x"#, #"{"a" 1}"#, #"{"a":1,}"#, #"{"a":"#, "", #"{"a":[1,2}"#, #"{"a":[1,2}}"#, #"{"a":{"b":1]}"#])
    func leavesWhatIsNotOneObjectToTheSlowPath(payload: String) throws {
        #expect(try Self.spliced(payload) == nil)
    }

    @Test(arguments: [
        (#""$seal""#, 1, 0), (#"x"$seal""#, 1, 1), (#"{"a":"$","$seal":"1:p"}"#, 1, 9), (#""$sea"#, 1, -1), (#"$seal""#, 1, -1),
        ("ab$seal", 0, 2), ("$sea", 0, -1), ("", 0, -1),
    ])
    func findsTheFirstNeedleByItsProbeByte(text: String, probe: Int, expected: Int) {
        var text = text
        let needle = Array((probe == 1 ? #""$seal""# : "$seal").utf8)
        let found = text.withUTF8 { ByteSearch.find(needle, in: $0, probe: probe) }
        #expect(found ?? -1 == expected)
    }

    /// A search from a later index finds the next needle, and nothing past the last.
    @Test func findsTheNextNeedleFromAnIndex() {
        var text = "%d and %d, %d"
        let found = text.withUTF8 { bytes in [0, 1, 7, 8, 11, 12, 13, 99].map { ByteSearch.find(Array("%d".utf8), in: bytes, from: $0) ?? -1 } }
        #expect(found == [0, 7, 7, 11, 11, -1, -1, -1])
    }

    @Test func readsTheSealOfAStoredPayload() {
        #expect(PersonalDataKeys.seal(in: #"{"body": {"$sealed": {"h": "x", "v": "y"}}, "$seal": "0a:person-1", "id": "$seal"}"#)! == ("0a", "person-1"))
        #expect(PersonalDataKeys.seal(in: #"{"body": "$seal", "id": "x"}"#) == nil)
        #expect(PersonalDataKeys.seal(in: #"{"$seal":"0a:p\"q"}"#)! == ("0a", #"p"q"#))
        // The id ends at the first colon, in bytes: a person's id may hold colons, or start with a
        // combining mark (which makes one grapheme of it and the colon before).
        #expect(PersonalDataKeys.seal(in: #"{"$seal": "0a:shop:42"}"#)! == ("0a", "shop:42"))
        #expect(PersonalDataKeys.seal(in: "{\"$seal\": \"0a:\u{301}x\"}")! == ("0a", "\u{301}x"))
        #expect(PersonalDataKeys.seal(in: #"{"$seal":"0a:p\u0301:q"}"#)! == ("0a", "p\u{301}:q"))
        #expect(PersonalDataKeys.seal(in: #"{"$seal": "no colon"}"#) == nil)
    }

    /// Opens every sealed value as `open(v + "/" + field)`, erased where `v` is "gone".
    static func opened(_stored: String) throws -> String? {
        try PersonalDataSplice.opened(_stored) { sealed, field, output in
            let v = String(decoding: sealed.v, as: UTF8.self)
            if v == "gone" { return output.append(contentsOf: PersonalDataSplice.erased) }
            JSONString.append("\(v)/\(String(decoding: field, as: UTF8.self))/\(String(decoding: sealed.h, as: UTF8.self))", to: &output)
        }
    }

    @Test func opensTheSealedMembersOfAStoredPayloadInItsText() throws {
        let stored = #"{"body": {"$sealed": {"h": "H", "v": "V\"q"}}, "$seal": "0a:p", "meta": {"$sealed": 1}, "list": [{"$sealed": {"h": "x", "v": "y"}}], "n": 1}"#
        // A value whose text needs escapes is one the log never writes: left to the slow path's
        // decoder, as is any other shape.
        #expect(try Self.opened(_stored: stored) == #"{"body": {"$sealed": {"h": "H", "v": "V\"q"}},"meta": {"$sealed": 1},"list": [{"$sealed": {"h": "x", "v": "y"}}],"n": 1}"#)
        let plain = #"{"body": {"$sealed": {"h": "H", "v": "V"}}, "$seal": "0a:p", "device": {"$sealed":{"v":"gone","h":"G"}}, "id": "m1"}"#
        let opened = try #require(try Self.opened(_stored: plain))
        #expect(opened == #"{"body": "V/body/H","device": {"$erased":true},"id": "m1"}"#)
        #expect(try Self.value(opened) == Self.value(#"{"body":"V/body/H","device":{"$erased":true},"id":"m1"}"#))
        #expect(try Self.opened(_stored: "[1]") == nil)
    }

    @Test func readsASealedFieldOnlyInTheShapeTheLogWritesIt() {
        func field(_ text: String) -> SealedField? {
            var text = text
            return text.withUTF8 { bytes in
                PersonalDataSplice.sealedBytes(bytes).map { SealedField(v: String(decoding: $0.v, as: UTF8.self), h: String(decoding: $0.h, as: UTF8.self)) }
            }
        }
        #expect(field(#"{"$sealed": {"h": "a", "v": "b"}}"#) == SealedField(v: "b", h: "a"))
        #expect(field(#"{"$sealed":{"v":"b","h":"a"}}"#) == SealedField(v: "b", h: "a"))
        #expect(field(#"{"$sealed": {"h": "a"}}"#) == nil)
        #expect(field(#"{"$sealed": {"h": "a", "v": "b", "x": "c"}}"#) == nil)
        #expect(field(#"{"$sealed": {"h": "a", "v": 1}}"#) == nil)
        #expect(field(#"{"$sealed": {"h": "a", "v": "b"}, "other": 1}"#) == nil)
        #expect(field(#"{"$erased": true}"#) == nil)
        #expect(field(" {\n\t\"$sealed\" : { \"v\" : \"b\" ,\r\"h\":\"a\" } } ") == SealedField(v: "b", h: "a"))
        #expect(field(#"{"\u0024sealed": {"h": "a", "v": "b"}}"#) == nil)
        #expect(field(#"{"$sealed": {"v": "a", "v": "b"}}"#) == nil)
        #expect(field(#"{"$sealed": {"hh": "a", "v": "b"}}"#) == nil)
        #expect(field(#"{"$sealed": {"h": "a\"", "v": "b"}}"#) == nil)
        #expect(field(#"{"$sealed": {"h": "a\\", "v": "b"}}"#) == nil)
        #expect(field(#"{"$sealed": {"h": "a", "v": "b"}} x"#) == nil)
        #expect(field(#"{"$sealed": {"h": "a", "v": "b"#) == nil)
        #expect(field(#"{"$sealed": {"h": "a", "v": "b"}"#) == nil)
        #expect(field("") == nil)
    }
}
