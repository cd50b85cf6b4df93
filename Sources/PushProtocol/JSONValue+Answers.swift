import Foundation
import InboxDomain
import JSONParsing

/// Reading the JSON of the providers' error answers, the service-account file and the token
/// endpoint's answer: InboxDomain's `JSONValue`, parsed by `JSONValue(parsing:)` (a few hundred bytes, read
/// only when a push failed or a token is made, never on the path of a push that succeeds).
extension JSONValue {
    /// The document in `bytes`; nil when they are not JSON.
    static func parse(_ bytes: [UInt8]) -> JSONValue? {
        try? JSONValue(parsing: bytes)
    }

    /// The items of an array; empty for anything else.
    var items: [JSONValue] {
        if case .array(let items) = self { return items }
        return []
    }
}
