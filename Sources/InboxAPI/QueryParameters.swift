import EventLog
import Foundation
import HTTPServer
import InboxDomain

/// The query parameters JSON:API 1.0 reserves ("Fetching Data", "Query Parameters"), as its MUSTs
/// say: `include` and `sort` are refused (400: this API has no related resources to include, and
/// each list has one order), an unknown all-lowercase name is refused (400: only the
/// specification may name such a parameter), and `fields[TYPE]` sparse fieldsets are kept:
/// resources of that type answer only the attributes and relationships it lists.
/// Implementation names (`page[...]`, `filter[...]`, camelCase) are each route's to read.
struct QueryParameters: Sendable {
    /// `fields[TYPE]`: the fields of each type to keep.
    let fieldsets: [String: Set<String>]

    init(_ request: HTTPRequest) throws(APIError) {
        var fieldsets: [String: Set<String>] = [:]
        for parameter in request.query {
            let name = parameter.name
            switch name {
            case "include":
                throw APIError(
                    status: 400, code: .unsupportedParameter, detail: "include is not supported: what a response includes is fixed.", source: .parameter(name))
            case "sort":
                throw APIError(
                    status: 400, code: .unsupportedParameter, detail: "Each list here has one order (newest first) and cannot be sorted otherwise.",
                    source: .parameter(name))
            case _ where name.hasPrefix("fields[") && name.hasSuffix("]"):
                let type = String(name.dropFirst(7).dropLast())
                guard !type.isEmpty, APIError.echoes(type) else {
                    throw APIError(status: 400, code: .invalidParameter, detail: "fields[TYPE] names a resource type.", source: .parameter("fields"))
                }
                let fields = (parameter.value ?? "").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
                guard fields != [""] else {
                    fieldsets[type] = []
                    continue
                }
                guard fields.allSatisfy({ !$0.isEmpty && APIError.echoes($0) }) else {
                    throw APIError(
                        status: 400, code: .invalidParameter, detail: "fields[\(type)] is a list of field names separated by commas.",
                        source: .parameter(name))
                }
                fieldsets[type, default: []].formUnion(fields)
            case _ where !name.isEmpty && name.utf8.allSatisfy({ $0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "z") }):
                // JSON:API reserves names of only a-z for itself: one it does not define, or one of
                // its own families without its brackets (`fields`, `page`, `filter`), is a 400.
                throw APIError(
                    status: 400, code: .invalidParameter,
                    detail: "\(APIError.echoed(name)) is not a query parameter of this API (JSON:API reserves names of only lowercase letters).",
                    source: .parameter(APIError.echoes(name) ? name : "query"))
            default:
                continue
            }
        }
        self.fieldsets = fieldsets
    }

    /// `response` with the resources of `fieldsets`' types cut to their listed fields (a
    /// successful JSON:API document; any other answer is returned as it is).
    func apply(to response: HTTPResponse) -> HTTPResponse {
        guard !fieldsets.isEmpty, (200..<300).contains(response.status), response.file == nil,
            response.header("Content-Type")?.hasPrefix("application/vnd.api+json") == true,
            case .object(var document)? = try? JSONValue(parsing: response.body)
        else { return response }
        func cut(_ resource: JSONValue) -> JSONValue {
            guard case .object(var members) = resource, case .string(let type)? = members["type"], let keep = fieldsets[type] else { return resource }
            for member in ["attributes", "relationships"] {
                guard case .object(let fields)? = members[member] else { continue }
                let kept = fields.filter { keep.contains($0.key) }
                members[member] = kept.isEmpty ? nil : .object(kept)
            }
            return .object(members)
        }
        for member in ["data", "included"] {
            switch document[member] {
            case .array(let resources)?: document[member] = .array(resources.map(cut))
            case .object?: document[member] = cut(document[member]!)
            default: break
            }
        }
        var text = JSONText(capacity: response.body.count)
        text.value(.object(document))
        var cut = response
        cut.body = text.bytes
        return cut
    }
}
