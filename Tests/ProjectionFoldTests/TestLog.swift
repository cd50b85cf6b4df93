@testable import EventLog
import Foundation
import InboxDomain
@testable import Projections

/// A log written in memory for a fold: positions from 1, a stream version per stream, one event a
/// second. Nothing here touches a database.
struct TestLog {
    static let start = Date(timeIntervalSince1970: 1_780_000_000)
    private(set) var position: Int64 = 0
    private var versions: [String: Int64] = [:]

    /// A log whose next event is at `position + 1` (for events later than rows already stored).
    init(after position: Int64 = 0) { self.position = position }

    /// The events, recorded in this order.
    mutating func record(_ payloads: any CatalogueEvent...) -> [ProjectedEvent] {
        payloads.map { record($0) }
    }

    mutating func record(_ payload: any CatalogueEvent) -> ProjectedEvent {
        position += 1
        let version = (versions[payload.streamId] ?? 0) + 1
        versions[payload.streamId] = version
        let record = RecordedEvent(
            position: position, transactionId: UInt64(position), streamId: payload.streamId, streamVersion: version,
            type: type(of: payload).eventType, schemaVersion: 1, payloadJSON: "{}", metadataJSON: "{}", idempotencyKey: nil,
            recordedAt: Self.time(of: position))
        return ProjectedEvent(record: record, payload: payload)
    }

    /// When the event at `position` is recorded.
    static func time(of position: Int64) -> Date { start.addingTimeInterval(TimeInterval(position)) }
}
