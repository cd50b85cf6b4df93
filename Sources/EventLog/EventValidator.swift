import Foundation
import InboxDomain

/// Refuses, before anything is written, events this release cannot read or that break a rule of
/// the catalogue: a type it does not know, a schema version newer than its own, a payload that
/// does not have the type's shape or breaks one of its rules, or a stream other than the event's
/// own. The error names the field (`type`, `schemaVersion`, `payload.offer.amount`, `stream`).
public struct EventValidator: Sendable {
    public let registry: EventTypeRegistry

    public init(registry: EventTypeRegistry) {
        self.registry = registry
    }

    public func check(_ event: NewEvent, index: Int) throws {
        guard let current = registry.currentVersion(of: event.type) else {
            throw EventLogError.invalidEvent(
                index: index, field: "type", reason: "\"\(event.type)\" is not an event type of the catalogue (docs/events.md)")
        }
        if event.schemaVersion > current {
            throw EventLogError.invalidEvent(
                index: index, field: "schemaVersion",
                reason: "\(event.schemaVersion) is newer than the \(current) this release knows for \"\(event.type)\"")
        }
        let payload: any EventPayload
        do {
            // An event made from a typed value has that value: its text is the value's encoding,
            // which its Codable conformance reads back (CatalogueRoundTripTests).
            if let typed = event.typedPayload, registry.isCurrent(typed, as: event.type, schemaVersion: event.schemaVersion) {
                payload = typed
            } else {
                payload = try registry.decode(type: event.type, schemaVersion: event.schemaVersion, payload: Data(event.payloadJSON.utf8))
            }
        } catch let error as EventDecodingError {
            let field = error.field.map { "payload.\($0)" } ?? "payload"
            let reason: String
            switch error.reason {
            case .malformedPayload(let why): reason = "does not fit \"\(event.type)\": \(why)"
            default: reason = error.description
            }
            throw EventLogError.invalidEvent(index: index, field: field, reason: reason)
        }
        guard let typed = payload as? any CatalogueEvent else { return }
        if let problem = typed.problem {
            throw EventLogError.invalidEvent(index: index, field: "payload.\(problem.field)", reason: problem.reason)
        }
        if typed.streamId != event.streamId {
            throw EventLogError.invalidEvent(
                index: index, field: "stream", reason: "must be \"\(typed.streamId)\" for this \(event.type), not \"\(event.streamId)\"")
        }
    }
}
