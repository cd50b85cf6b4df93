import Foundation

/// A typed event: what happened, in the product's words. `eventType` is the name stored in the
/// log; `schemaVersion` is the shape this Swift type has. Older shapes are brought up to it by
/// upcasters registered in an `EventTypeRegistry`, so the code only ever sees the current shape.
public protocol EventPayload: Codable, Sendable {
    static var eventType: String { get }
    static var schemaVersion: Int { get }
    /// Whose personal fields this payload holds, and their names (`HoldsPersonalData`); nil when
    /// it holds none. A requirement, so that an `any EventPayload` answers it without a cast (a
    /// cast to `HoldsPersonalData` copied the whole payload: a tenth of sealing a message).
    var personalData: PersonalFields? { get }
}

extension EventPayload {
    public static var schemaVersion: Int { 1 }
    public var personalData: PersonalFields? { nil }
}

extension EventPayload where Self: HoldsPersonalData {
    public var personalData: PersonalFields? { PersonalFields(owner: personalDataOwner, fields: Self.personalFields) }
}

/// The personal fields of one payload and whose they are (`EventPayload.personalData`).
public struct PersonalFields: Sendable, Hashable {
    public var owner: String
    public var fields: [String]

    public init(owner: String, fields: [String]) {
        self.owner = owner
        self.fields = fields
    }
}

/// Why a stored payload could not become a typed event.
public struct EventDecodingError: Error, Sendable, CustomStringConvertible {
    public enum Reason: Sendable, Hashable {
        /// No Swift type is registered for the stored type name.
        case unknownType
        /// The stored schema version is newer than the code knows (written by a newer release).
        case newerSchemaVersion(stored: Int, known: Int)
        /// An upcaster is missing between two versions.
        case missingUpcaster(from: Int)
        /// The payload does not have the shape of the type.
        case malformedPayload(String)
    }

    public var type: String
    public var schemaVersion: Int
    public var reason: Reason
    /// The payload field at fault, as a dotted path (`offer.amount`), when one is.
    public var field: String?

    public init(type: String, schemaVersion: Int, reason: Reason, field: String? = nil) {
        self.type = type
        self.schemaVersion = schemaVersion
        self.reason = reason
        self.field = field
    }

    public var description: String {
        switch reason {
        case .unknownType: "No event type \"\(type)\" is known."
        case .newerSchemaVersion(let stored, let known):
            "Event \"\(type)\" has schema version \(stored), newer than the \(known) this release knows."
        case .missingUpcaster(let from): "Event \"\(type)\" has no upcaster from schema version \(from)."
        case .malformedPayload(let why): "Event \"\(type)\" (schema version \(schemaVersion)) does not decode: \(why)"
        }
    }
}

/// Converts a payload of `(type, fromVersion)` to the shape of `fromVersion + 1`.
public struct EventUpcaster: Sendable {
    public let type: String
    public let fromVersion: Int
    public let convert: @Sendable (JSONValue) throws -> JSONValue

    public init(type: String, fromVersion: Int, convert: @escaping @Sendable (JSONValue) throws -> JSONValue) {
        self.type = type
        self.fromVersion = fromVersion
        self.convert = convert
    }
}

/// The event types the code knows, and the upcasters that bring old payloads to the current shape.
public struct EventTypeRegistry: Sendable {
    private struct Entry: Sendable {
        let currentVersion: Int
        let payloadType: ObjectIdentifier
        let decode: @Sendable (Data) throws -> any EventPayload
        let decodeFrom: @Sendable (any Decoder) throws -> any EventPayload
    }

    private var entries: [String: Entry] = [:]
    private var upcasters: [String: [Int: EventUpcaster]] = [:]

    public init() {}

    /// Registers a payload type under its `eventType`.
    public mutating func register<P: EventPayload>(_ type: P.Type) {
        entries[P.eventType] = Entry(
            currentVersion: P.schemaVersion, payloadType: ObjectIdentifier(P.self), decode: { data in try JSONDecoder().decode(P.self, from: data) },
            decodeFrom: { decoder in try P(from: decoder) })
    }

    /// How a payload of `type` stored at `schemaVersion` is read when it is already of the current
    /// shape (no upcaster between): the registered type's `init(from:)`, for a reader of JSON other
    /// than `JSONDecoder` that gives the same values (`JanssonDecoding`). Nil for a type this
    /// registry does not know or a payload that must be upcast first: `decode(type:schemaVersion:payload:)`
    /// reads those.
    public func currentReader(type: String, schemaVersion: Int) -> (@Sendable (any Decoder) throws -> any EventPayload)? {
        guard let entry = entries[type], entry.currentVersion == schemaVersion else { return nil }
        return entry.decodeFrom
    }

