import EventLog
import Foundation
import InboxDomain

/// Where an event goes when a replay cuts the log into slices: to one slice, to every slice, or to
/// none (an event that changes nothing of the fold's rows).
enum ReplaySliceRoute: Sendable, Hashable {
    case slice(Int)
    case everywhere
    case nowhere
}

/// Cuts a replay's in-memory folds into slices of people, so that a slice's state (the bell's
/// entries of its people, the threads of its buyers) is what a replay holds at a time, whatever
/// the length of the log.
///
/// A person is in slice `hash(id) mod count`; a conversation is in its first buyer's slice (the
/// buyer's bell and the thread's rows together), a saved search in its first creator's. The
/// router learns those from the events, in log order, before it routes them: they are the facts
/// that cross slices, a few bytes a conversation and a search, kept whole.
///
/// A slice's fold sees every event that can change its rows and no other, and each row belongs to
/// one slice, so the slices' rows together are the rows of one fold over the whole log, with two
/// exceptions the folds name as hazards (`bellHazard`, and a message id of two threads found by the
/// messages' primary key): ids chosen by producers that two slices could both make. A projection
/// with a hazard is replayed again through SQL (`Replayer`).
struct ReplaySliceRouter: Sendable {
    let count: Int
    /// Per conversation, the slice of its first buyer.
    private var conversations: [String: Int32] = [:]
    /// Per saved search, the slice of the person it was first created for.
    private var searches: [String: Int32] = [:]
    /// Per legacy notification id, the person it was first imported for.
    private var legacyOwners: [String: String] = [:]
    /// Why the bell cannot be folded in slices of this log, if it cannot.
    private(set) var bellHazard: String?

    init(count: Int) { self.count = max(1, count) }

    /// Takes in what `event` says about where things belong. Call once per event, in log order,
    /// before routing it.
    mutating func observe(_ event: ProjectedEvent) {
        switch event.payload {
        case let started as ConversationStarted:
            if conversations[started.conversationId] == nil { conversations[started.conversationId] = Int32(person(started.buyerId)) }
        case let created as SavedSearchCreated:
            if searches[created.savedSearchId] == nil { searches[created.savedSearchId] = Int32(person(created.personId)) }
        case let legacy as LegacyNotificationImported:
            observeLegacy(legacy)
        default:
            break
        }
    }

    /// A legacy entry keeps the id it came with: the bell makes it unless an entry with that id
    /// exists, of whoever. Two people's imports of one id, or an id shaped like the bell's own
    /// (UUID version 8, `BellProjection.notificationId`), could each be made in its own slice where
    /// one fold over the log makes only the first.
    private mutating func observeLegacy(_ legacy: LegacyNotificationImported) {
        guard bellHazard == nil else { return }
        if let owner = legacyOwners[legacy.notificationId] {
            if owner != legacy.personId {
                bellHazard = "legacy notification \(legacy.notificationId) was imported for \(owner) and for \(legacy.personId)"
            }
            return
        }
        legacyOwners[legacy.notificationId] = legacy.personId
        let id = Array(legacy.notificationId.utf8)
        if id.count == 36 && id[14] == UInt8(ascii: "8") {
            bellHazard = "legacy notification \(legacy.notificationId) has the shape of the bell's own ids"
        }
    }

    func person(_ id: String) -> Int { Self.slice(of: id, count: count) }

    /// The slice of the conversation's first buyer; a conversation never started (an event about it
    /// is parked, or changes nothing) by its id.
    func conversation(_ id: String) -> Int { conversations[id].map(Int.init) ?? Self.slice(of: id, count: count) }

    func search(_ id: String) -> Int { searches[id].map(Int.init) ?? Self.slice(of: id, count: count) }

    /// Anything else keyed by an id of its own (a watch's status in the threads).
    func key(_ id: String) -> Int { Self.slice(of: id, count: count) }

