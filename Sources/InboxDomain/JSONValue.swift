/// A JSON document as a value: what upcasters read and rewrite when an old payload is brought to
/// the current shape.
public enum JSONValue: Codable, Sendable, Hashable {
    case null
    case bool(Bool)
    /// A whole number that fits in 64 bits, kept exact (a `Double` loses digits past 2^53).
    case integer(Int64)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Int64.self) {
            self = .integer(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value):
            if let exact = Int64(exactly: value), abs(value) < 9e15 { try container.encode(exact) } else { try container.encode(value) }
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    /// The member `key` of an object, nil otherwise.
    public subscript(key: String) -> JSONValue? {
        get {
            guard case .object(let members) = self else { return nil }
            return members[key]
        }
        set {
            guard case .object(var members) = self else { return }
            members[key] = newValue
            self = .object(members)
        }
    }

    /// The value as a whole number, if it is one (`3` or `3.0`).
    public var integerValue: Int64? {
        switch self {
        case .integer(let value): value
        case .number(let value): Int64(exactly: value)
        default: nil
        }
    }

    /// The value as a number, if it is one.
    public var doubleValue: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .number(let value): value
        default: nil
        }
    }

    /// Numbers compare by value: `.integer(3) == .number(3)`.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.integer(let a), .integer(let b)): a == b
        case (.integer, .number), (.number, .integer), (.number, .number): lhs.doubleValue == rhs.doubleValue
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.object(let a), .object(let b)): a == b
        default: false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let value): hasher.combine(value)
        case .integer, .number: hasher.combine(doubleValue)
        case .string(let value): hasher.combine(value)
        case .array(let value): hasher.combine(value)
        case .object(let value): hasher.combine(value)
        }
    }

    public var stringValue: String? {
        if case .string(let value) = self { return value }
        return nil
    }
}

extension JSONValue {
    /// Where the first string holding U+0000 is (a member's name or a string value), as the
    /// names and indices leading to it; nil when there is none. PostgreSQL's text and jsonb cannot
    /// hold that character, so a value carrying it must be refused before it reaches the database.
    public var pathToNUL: [String]? {
        switch self {
        case .string(let text): return text.containsNUL ? [] : nil
        case .array(let items):
            for (index, item) in items.enumerated() {
                if let path = item.pathToNUL { return [String(index)] + path }
            }
            return nil
        case .object(let members):
            for name in members.keys.sorted() {
                if name.containsNUL { return [name] }
                if let path = members[name]?.pathToNUL { return [name] + path }
            }
            return nil
        case .null, .bool, .integer, .number: return nil
        }
    }
}

extension StringProtocol {
    /// Whether the text holds U+0000, which PostgreSQL's text cannot store.
    public var containsNUL: Bool { utf8.contains(0) }
}

extension JSONValue {
    /// How deep objects and arrays nest in this value: 0 for a scalar, 1 for `{}` or `[1]`.
    public var nesting: Int {
        switch self {
        case .array(let items): 1 + (items.lazy.map(\.nesting).max() ?? 0)
        case .object(let members): 1 + (members.values.lazy.map(\.nesting).max() ?? 0)
        default: 0
        }
    }
}