    /// Whether `payload` is what `decode(type:schemaVersion:payload:)` gives for a payload of
    /// `type` and `schemaVersion` that was encoded from it: its type is the one registered for
    /// `type`, and the version is that type's current one (no upcasting between them).
    public func isCurrent(_ payload: any EventPayload, as type: String, schemaVersion: Int) -> Bool {
        guard let entry = entries[type] else { return false }
        return entry.currentVersion == schemaVersion && entry.payloadType == ObjectIdentifier(Swift.type(of: payload))
    }

    /// Registers a converter from one schema version to the next.
    public mutating func register(_ upcaster: EventUpcaster) {
        upcasters[upcaster.type, default: [:]][upcaster.fromVersion] = upcaster
    }

    public func isKnown(_ type: String) -> Bool { entries[type] != nil }

    public func currentVersion(of type: String) -> Int? { entries[type]?.currentVersion }

    /// The payload brought to the current schema version of `type`, as JSON bytes.
    public func upcast(type: String, schemaVersion: Int, payload: Data) throws -> Data {
        guard let entry = entries[type] else {
            throw EventDecodingError(type: type, schemaVersion: schemaVersion, reason: .unknownType)
        }
        if schemaVersion == entry.currentVersion { return payload }
        guard schemaVersion < entry.currentVersion else {
            throw EventDecodingError(
                type: type, schemaVersion: schemaVersion,
                reason: .newerSchemaVersion(stored: schemaVersion, known: entry.currentVersion))
        }
        var value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: payload)
        } catch {
            throw EventDecodingError(type: type, schemaVersion: schemaVersion, reason: .malformedPayload("\(error)"))
        }
        for version in schemaVersion..<entry.currentVersion {
            guard let step = upcasters[type]?[version] else {
                throw EventDecodingError(type: type, schemaVersion: schemaVersion, reason: .missingUpcaster(from: version))
            }
            value = try step.convert(value)
        }
        return try JSONEncoder().encode(value)
    }

    /// Decodes a stored payload as whatever type is registered for `type`, upcasting it first.
    public func decode(type: String, schemaVersion: Int, payload: Data) throws -> any EventPayload {
        let current = try upcast(type: type, schemaVersion: schemaVersion, payload: payload)
        guard let entry = entries[type] else {
            throw EventDecodingError(type: type, schemaVersion: schemaVersion, reason: .unknownType)
        }
        do {
            return try entry.decode(current)
        } catch {
            throw EventDecodingError(
                type: type, schemaVersion: schemaVersion, reason: .malformedPayload(Self.describe(error)), field: Self.field(of: error))
        }
    }

    /// Decodes a stored payload as `P`, upcasting it first.
    public func decode<P: EventPayload>(_ type: P.Type, schemaVersion: Int, payload: Data) throws -> P {
        let current: Data
        if entries[P.eventType] == nil {
            guard schemaVersion == P.schemaVersion else {
                throw EventDecodingError(type: P.eventType, schemaVersion: schemaVersion, reason: .missingUpcaster(from: schemaVersion))
            }
            current = payload
        } else {
            current = try upcast(type: P.eventType, schemaVersion: schemaVersion, payload: payload)
        }
        do {
            return try JSONDecoder().decode(P.self, from: current)
        } catch {
            throw EventDecodingError(
                type: P.eventType, schemaVersion: schemaVersion, reason: .malformedPayload(Self.describe(error)),
                field: Self.field(of: error))
        }
    }

    /// The dotted path of the field a decoding error is about, nil when it is about the whole payload.
    static func field(of error: any Error) -> String? {
        guard let error = error as? DecodingError else { return nil }
        var path: [any CodingKey]
        switch error {
        case .keyNotFound(let key, let context): path = context.codingPath + [key]
        case .typeMismatch(_, let context), .valueNotFound(_, let context), .dataCorrupted(let context): path = context.codingPath
        @unknown default: return nil
        }
        if path.isEmpty { return nil }
        return path.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
    }

    /// A one-line account of a decoding error that names the field.
    static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        func path(_ context: DecodingError.Context) -> String {
            let text = context.codingPath.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
            return text.isEmpty ? "the payload" : "field \"\(text)\""
        }
        switch error {
        case .keyNotFound(let key, let context):
            let parent = path(context)
            return "field \"\(key.stringValue)\" is missing" + (context.codingPath.isEmpty ? "" : " in \(parent)")
        case .typeMismatch(let type, let context): return "\(path(context)) is not a \(type)"
        case .valueNotFound(let type, let context): return "\(path(context)) is null, expected \(type)"
        case .dataCorrupted(let context): return "\(path(context)): \(context.debugDescription)"
        @unknown default: return "\(error)"
        }
    }
}