    /// FNV-1a of the id's bytes: the same slice in every process and release (Swift's `Hasher` is
    /// seeded per process).
    static func slice(of id: String, count: Int) -> Int {
        if count <= 1 { return 0 }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in id.utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x100_0000_01b3
        }
        return Int(hash % UInt64(count))
    }
}

/// The events of the slices after the first, kept on disk between the pass over the log and the
/// slices' own passes: each record the event as stored (so a slice decodes it as the log gives it)
/// and which of the sliced folds it is for.
///
/// One file per slice in `directory`, deleted when the replay is done with it (or fails).
final class ReplaySpill: @unchecked Sendable {
    private let directory: URL
    private var files: [Int: FileHandle] = [:]
    private var buffers: [Int: [UInt8]] = [:]
    private(set) var counts: [Int: Int] = [:]
    private var paths: [Int: URL] = [:]
    private static let chunk = 1 << 20

    init(in parent: URL, slices: Int) throws {
        directory = parent.appendingPathComponent("\(Self.prefix)\(getpid())-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        for slice in 1..<max(1, slices) {
            let path = directory.appendingPathComponent("slice-\(slice)")
            guard FileManager.default.createFile(atPath: path.path, contents: nil) else {
                throw ProjectionError("cannot create the replay's spill file \(path.path)")
            }
            paths[slice] = path
            files[slice] = try FileHandle(forWritingTo: path)
            buffers[slice] = []
        }
    }

    deinit { remove() }

    private static let prefix = "inbox-replay-"

