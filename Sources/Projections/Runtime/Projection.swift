import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// An event of the log with its payload decoded (and upcast) to the catalogue's current shape.
///
/// A class: a batch's events are handed to every projection, filtered, sliced and kept by the
/// folds, and a reference is one retain where the value (a `RecordedEvent` of five strings and
/// the payload's box) was six.
public final class ProjectedEvent: Sendable {
    public let record: RecordedEvent
    public let payload: any CatalogueEvent

    public init(record: RecordedEvent, payload: any CatalogueEvent) {
        self.record = record
        self.payload = payload
    }

    /// Decodes a recorded event through the catalogue's registry.
    public static func decode(_ record: RecordedEvent, registry: EventTypeRegistry = InboxCatalogue.registry) throws -> ProjectedEvent {
        let payload = try record.decode(using: registry)
        guard let event = payload as? any CatalogueEvent else {
            throw EventDecodingError(type: record.type, schemaVersion: record.schemaVersion, reason: .unknownType)
        }
        return ProjectedEvent(record: record, payload: event)
    }
}

/// Which driver runs a projection's apply code. The code is the same for all three.
public enum ProjectionMode: Sendable, Hashable {
    /// Inside the appending transaction, so the writer reads its own change on the next request.
    case inline
    /// The async projector following the log.
    case live
    /// A rebuild into new tables beside the live ones. Never sends anything.
    case replay
}

/// Where and how an apply writes: the connection (inside the driver's transaction), the schema of
/// the tables (the live `public`, or a replay's), and the mode.
public struct ProjectionContext {
    public let connection: PostgresConnection
    public let schema: String
    public let mode: ProjectionMode

    public init(connection: PostgresConnection, schema: String, mode: ProjectionMode) {
        self.connection = connection
        self.schema = schema
        self.mode = mode
    }

    /// Whether the apply may cause side effects (enqueue pushes and mails). Off during replay.
    public var sendsNotifications: Bool { mode != .replay }

    /// The qualified name of one of the projection's tables in this context's schema.
    public func table(_ name: String) -> String { "\"\(schema)\".\(name)" }
}

/// A read model derived from the event log.
///
/// The contract every projection keeps, which is what lets one apply code serve the inline, live
/// and replay drivers:
/// - `apply` is deterministic: the same events on the same tables give the same rows (times come
///   from the events, never from the clock);
/// - the result does not depend on where the log is cut into batches;
/// - `apply` is idempotent: applying an event again changes nothing (the drivers never do, but a
///   projection that tolerates it cannot be doubled by a mistake in one).
public protocol Projection: Sendable {
    /// A short snake_case name: `bell`, `threads`, `preferences`, `people`.
    var name: String { get }
    /// The shape of its tables. Raising it means a replay builds the new shape beside the old.
    var version: Int { get }
    /// Its tables, in creation order.
    var tableNames: [String] { get }
    /// The event types it reads: those its fold has a rule for (`FoldRules`).
    var eventTypes: Set<String> { get }
    /// The catalogue types it leaves alone on purpose. Every catalogue type is in exactly one of
    /// `eventTypes` and this (`ProjectionFoldTests`), so a new type is never ignored by oversight.
    var ignoredEventTypes: Set<String> { get }
    /// Creates its tables, with their primary keys, in the context's schema.
    func createTables(in context: ProjectionContext) throws
    /// Creates the other indexes of its tables (`IF NOT EXISTS`). A replay builds them once after
    /// filling the tables, which is much cheaper than keeping them up to date row by row.
    func createIndexes(in context: ProjectionContext) throws
    /// Applies a batch of events, in log order, with few set-based statements.
    func apply(_ events: [ProjectedEvent], in context: ProjectionContext) throws
}

extension Projection {
    /// None: a projection that does not say which types it ignores is taken to have missed them all.
    public var ignoredEventTypes: Set<String> { [] }
}

/// A projection whose apply is one pipeline of reads and then one pipeline of writes, each decided
/// only by the batch and, for the writes, by what the reads found. A driver can then send the reads
/// of several projections in one round trip and their writes in another (an inline group does:
/// `InlineProjections`), instead of two round trips each.
public protocol StagedProjection: Projection {
    /// The statements that read what `events` need; empty when nothing is to be read.
    func loads(for events: [ProjectedEvent], in context: ProjectionContext) -> [PostgresStatement]
    /// The statements that write what `events` change, given `loads`' results in their order.
    func writes(for events: [ProjectedEvent], loaded: [PostgresRows], in context: ProjectionContext) throws -> [PostgresStatement]
}

extension StagedProjection {
    /// The reads in one round trip and the writes in another (a pipeline stops at the first
    /// statement that fails and throws its error, as one statement after another would).
    public func apply(_ events: [ProjectedEvent], in context: ProjectionContext) throws {
        let loaded = try context.connection.pipeline(loads(for: events, in: context))
        _ = try context.connection.pipeline(try writes(for: events, loaded: loaded, in: context))
    }
}

/// A failure of an apply that is about the event itself (it will fail again): parked, never retried.
public struct ProjectionError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// The projections of the tier.
public enum InboxProjections {
    public static let all: [any Projection] = [PeopleProjection(), PreferencesProjection(), ThreadsProjection(), BellProjection()]

    public static func named(_ name: String) -> (any Projection)? { all.first { $0.name == name } }
}
