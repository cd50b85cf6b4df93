/// A personal field of an event's payload (docs/event-log.md, "Personal data"): the person's text,
/// or `erased` once their data key is gone. In the log it is sealed under that key; readers see
/// the text where the key exists and `erased` where it does not, never the sealed bytes.
///
/// In JSON: the text as a string; `erased` as `{"$erased": true}`; sealed, as the log stores it,
/// `{"$sealed": {"v": ..., "h": ...}}`, which only decodes while a `PersonalData.opener` is bound
/// (the event log binds one, with the keys of the events it read).
public enum PersonalText: Codable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
    case text(String)
    case erased

    public init(stringLiteral value: String) { self = .text(value) }

    /// The text, nil when erased.
    public var text: String? {
        if case .text(let text) = self { return text }
        return nil
    }

    public var isErased: Bool { self == .erased }

    public var description: String { text ?? "(erased)" }

    enum Key: String, CodingKey {
        case sealed = "$sealed"
        case erased = "$erased"
    }

    public init(from decoder: any Decoder) throws {
        // A string first: a failed decode of an object throws, which costs less than asking the
        // decoder what it holds through a protocol cast.
        if let text = try? decoder.singleValueContainer().decode(String.self) {
            self = .text(text)
            return
        }
        let object = try decoder.container(keyedBy: Key.self)
        if object.contains(.erased) {
            self = .erased
            return
        }
        let sealed = try object.decode(SealedField.self, forKey: .sealed)
        guard let opener = PersonalData.opener else {
            throw DecodingError.dataCorrupted(
                .init(codingPath: decoder.codingPath, debugDescription: "A sealed personal field, read without the keys of its event."))
        }
        self = try opener.open(sealed, field: decoder.codingPath.last?.stringValue ?? "")
    }

    /// The text as a string, `erased` as `{"$erased": true}`: the log seals a payload's text
    /// after it is encoded (`PersonalDataKeys`), never while.
    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .text(let text):
            var single = encoder.singleValueContainer()
            try single.encode(text)
        case .erased:
            var object = encoder.container(keyedBy: Key.self)
            try object.encode(true, forKey: .erased)
        }
    }
}

/// A personal field as the log stores it: `v`, the AES-256-GCM sealed text (base64url), and `h`,
/// a MAC of the text under the same person's key (base64url), by which an idempotent retry is
/// recognised as the same event without opening anything.
public struct SealedField: Codable, Hashable, Sendable {
    public var v: String
    public var h: String

    public init(v: String, h: String) {
        self.v = v
        self.h = h
    }
}

/// A catalogue event with personal fields (`PersonalText`), all of them one person's.
public protocol HoldsPersonalData {
    /// Whose the personal fields are: a message's author, the account of a sign-in or a search.
    var personalDataOwner: String { get }
    /// The names of its top-level `PersonalText` members.
    static var personalFields: [String] { get }
}


/// What opens the sealed fields of the event being decoded.
public protocol PersonalDataOpening: Sendable {
    func open(_ sealed: SealedField, field: String) throws -> PersonalText
}

/// The opener of the event being decoded, bound by the event log around each one (task-local:
/// concurrent decodes each see their own).
public enum PersonalData {
    @TaskLocal public static var opener: (any PersonalDataOpening)?
}
