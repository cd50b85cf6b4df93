import Encodings
import Foundation
import InboxDomain
import JSONParsing

/// An event to append. The payload is a JSON object's text; build it from a typed `EventPayload`
/// with `init(streamId:payload:metadata:idempotencyKey:)`.
public struct NewEvent: Sendable, Hashable {
    public var streamId: String
    public var type: String { didSet { remembered = RememberedPayload() } }
    public var schemaVersion: Int { didSet { remembered = RememberedPayload() } }
    public var payloadJSON: String { didSet { remembered = RememberedPayload() } }
    public var metadata: EventMetadata
    /// A key that makes the append safe to retry: a second append with it returns the first event.
    public var idempotencyKey: String?
    /// The typed value `payloadJSON` was encoded from, when the event was made from one (and its
    /// type, schema version and payload not changed since): the validator and the inline
    /// projections take it instead of decoding the text they were just given.
    public var typedPayload: (any EventPayload)? { remembered.value }
    private var remembered = RememberedPayload()

    public init(
        streamId: String, type: String, schemaVersion: Int = 1, payloadJSON: String, metadata: EventMetadata,
        idempotencyKey: String? = nil
    ) {
        self.streamId = streamId
        self.type = type
        self.schemaVersion = schemaVersion
        self.payloadJSON = payloadJSON
        self.metadata = metadata
        self.idempotencyKey = idempotencyKey
    }

    public init<P: EventPayload>(streamId: String, payload: P, metadata: EventMetadata, idempotencyKey: String? = nil) throws {
        self.init(
            streamId: streamId, type: P.eventType, schemaVersion: P.schemaVersion,
            payloadJSON: try Self.text(of: payload), metadata: metadata, idempotencyKey: idempotencyKey)
        remembered = RememberedPayload(payload)
    }

    /// The payload's JSON text: written as it is encoded (`JSONStreamEncoder`), or by
    /// `JSONEncoder` for a shape that one leaves to it (which then also throws any error).
    static func text<P: Encodable>(of payload: P) throws -> String {
        if let bytes = JSONStreamEncoder.encode(payload) { return String(decoding: bytes, as: UTF8.self) }
        return String(decoding: try encoder.encode(payload), as: UTF8.self)
    }

    /// One encoder for every payload: its options never change after this, and encoding does not
    /// mutate it.
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()
}

/// The keys attached to a recorded event: not part of its identity.
struct AttachedKeys: Sendable, Hashable {
    let ring: KeyRing?
    let seal: (id: String, person: String)?

    static func == (lhs: AttachedKeys, rhs: AttachedKeys) -> Bool { true }
    func hash(into hasher: inout Hasher) {}
}

/// The typed payload a `NewEvent` was made from. It is not part of the event's identity: two
/// events with the same text are equal whether or not either remembers its value.
struct RememberedPayload: Sendable, Hashable {
    let value: (any EventPayload)?

    init(_ value: (any EventPayload)? = nil) { self.value = value }

    static func == (lhs: RememberedPayload, rhs: RememberedPayload) -> Bool { true }
    func hash(into hasher: inout Hasher) {}
}

/// An event as stored in the log.
public struct RecordedEvent: Sendable, Hashable {
    /// The global position, unique and increasing in the order positions were handed out
    /// (which is not always the order of commit: readers use `checkpoint`).
    public var position: Int64
    /// The id of the transaction that wrote it (`xid8`).
    public var transactionId: UInt64
    public var streamId: String
    public var streamVersion: Int64
    public var type: String
    public var schemaVersion: Int
    public var payloadJSON: String
    public var metadataJSON: String
    public var idempotencyKey: String?
    public var recordedAt: Date
    /// The data keys of the people whose sealed fields the payload holds, read with it
    /// (`PersonalDataKeys.attachKeys`); not part of the event's identity.
    public var keyRing: KeyRing? {
        get { attached.ring }
        set { attached = AttachedKeys(ring: newValue, seal: nil) }
    }
    /// The `$seal` of the payload, read when the keys were attached.
    var attachedSeal: (id: String, person: String)? { attached.seal }
    private var attached = AttachedKeys(ring: nil, seal: nil)

    mutating func attachKeys(_ ring: KeyRing, seal: (id: String, person: String)) {
        attached = AttachedKeys(ring: ring, seal: seal)
    }

    public init(
        position: Int64, transactionId: UInt64, streamId: String, streamVersion: Int64, type: String, schemaVersion: Int, payloadJSON: String,
        metadataJSON: String, idempotencyKey: String?, recordedAt: Date
    ) {
        self.position = position
        self.transactionId = transactionId
        self.streamId = streamId
        self.streamVersion = streamVersion
        self.type = type
        self.schemaVersion = schemaVersion
        self.payloadJSON = payloadJSON
        self.metadataJSON = metadataJSON
        self.idempotencyKey = idempotencyKey
        self.recordedAt = recordedAt
    }