    /// Deletes the spill folders in `parent` of replays whose process is gone (killed before it
    /// could delete its own: a `SIGKILL`, a crash, a machine that lost power), and returns their
    /// names. A folder is its process's while a process of that id is alive on this machine, so the
    /// spill folder must be one machine's own (the default, the temporary folder, is).
    static func removeAbandoned(in parent: URL) -> [String] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: parent.path) else { return [] }
        var removed: [String] = []
        for name in names where name.hasPrefix(prefix) {
            guard let pid = Int32(name.dropFirst(prefix.count).prefix { $0 != "-" }), pid > 0, pid != getpid() else { continue }
            // ESRCH: no such process. EPERM means one is alive (another user's); leave it.
            guard kill(pid, 0) != 0, errno == ESRCH else { continue }
            if (try? FileManager.default.removeItem(at: parent.appendingPathComponent(name, isDirectory: true))) != nil { removed.append(name) }
        }
        return removed.sorted()
    }

    /// Appends `record` for the folds of `mask` to `slice`'s file.
    func append(_ record: RecordedEvent, mask: UInt8, to slice: Int) throws {
        guard var buffer = buffers[slice] else { throw ProjectionError("no spill file for slice \(slice)") }
        buffers[slice] = nil
        buffer.append(mask)
        Self.put(record.position, &buffer)
        Self.put(Int64(bitPattern: record.transactionId), &buffer)
        Self.put(record.streamVersion, &buffer)
        Self.put(Int64(record.schemaVersion), &buffer)
        Self.put(Int64(bitPattern: record.recordedAt.timeIntervalSinceReferenceDate.bitPattern), &buffer)
        Self.put(record.streamId, &buffer)
        Self.put(record.type, &buffer)
        Self.put(record.payloadJSON, &buffer)
        Self.put(record.metadataJSON, &buffer)
        if let key = record.idempotencyKey {
            buffer.append(1)
            Self.put(key, &buffer)
        } else {
            buffer.append(0)
        }
        counts[slice, default: 0] += 1
        if buffer.count >= Self.chunk {
            try files[slice]?.write(contentsOf: buffer)
            buffer.removeAll(keepingCapacity: true)
        }
        buffers[slice] = buffer
    }

    /// Writes what is buffered and closes the files for writing.
    func finishWriting() throws {
        for (slice, buffer) in buffers where !buffer.isEmpty { try files[slice]?.write(contentsOf: buffer) }
        buffers = [:]
        for file in files.values { try file.close() }
        files = [:]
    }

    /// The records of `slice`, `limit` at a time, in the order they were appended.
    func reader(for slice: Int) throws -> Reader {
        guard let path = paths[slice] else { throw ProjectionError("no spill file for slice \(slice)") }
        return Reader(file: try FileHandle(forReadingFrom: path))
    }

    /// Deletes the file of `slice` (done with it) or, without a slice, all of them.
    func remove(_ slice: Int? = nil) {
        if let slice {
            if let path = paths.removeValue(forKey: slice) { try? FileManager.default.removeItem(at: path) }
            return
        }
        for file in files.values { try? file.close() }
        files = [:]
        try? FileManager.default.removeItem(at: directory)
        paths = [:]
    }

    final class Reader: @unchecked Sendable {
        private let file: FileHandle
        private var bytes: [UInt8] = []
        private var offset = 0
        private var ended = false

        init(file: FileHandle) { self.file = file }
        deinit { try? file.close() }

        /// Up to `limit` records with their masks; empty at the end.
        func next(_ limit: Int) throws -> [(record: RecordedEvent, mask: UInt8)] {
            var records: [(RecordedEvent, UInt8)] = []
            records.reserveCapacity(limit)
            while records.count < limit {
                if let record = try parse() {
                    records.append(record)
                    continue
                }
                if ended { break }
                try refill()
            }
            return records
        }

        private func refill() throws {
            bytes.removeSubrange(0..<offset)
            offset = 0
            if let more = try file.read(upToCount: ReplaySpill.chunk), !more.isEmpty {
                bytes.append(contentsOf: more)
            } else {
                ended = true
                if !bytes.isEmpty { throw ProjectionError("a replay spill file ends inside a record") }
            }
        }

        /// The next whole record in the buffer, nil when the buffer holds only part of one.
        private func parse() throws -> (RecordedEvent, UInt8)? {
            var cursor = offset
            func int() -> Int64? {
                guard cursor + 8 <= bytes.count else { return nil }
                var value: UInt64 = 0
                for index in 0..<8 { value |= UInt64(bytes[cursor + index]) << (8 * UInt64(index)) }
                cursor += 8
                return Int64(bitPattern: value)
            }
            func string() -> String? {
                guard let length = int(), length >= 0, cursor + Int(length) <= bytes.count else { return nil }
                defer { cursor += Int(length) }
                return String(decoding: bytes[cursor..<cursor + Int(length)], as: UTF8.self)
            }
            guard cursor < bytes.count else { return nil }
            let mask = bytes[cursor]
            cursor += 1
            guard let position = int(), let transaction = int(), let version = int(), let schema = int(), let time = int(),
                let stream = string(), let type = string(), let payload = string(), let metadata = string(), cursor < bytes.count
            else { return nil }
            let hasKey = bytes[cursor] == 1
            cursor += 1
            var key: String?
            if hasKey {
                guard let value = string() else { return nil }
                key = value
            }
            offset = cursor
            let record = RecordedEvent(
                position: position, transactionId: UInt64(bitPattern: transaction), streamId: stream, streamVersion: version, type: type,
                schemaVersion: Int(schema), payloadJSON: payload, metadataJSON: metadata, idempotencyKey: key,
                recordedAt: Date(timeIntervalSinceReferenceDate: Double(bitPattern: UInt64(bitPattern: time))))
            return (record, mask)
        }
    }

    private static func put(_ value: Int64, _ buffer: inout [UInt8]) {
        let bits = UInt64(bitPattern: value)
        for index in 0..<8 { buffer.append(UInt8(truncatingIfNeeded: bits >> (8 * UInt64(index)))) }
    }

    private static func put(_ text: String, _ buffer: inout [UInt8]) {
        put(Int64(text.utf8.count), &buffer)
        buffer.append(contentsOf: text.utf8)
    }
}
