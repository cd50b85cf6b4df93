import EventLog
import HTTPServer
import InboxDomain

/// A JSON:API document written member by member straight into its bytes, for documents whose
/// resources are many small objects (a page of 25 conversations is about 100 of them): building
/// each as a `JSONValue` dictionary and sorting it again on the way out was half of such a
/// request's time in the tier. The members are written in the order of their names, as
/// `JSONAPI.bytes` writes them, so a document is the same bytes whichever way it was built.
struct DocumentWriter {
    private(set) var text = JSONText(capacity: 8192)
    private var first = true
    private var last = ""

    init() { text.raw(UInt8(ascii: "{")) }

    /// A member whose value is written by `write`. Names must come in ascending order.
    mutating func member(_ name: String, _ write: (inout JSONText) -> Void) {
        assert(name > last, "DocumentWriter members must come in the order of their names")
        last = name
        text.key(name, first: &first)
        write(&text)
    }

    mutating func member(_ name: String, _ value: JSONValue) { member(name) { $0.value(value) } }

    /// An array member of `items`, each written by `write`.
    mutating func member<Items: Sequence>(_ name: String, each items: Items, _ write: (Items.Element, inout JSONText) -> Void) {
        member(name) { text in
            text.raw(UInt8(ascii: "["))
            var first = true
            for item in items {
                if !first { text.raw(UInt8(ascii: ",")) }
                first = false
                write(item, &text)
            }
            text.raw(UInt8(ascii: "]"))
        }
    }

    /// The document as a JSON:API response; `jsonapi` is added in its place among the members.
    consuming func response(status: Int = 200) -> HTTPResponse {
        if last < "jsonapi" {
            member("jsonapi", Documents.version)
        }
        text.raw(UInt8(ascii: "}"))
        return Self.response(text.bytes, status: status)
    }

    /// A document written before (kept in memory) as a JSON:API response.
    static func response(_ body: [UInt8], status: Int = 200) -> HTTPResponse {
        HTTPResponse(status: status, headers: [("Content-Type", JSONAPI.mediaType)], body: body)
    }
}

/// Writing one JSON object's members in order, for `DocumentWriter`'s resources. Member names are
/// the code's own constants, plain ASCII that JSON need not escape, and are copied as they are.
struct ObjectWriter {
    private var first = true

    private mutating func key(_ name: StaticString, _ text: inout JSONText) {
        if !first { text.raw(UInt8(ascii: ",")) }
        first = false
        text.raw(UInt8(ascii: "\""))
        name.withUTF8Buffer { text.raw($0) }
        text.raw(UInt8(ascii: "\""))
        text.raw(UInt8(ascii: ":"))
    }

    /// Opens an object in `text`, lets `body` write its members, and closes it.
    static func write(_ text: inout JSONText, _ body: (inout ObjectWriter, inout JSONText) -> Void) {
        var object = ObjectWriter()
        text.raw(UInt8(ascii: "{"))
        body(&object, &text)
        text.raw(UInt8(ascii: "}"))
    }

    mutating func string(_ name: StaticString, _ value: String, _ text: inout JSONText) {
        key(name, &text)
        text.string(value)
    }

    mutating func string(_ name: StaticString, _ value: String?, _ text: inout JSONText) {
        key(name, &text)
        if let value { text.string(value) } else { text.raw("null") }
    }

    mutating func bool(_ name: StaticString, _ value: Bool, _ text: inout JSONText) {
        key(name, &text)
        text.raw(value ? "true" : "false")
    }

    mutating func value(_ name: StaticString, _ value: JSONValue, _ text: inout JSONText) {
        key(name, &text)
        text.value(value)
    }

    mutating func object(_ name: StaticString, _ text: inout JSONText, _ body: (inout ObjectWriter, inout JSONText) -> Void) {
        key(name, &text)
        Self.write(&text, body)
    }
}