    /// Where a reader that has consumed this event resumes.
    public var checkpoint: Checkpoint { Checkpoint(transactionId: transactionId, position: position) }

    public func metadata() throws -> EventMetadata {
        try JSONDecoder().decode(EventMetadata.self, from: Data(metadataJSON.utf8))
    }

    /// The payload as a typed event, brought to the current schema version by the registry's upcasters.
    public func decode<P: EventPayload>(_ type: P.Type, using registry: EventTypeRegistry) throws -> P {
        try openingPersonalData { payloadJSON in
            if registry.currentReader(type: P.eventType, schemaVersion: schemaVersion) != nil, let value = JanssonDecoding.decode(P.self, from: payloadJSON) {
                return value
            }
            return try registry.decode(P.self, schemaVersion: schemaVersion, payload: Data(payloadJSON.utf8))
        }
    }

    /// The payload as whatever type the registry knows for `type`: read from libjansson's tree when
    /// it is of the current shape (`JanssonDecoding`, the values `JSONDecoder` gives, a tenth of its
    /// cost), else, and for every error, by the registry (upcasters and `JSONDecoder`).
    public func decode(using registry: EventTypeRegistry) throws -> any EventPayload {
        try openingPersonalData { payloadJSON in
            if let reader = registry.currentReader(type: type, schemaVersion: schemaVersion) {
                var text = payloadJSON
                if let value = text.withUTF8({ JanssonDecoding.decode(from: UnsafeRawBufferPointer($0), reader) }) { return value }
            }
            return try registry.decode(type: type, schemaVersion: schemaVersion, payload: Data(payloadJSON.utf8))
        }
    }
}

/// The result of appending one event: the stored event, and whether this append wrote it (false
/// when its idempotency key was already known and the original is returned).
public struct AppendedEvent: Sendable, Hashable {
    public var event: RecordedEvent
    public var wasAppended: Bool
}

/// A reader's place in the log: the last (transaction id, position) it consumed. Readers consume in
/// this order, which never skips an event that commits late (see docs/event-log.md).
public struct Checkpoint: Sendable, Hashable, Comparable, Codable, CustomStringConvertible {
    public var transactionId: UInt64
    public var position: Int64

    public init(transactionId: UInt64, position: Int64) {
        self.transactionId = transactionId
        self.position = position
    }

    /// Before the first event.
    public static let start = Checkpoint(transactionId: 0, position: 0)

    public static func < (lhs: Checkpoint, rhs: Checkpoint) -> Bool {
        (lhs.transactionId, lhs.position) < (rhs.transactionId, rhs.position)
    }

    public var description: String { "\(transactionId)/\(position)" }
}

/// What a stream must look like for an append to go ahead.
public enum ExpectedVersion: Sendable, Hashable {
    /// Whatever version the stream is at.
    case any
    /// The stream has no event yet.
    case noStream
    /// The stream's last event has exactly this version.
    case exactly(Int64)

    var required: Int64? {
        switch self {
        case .any: nil
        case .noStream: 0
        case .exactly(let version): version
        }
    }
}

/// Errors of the event log that callers act on.
public enum EventLogError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The stream was not at the expected version; nothing was written.
    case wrongExpectedVersion(stream: String, expected: Int64, actual: Int64)
    /// An event in the batch is not acceptable; nothing was written. `index` is its place in the batch.
    case invalidEvent(index: Int, field: String, reason: String)
    /// The event at `index` carries an idempotency key the log (or an earlier event of the batch)
    /// already holds for another event: another stream, type or payload. A retry sends the same
    /// event; this is a different one under a used key. Nothing was written.
    case idempotencyKeyReused(index: Int, key: String)

    public var description: String {
        switch self {
        case .wrongExpectedVersion(let stream, let expected, let actual):
            "Stream \"\(stream)\" is at version \(actual), not the expected \(expected); nothing was appended."
        case .invalidEvent(let index, let field, let reason):
            "Event \(index) of the batch: \(field) \(reason); nothing was appended."
        case .idempotencyKeyReused(let index, let key):
            "Event \(index) of the batch: idempotency key \"\(key)\" was already used for another event (stream, type or payload differ); nothing was appended."
        }
    }
}

extension NewEvent {
    /// An event of the catalogue, on its own stream.
    public init<E: CatalogueEvent>(_ event: E, metadata: EventMetadata = EventMetadata(), idempotencyKey: String? = nil) throws {
        try self.init(streamId: event.streamId, payload: event, metadata: metadata, idempotencyKey: idempotencyKey)
    }

    /// An event of the catalogue whose type is known only at run time.
    public init(catalogueEvent event: any CatalogueEvent, metadata: EventMetadata = EventMetadata(), idempotencyKey: String? = nil) throws {
        func make<E: CatalogueEvent>(_ event: E) throws -> NewEvent {
            try NewEvent(event, metadata: metadata, idempotencyKey: idempotencyKey)
        }
        self = try make(event)
    }
}
