import Foundation
import InboxDomain

/// Reads a resource's `attributes`, refusing what does not fit with a 422 pointing at the field.
struct Attributes {
    let values: [String: JSONValue]

    /// The document's `attributes`, refusing any name not in `allowed`.
    init(_ data: [String: JSONValue], allowed: Set<String>) throws(APIError) {
        switch data["attributes"] {
        case .object(let values)?: self.values = values
        case nil: self.values = [:]
        default:
            throw APIError(status: 400, code: .invalidDocument, detail: "data.attributes must be an object.", source: .pointer("/data/attributes"))
        }
        for name in values.keys.sorted() where !allowed.contains(name) {
            throw APIError(
                status: 422, code: .unknownField, detail: "\(APIError.echoed(name)) is not an attribute of this resource.",
                source: .member(name, of: "/data/attributes"))
        }
    }

    static func pointer(_ name: String) -> APIError.Source { .member(name, of: "/data/attributes") }

    func has(_ name: String) -> Bool { values[name] != nil }

    /// A string attribute: nil when absent (or null, unless required), else 1 to `maximumLength`
    /// characters without control characters, matching `valid` if given.
    func string(_ name: String, required: Bool = false, maximumLength: Int = 200, valid: ((String) -> Bool)? = nil, hint: String = "")
        throws(APIError) -> String?
    {
        switch values[name] {
        case nil, .null?:
            if required {
                throw APIError(status: 422, code: .missingField, detail: "The \(name) field is required.", source: Self.pointer(name))
            }
            return nil
        case .string(let text)?:
            guard !text.isEmpty, text.count <= maximumLength, !text.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }),
                valid?(text) ?? true
            else {
                throw APIError(
                    status: 422, code: .invalidField,
                    detail: "\(name) must be 1 to \(maximumLength) characters\(hint.isEmpty ? "" : ", \(hint)").", source: Self.pointer(name))
            }
            return text
        default:
            throw APIError(status: 422, code: .invalidField, detail: "\(name) must be a string.", source: Self.pointer(name))
        }
    }

    /// A string attribute that must be one of `choices`.
    func choice(_ name: String, _ choices: [String], required: Bool = false) throws(APIError) -> String? {
        try string(name, required: required, maximumLength: 40, valid: { choices.contains($0) }, hint: "one of \(choices.joined(separator: ", "))")
    }

    /// A boolean attribute, nil when absent.
    func bool(_ name: String) throws(APIError) -> Bool? {
        switch values[name] {
        case nil: return nil
        case .bool(let value)?: return value
        default: throw APIError(status: 422, code: .invalidField, detail: "\(name) must be true or false.", source: Self.pointer(name))
        }
    }
}
