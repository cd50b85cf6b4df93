import Crypto
import Encodings
import Foundation
import InboxDomain
import PostgresClient
import Synchronization

/// The personal fields of the log sealed per person (docs/event-log.md, "Personal data"): a data
/// key per person (`person_data_keys`), wrapped by the key-encryption key of
/// `INBOX_PERSONAL_DATA_KEY_FILE`. Installed once per process (`install`); without it nothing is
/// sealed, and a log that holds sealed fields cannot be read.
///
/// - **Sealing** (at append): each personal field (`PersonalText`) of an event that holds personal
///   data (`HoldsPersonalData`) is AES-256-GCM under its person's key, with the event's `$seal` (96
///   random bits of its own and its person: `<id>:<person>`), its stream, the person, the type and
///   the field's name as associated data, so a sealed value copied into another event or stream
///   does not open; beside it a MAC of the text under the same key, by which a retried append is
///   known as the same event.
/// - **Opening** (at read): the keys of the people a batch of events names are read from
///   PostgreSQL for that batch, never from a cache, so a key deleted is a key gone for every reader
///   at once; a field whose person was erased reads as `PersonalText.erased`.
/// - **Erasing** (`erase`): the key is deleted and the person remembered in `person_erasures`;
///   their fields appended later are stored erased.
public final class PersonalDataKeys: Sendable {
    let kek: SecretsKey
    /// The key-encryption key being replaced (`INBOX_PERSONAL_DATA_PREVIOUS_KEY_FILE`), while a
    /// rotation is under way: data keys still wrapped by it open too (`rewrap` rewraps them).
    let previous: SecretsKey?
    /// Data keys already committed, for sealing, by database and person: a key made by an append
    /// is kept here once its transaction has committed (`remember`), never before.
    private let cache = Mutex<[String: [String: [UInt8]]]>([:])
    static let cacheLimit = 100_000

    public init(kek: SecretsKey, previous: SecretsKey? = nil) {
        self.kek = kek
        self.previous = previous
    }

    /// The process's keys, installed at start by the command that reads the setting.
    private static let installed = Mutex<PersonalDataKeys?>(nil)

    public static var current: PersonalDataKeys? { installed.withLock { $0 } }

    /// Installs `keys` for every append and read of this process (a second install keeps the first
    /// when it is the same key, and is refused otherwise).
    public static func install(_ keys: PersonalDataKeys) throws {
        try installed.withLock { current in
            if let current, current.kek.fingerprint != keys.kek.fingerprint {
                throw CryptoError("Another personal data key-encryption key is installed in this process.")
            }
            if current == nil { current = keys }
        }
    }

    /// Installs `keys` (nil: none) whatever was installed: for the benchmark that measures the same
    /// work with and without sealing in one process (`inbox-bench sealing`), never for a node.
    public static func swapForMeasuring(_ keys: PersonalDataKeys?) {
        installed.withLock { $0 = keys }
    }

    static func purpose(_ person: String) -> String { "person_data_keys/\(person)" }

    // MARK: Sealing

    /// What sealing a batch needs: each event's personal fields and their owner (nil: none), the
    /// keys its people have (nil for one erased), and the people who have none yet, in the order of
    /// their ids.
    struct KeyPlan {
        var payloads: [PersonalFields?]
        var keys: [String: [UInt8]?]
        var unknown: [String]
    }

    /// The plan of sealing `events`: their people's keys from the cache, then those stored, read in
    /// one query. Its `unknown` people get their keys made by `sealed(_:plan:on:)`; outside a
    /// transaction the append then runs in one, so the keys and the events take one commit.
    func plan(_ events: [NewEvent], on connection: PostgresConnection) throws -> KeyPlan {
        let payloads = try events.map { try Self.personalPayload($0) }
        let database = connection.configuration.redactedDescription
        // The cache first, each person once; only the people it lacks are sorted.
        var keys: [String: [UInt8]?] = [:]
        keys.reserveCapacity(payloads.count)
        var missing: Set<String> = []
        cache.withLock { cache in
            let cached = cache[database] ?? [:]
            for case let payload? in payloads {
                if let key = cached[payload.owner] { keys[payload.owner] = .some(key) } else { missing.insert(payload.owner) }
            }
        }
        if missing.isEmpty { return KeyPlan(payloads: payloads, keys: keys, unknown: []) }
        let (stored, unknown) = try storedKeys(for: missing.sorted(), database: database, on: connection)
        keys.merge(stored) { _, stored in stored }
        return KeyPlan(payloads: payloads, keys: keys, unknown: unknown)
    }

    /// New keys for `people` (sorted ids, none of whom had one a moment ago), in one transaction
    /// (the caller's, or one of its own) under each person's lock, taken in the order of their ids:
    /// erasing takes the same lock, so no key is made for somebody being erased, and two appends
    /// making keys for the same new people take their locks in one order. The locks and the insert
    /// go in one round trip; a person who got a key meanwhile, or was erased, is read. A key made is
    /// not cached here: the transaction may roll back. Whoever commits it may `remember` it.
    func makeKeys(_ people: [String], on connection: PostgresConnection) throws -> [String: [UInt8]?] {
        let make = { () throws -> [String: [UInt8]?] in
            connection.executeWithNext(Self.locking(people))
            let fresh = people.map { (person: $0, key: SecureRandom.bytes(AES256GCM.keyBytes)) }
            // A statement of its own after the locks, so its snapshot sees an erasure that committed
            // while they were awaited.
            let inserted = Set(
                try connection.query(
                    """
                    INSERT INTO person_data_keys (person_id, wrapped)
                    SELECT p, decode(w, 'hex') FROM unnest($1::text[], $2::text[]) AS u(p, w)
                    WHERE NOT EXISTS (SELECT 1 FROM person_erasures e WHERE e.person_id = u.p)
                    ON CONFLICT (person_id) DO NOTHING
                    RETURNING person_id
                    """, people, try fresh.map { Hex.encode(try self.kek.seal($0.key, for: Self.purpose($0.person))) }
                ).map { try $0.decode(String.self, "person_id") })
            var made: [String: [UInt8]?] = [:]
            for (person, key) in fresh where inserted.contains(person) { made[person] = .some(key) }
            let others = people.filter { !inserted.contains($0) }
            if !others.isEmpty {
                let stored = try self.stored(others, on: connection)
                for person in others {
                    switch stored[person] {
                    case .erased: made[person] = .some(nil)
                    case .key(let key): made[person] = .some(key)
                    case nil: throw PersonalDataError.keyNotMade(person: person)
                    }
                }
            }
            return made
        }
        return connection.isInTransaction ? try make() : try connection.transaction { _ in try make() }
    }

    /// The keys of `missing` (people not cached) as stored (cached now), nil for one erased, and
    /// the people who have neither, in the order given.
    private func storedKeys(for missing: [String], database: String, on connection: PostgresConnection) throws -> (keys: [String: [UInt8]?], unknown: [String]) {
        var keys: [String: [UInt8]?] = [:]
        var unknown: [String] = []
        var found: [String: [UInt8]] = [:]
        let stored = try stored(missing, on: connection)
        for person in missing {
            switch stored[person] {
            case .erased: keys[person] = .some(nil)
            case .key(let key):
                keys[person] = .some(key)
                found[person] = key
            case nil: unknown.append(person)
            }
        }
        cache(found, database: database)
        return (keys, unknown)
    }

    /// Caches keys that `makeKeys` returned, once the transaction that made them has committed (an
    /// erased person's nil is not cached, as `storedKeys` does not).
    func remember(_ made: [String: [UInt8]?], on connection: PostgresConnection) {
        cache(made.compactMapValues { $0 }, database: connection.configuration.redactedDescription)
    }

    private func cache(_ found: [String: [UInt8]], database: String) {
        if found.isEmpty { return }
        cache.withLock { cache in
            if cache.values.reduce(found.count, { $0 + $1.count }) > Self.cacheLimit { cache.removeAll() }
            cache[database, default: [:]].merge(found) { _, new in new }
        }
    }

    enum StoredKey {
        case erased
        case key([UInt8])
    }

    /// What is stored of each of `people`: their key, that they were erased, or nothing (absent).
    private func stored(_ people: [String], on connection: PostgresConnection) throws -> [String: StoredKey] {
        var stored: [String: StoredKey] = [:]
        for row in try connection.query(
            """
            SELECT u.p, k.wrapped, EXISTS (SELECT 1 FROM person_erasures e WHERE e.person_id = u.p) AS erased
            FROM unnest($1::text[]) AS u(p) LEFT JOIN person_data_keys k ON k.person_id = u.p
            """, people)
        {
            let person = try row.decode(String.self, "p")
            if try row.decode(Bool.self, "erased") {
                stored[person] = .erased
            } else if let wrapped = try row.decode(Data?.self, "wrapped") {
                stored[person] = .key(try unwrap(Array(wrapped), person))
            }
        }
        return stored
    }

    func unwrap(_ wrapped: [UInt8], _ person: String) throws -> [UInt8] {
        if let key = try? kek.open(wrapped, for: Self.purpose(person)) { return key }
        if let previous, let key = try? previous.open(wrapped, for: Self.purpose(person)) { return key }
        throw PersonalDataError.wrongKey(person: person)
    }

    /// Wraps every data key again under the current key-encryption key, `batch` at a time (each
    /// batch its own transaction, so nodes go on meanwhile): the second step of a rotation, once
    /// every node reads both keys. Returns how many were wrapped again (those under the current key
    /// already are left as they are).
    public func rewrap(batch: Int = 1_000, on connection: PostgresConnection) throws -> Int {
        var after = ""
        var rewrapped = 0
        while true {
            let rows = try connection.transaction { connection -> Int in
                let rows = try connection.query(
                    "SELECT person_id, wrapped FROM person_data_keys WHERE person_id > $1 ORDER BY person_id LIMIT $2 FOR UPDATE", after, batch)
                for row in rows {
                    let person = try row.decode(String.self, "person_id")
                    let wrapped = Array(try row.decode(Data.self, "wrapped"))
                    after = person
                    if (try? kek.open(wrapped, for: Self.purpose(person))) != nil { continue }
                    let key = try unwrap(wrapped, person)
                    _ = try connection.query(
                        "UPDATE person_data_keys SET wrapped = $2 WHERE person_id = $1", person, Data(try kek.seal(key, for: Self.purpose(person))))
                    rewrapped += 1
                }
                return rows.count
            }
            if rows < batch { return rewrapped }
        }
    }

    /// Serializes making a person's key with erasing them.
    static func lock(_ person: String, on connection: PostgresConnection) throws {
        let statement = locking([person])
        _ = try connection.query(statement.sql, binds: statement.binds)
    }

    /// The statement that takes `people`'s locks, in their order.
    static func locking(_ people: [String]) -> PostgresStatement {
        PostgresStatement(
            "SELECT pg_advisory_xact_lock(hashtext('person_data_keys'), hashtext(p)) FROM unnest($1::text[]) WITH ORDINALITY AS u(p, n) ORDER BY n",
            people)
    }

    /// `event`, its personal fields sealed for the log (`$seal` added), when it holds personal
    /// data; nil when it holds none.
    func sealed(_ event: NewEvent, on connection: PostgresConnection) throws -> String? {
        try sealed([event], on: connection)[0]
    }

    /// The payloads of `events` as the log stores them (nil: as given). The keys of their people
    /// are looked up or made first, in the order of the people's ids, so two appends that make
    /// keys for the same people at once take the people's locks in one order (no deadlock).
    func sealed(_ events: [NewEvent], on connection: PostgresConnection) throws -> [String?] {
        try sealed(events, plan: try plan(events, on: connection), on: connection)
    }

    /// `sealed(_:on:)` with the batch's plan, its unknown people's keys made first.
    func sealed(_ events: [NewEvent], plan: KeyPlan, on connection: PostgresConnection) throws -> [String?] {
        var payloads = [String?](repeating: nil, count: events.count)
        try seal(events, plan: plan, on: connection) { index, sealed in payloads[index] = String(decoding: sealed, as: UTF8.self) }
        return payloads
    }

    /// Seals the payloads of `events` that hold personal data, giving each one's text as the log
    /// stores it to `each` with the event's index, in the events' order (the bytes are `each`'s to
    /// copy, not to keep). A batch of at least `parallelFrom` such events is sealed on every core,
    /// a share each: the append waits for it, and PostgreSQL has nothing to do meanwhile.
    func seal(
        _ events: [NewEvent], plan: KeyPlan, on connection: PostgresConnection, each: (_ index: Int, _ sealed: UnsafeBufferPointer<UInt8>) throws -> Void
    ) throws {
        var keys = plan.keys
        if !plan.unknown.isEmpty { keys.merge(try makeKeys(plan.unknown, on: connection)) { _, made in made } }
        var work: [SealingWork] = []
        work.reserveCapacity(events.count)
        for (index, payload) in plan.payloads.enumerated() {
            guard let payload, let key = keys[payload.owner] else { continue }
            work.append(SealingWork(index: index, personal: payload, key: key))
        }
        let parts = work.count >= Self.parallelFrom ? min(Self.cores, work.count / (Self.parallelFrom / 2)) : 1
        let sealed: [SealedPart]
        if parts <= 1 {
            sealed = [try seal(work[...], of: events)]
        } else {
            let work = work
            let size = (work.count + parts - 1) / parts
            let results = Mutex<[Int: Result<SealedPart, any Error>]>([:])
            DispatchQueue.concurrentPerform(iterations: parts) { part in
                let result = Result { try self.seal(work[min(work.count, part * size)..<min(work.count, (part + 1) * size)], of: events) }
                results.withLock { $0[part] = result }
            }
            sealed = try results.withLock { results in try (0..<parts).map { try results[$0]!.get() } }
        }
        for part in sealed {
            try part.bytes.withUnsafeBufferPointer { bytes in
                for (index, range) in part.payloads { try each(index, UnsafeBufferPointer(rebasing: bytes[range])) }
            }
        }
    }

    /// From this many events that hold personal data, a batch is sealed on every core.
    static let parallelFrom = 32
    /// Read once: Foundation reads the cgroup's CPU quota from files at every call.
    static let cores = ProcessInfo.processInfo.activeProcessorCount

    /// An event to seal (its index in the batch), its personal fields and its key (nil: its person
    /// is erased). The event itself is read from the batch: copying it here cost as much as sealing.
    struct SealingWork: Sendable {
        let index: Int
        let personal: PersonalFields
        let key: [UInt8]?
    }

    /// Sealed payloads one after another in `bytes`, each with its event's index.
    struct SealedPart: Sendable {
        var bytes: [UInt8] = []
        var payloads: [(index: Int, range: Range<Int>)] = []
    }

    /// The payloads of `work` sealed on this thread, with OpenSSL contexts of its own.
    private func seal(_ work: ArraySlice<SealingWork>, of events: [NewEvent]) throws -> SealedPart {
        // A seal id and a nonce for each of (usually) one field an event.
        let sealer = try BatchSealer(random: RandomBytes(expected: work.count * (Self.sealIdRandomBytes + AES256GCM.nonceBytes)))
        var part = SealedPart()
        part.bytes.reserveCapacity(work.reduce(0) { $0 + events[$1.index].payloadJSON.utf8.count + 200 })
        part.payloads.reserveCapacity(work.count)
        for item in work {
            let start = part.bytes.count
            guard try seal(events[item.index], personal: item.personal, key: item.key, sealer: sealer, to: &part.bytes) else { continue }
            part.payloads.append((item.index, start..<part.bytes.count))
        }
        return part
    }

    /// `event` sealed under `key` (nil: its person is erased, the fields are stored erased),
    /// appended to `output`; false when its payload is not one object (stored as given).
    private func seal(_ event: NewEvent, personal: PersonalFields, key: [UInt8]?, sealer: BatchSealer, to output: inout [UInt8]) throws -> Bool {
        let person = personal.owner
        let seal = sealer.sealId(person)
        let fields = personal.fields
        sealer.startEvent(seal: seal, stream: event.streamId, person: person, type: event.type)
        // The payload's text with its personal members replaced (PersonalDataSplice), or, for a
        // text that is not one object, libjansson's tree of it.
        if try PersonalDataSplice.seal(event.payloadJSON, fields: fields, seal: seal, to: &output, sealing: { text, field, output in
            if let key { try sealer.seal(text, field: field, key: key, to: &output) } else { output.append(contentsOf: #"{"$erased":true}"#.utf8) }
        }) {
            return true
        }
        // Not one object: PostgreSQL refuses it (the log's payloads are objects).
        guard case .object(var members) = try JSONValue(parsing: event.payloadJSON) else { return false }
        for field in fields {
            guard case .string(var text)? = members[field] else { continue }
            guard let key else {
                members[field] = .object(["$erased": .bool(true)])
                continue
            }
            let sealed = try text.withUTF8 { try sealer.sealedField(UnsafeRawBufferPointer($0), field: field, key: key) }
            members[field] = .object(["$sealed": .object(["v": .string(sealed.v), "h": .string(sealed.h)])])
        }
        members["$seal"] = .string(seal)
        var text = JSONText(capacity: event.payloadJSON.utf8.count + 160)
        text.value(.object(members))
        output.append(contentsOf: text.bytes)
        return true
    }

    /// `sealed(_:on:)`, for the benchmark that measures it alone.
    public func sealedForMeasuring(_ events: [NewEvent], on connection: PostgresConnection) throws -> [String?] {
        try sealed(events, on: connection)
    }

    /// The personal fields of `event` and their owner, when its type holds personal data.
    static func personalPayload(_ event: NewEvent) throws -> PersonalFields? {
        guard personalTypes.contains(event.type) else { return nil }
        if let personal = event.typedPayload?.personalData { return personal }
        // A payload that is not of its type's shape is the validator's to refuse; without one it
        // is stored as given (no reader can read it as that type either).
        return (try? InboxCatalogue.registry.decode(type: event.type, schemaVersion: event.schemaVersion, payload: Data(event.payloadJSON.utf8)))?.personalData
    }

    /// The catalogue's types with personal fields.
    public static let personalTypes: Set<String> = Set(
        InboxCatalogue.eventTypes.filter { $0 is any HoldsPersonalData.Type }.map { $0.eventType })

    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return encoder
    }()

    /// A seal id: 96 random bits (16 characters of base64url), the event's own identity that its
    /// sealed fields are bound to.
    static let sealIdRandomBytes = 12

    // MARK: Opening

    /// The keys of the people `records` name, read now, attached to every record that holds
    /// sealed fields (the others are returned as they are).
    public func attachKeys(to records: consuming [RecordedEvent], on connection: PostgresConnection, ring: KeyRing? = nil) throws -> [RecordedEvent] {
        let seals = records.map { Self.seal(in: $0.payloadJSON) }
        let people = Set(seals.lazy.compactMap { $0?.person })
        if people.isEmpty { return records }
        let ring = ring ?? KeyRing()
        try ring.load(people, keys: self, on: connection)
        // In place: the records are the caller's temporary, so nothing of them is copied.
        var records = records
        for (index, seal) in zip(records.indices, seals) {
            if let seal { records[index].attachKeys(ring, seal: seal) }
        }
        return records
    }

    /// Attaches keys when they are installed; when they are not, returns `records` as they are (a
    /// sealed one then fails to decode, saying why).
    public static func attachKeys(to records: consuming [RecordedEvent], on connection: PostgresConnection, ring: KeyRing? = nil) throws -> [RecordedEvent] {
        guard let keys = current else { return records }
        return try keys.attachKeys(to: records, on: connection, ring: ring)
    }

    /// The `$seal` of a payload as the log returns it (or as an append wrote it): its id and
    /// person. Only a top-level key can hold `"$seal"` with its quotes unescaped (payloads given to
    /// an append may not hold the name at all, `EventStore.validate`).
    static func seal(in payload: String) -> (id: String, person: String)? {
        var payload = payload
        return payload.withUTF8 { bytes -> (String, String)? in
            guard let start = ByteSearch.find(sealName, in: bytes, probe: 1) else { return nil }
            var index = start + sealName.count
            while index < bytes.count, bytes[index] == UInt8(ascii: " ") || bytes[index] == UInt8(ascii: ":") { index += 1 }
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
            index += 1
            let begin = index
            while index < bytes.count, bytes[index] != UInt8(ascii: "\"") {
                if bytes[index] == UInt8(ascii: "\\") { return decodedSeal(bytes, from: begin - 1) }
                index += 1
            }
            guard index < bytes.count else { return nil }
            return split(UnsafeBufferPointer(rebasing: bytes[begin..<index]))
        }
    }

    static let sealName = Array(#""$seal""#.utf8)

    /// A `$seal` whose person id holds an escape: read as JSON.
    private static func decodedSeal(_ bytes: UnsafeBufferPointer<UInt8>, from quote: Int) -> (String, String)? {
        var end = quote + 1
        while end < bytes.count {
            if bytes[end] == UInt8(ascii: "\\") {
                end += 2
                continue
            }
            if bytes[end] == UInt8(ascii: "\"") { break }
            end += 1
        }
        guard end < bytes.count, let text = try? JSONDecoder().decode(String.self, from: Data(bytes[quote...end])) else { return nil }
        return split(text)
    }

    private static func split(_ seal: String) -> (String, String)? {
        var seal = seal
        return seal.withUTF8 { split($0) }
    }

    /// `<id>:<person>` at the first colon, in bytes: the id is base64url, so the first colon ends
    /// it whatever the person's id holds (a Character search would miss a colon that a combining
    /// mark follows, and walked the text grapheme by grapheme for every event read).
    private static func split(_ seal: UnsafeBufferPointer<UInt8>) -> (String, String)? {
        guard let colon = seal.firstIndex(of: UInt8(ascii: ":")) else { return nil }
        return (
            String(decoding: UnsafeBufferPointer(rebasing: seal[..<colon]), as: UTF8.self),
            String(decoding: UnsafeBufferPointer(rebasing: seal[(colon + 1)...]), as: UTF8.self)
        )
    }

    // MARK: Erasing

    /// Deletes `person`'s key and remembers them as erased, in the caller's transaction. Returns
    /// whether a key was there.
    @discardableResult
    public static func erase(_ person: String, on connection: PostgresConnection) throws -> Bool {
        try lock(person, on: connection)
        let deleted = try connection.query("DELETE FROM person_data_keys WHERE person_id = $1 RETURNING 1", person).count
        _ = try connection.query("INSERT INTO person_erasures (person_id) VALUES ($1) ON CONFLICT DO NOTHING", person)
        return deleted > 0
    }

    /// Whether the key-encryption key opens the data keys stored (one is tried): the check every
    /// command makes at start. A database with data keys and no key-encryption key, or the wrong
    /// one, is an error saying so.
    public static func check(_ keys: PersonalDataKeys?, on connection: PostgresConnection) throws {
        guard let row = try connection.query("SELECT person_id, wrapped FROM person_data_keys ORDER BY created_at LIMIT 1").first else { return }
        guard let keys else { throw PersonalDataError.noKey }
        _ = try keys.unwrap(Array(try row.decode(Data.self, "wrapped")), try row.decode(String.self, "person_id"))
    }
}

public enum PersonalDataError: Error, CustomStringConvertible {
    case noKey
    case wrongKey(person: String)
    case keyNotMade(person: String)

    public var description: String {
        switch self {
        case .noKey:
            "The log holds personal data sealed per person: set INBOX_PERSONAL_DATA_KEY_FILE to the key-encryption key it was sealed under."
        case .wrongKey(let person):
            "INBOX_PERSONAL_DATA_KEY_FILE does not open the data key of person \(person): it is not the key-encryption key the personal data was sealed under."
        case .keyNotMade(let person):
            "No data key could be made for person \(person), and none is stored: nothing of the batch was appended."
        }
    }
}

/// The data keys read for a batch of events (or a whole replay): by person, nil for one erased.
public final class KeyRing: Sendable {
    private let keys = Mutex<[String: [UInt8]?]>([:])

    public init() {}

    func load(_ people: Set<String>, keys dataKeys: PersonalDataKeys, on connection: PostgresConnection) throws {
        let missing = keys.withLock { known in people.filter { known[$0] == nil } }
        if missing.isEmpty { return }
        var found: [String: [UInt8]?] = [:]
        for row in try connection.query(
            "SELECT p.person_id, k.wrapped FROM unnest($1::text[]) AS p(person_id) LEFT JOIN person_data_keys k USING (person_id)", Array(missing))
        {
            let person = try row.decode(String.self, "person_id")
            found[person] = try row.decode(Data?.self, "wrapped").map { try dataKeys.unwrap(Array($0), person) }
        }
        keys.withLock { $0.merge(found) { _, new in new } }
    }

    /// `person`'s key: nil when it is gone (erased), or when this ring never read it.
    func key(_ person: String) -> [UInt8]? { keys.withLock { $0[person] ?? nil } }
}

/// Random bytes drawn from `SecureRandom` for a whole batch at once and handed out once each: one
/// call of OpenSSL's generator costs as much as sealing a field, and an event needs two or three
/// draws (its seal id and a nonce a field).
struct RandomBytes {
    private var pool: [UInt8] = []
    private var used = 0
    /// How many to draw at a time.
    let draw: Int

    /// `expected`: about how many bytes will be taken (at most 4 KiB are drawn at once).
    init(expected: Int) {
        draw = min(4_096, max(64, expected))
    }

    /// `count` bytes never handed out before, given to `body`.
    mutating func take<T>(_ count: Int, _ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        if used + count > pool.count {
            pool = SecureRandom.bytes(max(draw, count))
            used = 0
        }
        defer { used += count }
        return try pool.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[used..<(used + count)])) }
    }
}

/// Seals the personal fields of a batch's events, on the thread that appends it: OpenSSL's
/// contexts and the bytes each field is built in are made once for the batch, not for each field
/// (they cost more than the sealing of a short text; `inbox-bench sealing`, `seal-only`).
final class BatchSealer {
    private let cipher: AES256GCM.Session
    private let mac = HMAC.Session(.sha256)
    private var random: RandomBytes
    /// The associated data of the event being sealed, up to its type (`FieldCrypto.associatedDataPrefix`).
    private var associated: [UInt8] = []
    private var eventAssociated = 0
    private var type = ""
    private var sealedBytes: [UInt8] = []
    private var macBytes = [UInt8](repeating: 0, count: 32)
    private var macHeader: [UInt8] = []
    /// The type and field `macHeader` was written for: a batch's fields are mostly of one kind.
    private var macHeaderOf: (type: String, field: String)?

    init(random: RandomBytes) throws {
        cipher = try AES256GCM.Session()
        self.random = random
        associated.reserveCapacity(256)
        sealedBytes.reserveCapacity(512)
        macHeader.reserveCapacity(128)
    }

    /// A new seal id for an event of `person`: `<16 characters of base64url>:<person>`.
    func sealId(_ person: String) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(17 + person.utf8.count)
        random.take(PersonalDataKeys.sealIdRandomBytes) { Base64URL.append($0, to: &bytes) }
        bytes.append(UInt8(ascii: ":"))
        bytes.append(contentsOf: person.utf8)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The event whose fields come next.
    func startEvent(seal: String, stream: String, person: String, type: String) {
        associated.removeAll(keepingCapacity: true)
        associated.append(contentsOf: FieldCrypto.associatedDataPrefix)
        FieldCrypto.append(part: seal, to: &associated)
        FieldCrypto.append(part: stream, to: &associated)
        FieldCrypto.append(part: person, to: &associated)
        FieldCrypto.append(part: type, to: &associated)
        eventAssociated = associated.count
        self.type = type
    }

    /// Writes `{"$sealed":{"v":...,"h":...}}` for `text`, the field `field` of the event started.
    func seal(_ text: UnsafeRawBufferPointer, field: String, key: [UInt8], to output: inout [UInt8]) throws {
        try sealBytes(text, field: field, key: key)
        output.append(contentsOf: #"{"$sealed":{"v":""#.utf8)
        Base64URL.append(sealedBytes, to: &output)
        output.append(contentsOf: #"","h":""#.utf8)
        Base64URL.append(macBytes[..<FieldCrypto.macBytes], to: &output)
        output.append(contentsOf: #""}}"#.utf8)
    }

    /// `seal(_:field:key:to:)`'s `v` and `h`, for a payload built as a tree.
    func sealedField(_ text: UnsafeRawBufferPointer, field: String, key: [UInt8]) throws -> SealedField {
        try sealBytes(text, field: field, key: key)
        return SealedField(v: Base64URL.encode(sealedBytes), h: Base64URL.encode(macBytes[..<FieldCrypto.macBytes]))
    }

    /// The sealed text in `sealedBytes`, its MAC in `macBytes`.
    private func sealBytes(_ text: UnsafeRawBufferPointer, field: String, key: [UInt8]) throws {
        associated.removeSubrange(eventAssociated...)
        FieldCrypto.append(part: field, to: &associated)
        sealedBytes.removeAll(keepingCapacity: true)
        if macHeaderOf?.type != type || macHeaderOf?.field != field {
            macHeader.removeAll(keepingCapacity: true)
            FieldCrypto.append(FieldCrypto.macPrefix, [type, field, ""], to: &macHeader)
            macHeaderOf = (type, field)
        }
        let cipher = cipher
        let mac = mac
        let made = try key.withUnsafeBytes { key in
            try random.take(AES256GCM.nonceBytes) { nonce in
                try associated.withUnsafeBytes { associated in
                    try cipher.seal(text, key: key, associatedData: associated, nonce: nonce, to: &sealedBytes)
                }
            }
            return mac.begin(key: key) && macHeader.withUnsafeBytes { mac.update($0) } && mac.update(text)
                && macBytes.withUnsafeMutableBytes { mac.finish(into: $0) }
        }
        guard made else { throw CryptoError("OpenSSL could not compute the MAC of a personal field (HMAC-SHA256).") }
    }
}

/// Opens the sealed fields of one event being decoded.
struct FieldOpener: PersonalDataOpening {
    /// The person's key: nil when it is gone (erased).
    let key: [UInt8]?
    /// The seal's id (the seal bound is the id and the person, `id:person`).
    let sealID: String
    let stream: String
    let person: String
    let type: String

    func open(_ sealed: SealedField, field: String) throws -> PersonalText {
        guard key != nil else { return .erased }
        var v = sealed.v
        var field = field
        return try v.withUTF8 { v in
            try field.withUTF8 { field in
                let opening = FieldOpening.take()
                defer { FieldOpening.giveBack(opening) }
                try open(v, field: field, with: opening)
                return .text(String(decoding: opening.text, as: UTF8.self))
            }
        }
    }

    /// Appends the text of a sealed member as a JSON string, or `{"$erased":true}` when the key is
    /// gone.
    func open(_ sealed: PersonalDataSplice.SealedBytes, field: UnsafeBufferPointer<UInt8>, to output: inout [UInt8]) throws {
        guard key != nil else { return output.append(contentsOf: PersonalDataSplice.erased) }
        let opening = FieldOpening.take()
        defer { FieldOpening.giveBack(opening) }
        try open(sealed.v, field: field, with: opening)
        opening.text.withUnsafeBufferPointer { JSONString.append(utf8: $0, to: &output) }
    }

    private func open(_ v: UnsafeBufferPointer<UInt8>, field: UnsafeBufferPointer<UInt8>, with opening: FieldOpening) throws {
        guard let key, opening.open(v, key: key, of: self, field: field) else { throw PersonalDataFieldError(field: String(decoding: field, as: UTF8.self)) }
    }
}

extension FieldOpener {
    /// The opener of an event sealed with `seal`, its person's key read from `ring` once.
    init(ring: KeyRing, seal: (id: String, person: String), stream: String, type: String) {
        self.init(key: ring.key(seal.person), sealID: seal.id, stream: stream, person: seal.person, type: type)
    }
}

/// What opening a field needs, kept for the next one: an OpenSSL cipher context (making one cost
/// more than opening a short text) and the bytes the sealed value, the associated data and the
/// text are built in. Taken from a small pool by each open, so concurrent decodes each have their
/// own.
final class FieldOpening: @unchecked Sendable {
    private let cipher: AES256GCM.Session?
    // One open at a time uses an opening (the pool hands each to one taker), so the buffers go
    // without the runtime's exclusivity checks: they were a fifth of an open's own time.
    @exclusivity(unchecked) private var sealed: [UInt8] = []
    @exclusivity(unchecked) private var associated: [UInt8] = []
    /// The text of the last field opened.
    @exclusivity(unchecked) private(set) var text: [UInt8] = []

    private init() {
        cipher = try? AES256GCM.Session()
        sealed.reserveCapacity(512)
        associated.reserveCapacity(256)
        text.reserveCapacity(512)
    }

    private static let pool = Mutex<[FieldOpening]>([])

    static func take() -> FieldOpening { pool.withLock { $0.popLast() } ?? FieldOpening() }

    static func giveBack(_ opening: FieldOpening) {
        pool.withLock { if $0.count < 32 { $0.append(opening) } }
    }

    /// The largest sealed value (`v`, base64url) opened: a field of 1 MiB.
    static let largestSealed = (1 << 20) * 4 / 3 + 4

    /// Opens `v` (base64url), the field `field` of the event `opener` opens, into `text`; false
    /// when it does not open (altered, moved, or not base64url).
    func open(_ v: UnsafeBufferPointer<UInt8>, key: [UInt8], of opener: FieldOpener, field: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let cipher, v.count <= Self.largestSealed else { return false }
        sealed.removeAll(keepingCapacity: true)
        guard Base64URL.decode(contiguous: v, appendingTo: &sealed) else { return false }
        associated.removeAll(keepingCapacity: true)
        associated.append(contentsOf: FieldCrypto.associatedDataPrefix)
        FieldCrypto.append(part: opener.sealID, to: &associated)
        associated.append(UInt8(ascii: ":"))
        var person = opener.person
        person.withUTF8 { associated.append(contentsOf: $0) }
        FieldCrypto.append(part: opener.stream, to: &associated)
        FieldCrypto.append(part: opener.person, to: &associated)
        FieldCrypto.append(part: opener.type, to: &associated)
        associated.append(0)
        associated.append(contentsOf: field)
        text.removeAll(keepingCapacity: true)
        do {
            try sealed.withUnsafeBytes { sealed in
                try key.withUnsafeBytes { key in
                    try associated.withUnsafeBytes { try cipher.open(sealed, key: key, associatedData: $0, to: &text) }
                }
            }
        } catch {
            return false
        }
        return true
    }
}

/// A sealed field that does not open with its person's key: altered, or moved from elsewhere.
struct PersonalDataFieldError: Error, CustomStringConvertible {
    let field: String
    var description: String { "The sealed field \(field) does not open with its person's key: it was altered or moved from another event." }
}

enum FieldCrypto {
    /// The associated data of a field: "wristler/personal/v2", the seal (the event's own id and its
    /// person), the stream, the person, the type and the field, NUL between them.
    static let associatedDataPrefix = Array("wristler/personal/v2".utf8)
    static let macPrefix = Array("wristler/personal-mac/v1".utf8)

    /// How many bytes of the MAC of a field (`h`) are kept: 128 bits of HMAC-SHA256 of
    /// "wristler/personal-mac/v1", the type, the field and the text (NUL between them) under the
    /// person's key.
    static let macBytes = 16

    /// `prefix`, then each of `parts` after a NUL.
    static func append(_ prefix: [UInt8], _ parts: [String], to bytes: inout [UInt8]) {
        bytes.reserveCapacity(bytes.count + prefix.count + parts.reduce(0) { $0 + $1.utf8.count + 1 })
        bytes.append(contentsOf: prefix)
        for part in parts { append(part: part, to: &bytes) }
    }

    /// A NUL, then `part`.
    @inline(__always)
    static func append(part: String, to bytes: inout [UInt8]) {
        bytes.append(0)
        var part = part
        part.withUTF8 { bytes.append(contentsOf: $0) }
    }
}

extension RecordedEvent {
    /// The payload as readers see it: as stored when nothing in it is sealed, else its sealed fields
    /// opened (or `{"$erased": true}`) and `$seal` left out. A payload that cannot be read so is
    /// shown as stored.
    public var openedPayloadJSON: String {
        guard PersonalDataKeys.seal(in: payloadJSON) != nil,
            let value = try? decode(using: InboxCatalogue.registry),
            let data = try? PersonalDataKeys.encoder.encode(value)
        else { return payloadJSON }
        return String(decoding: data, as: UTF8.self)
    }

    /// What `body` decodes of the payload, its sealed fields opened by the keys attached to it: in
    /// the text given to `body` (`PersonalDataSplice.opened`), or, for a payload of another shape,
    /// by an opener bound while it decodes the text as stored.
    func openingPersonalData<T>(_ body: (_ payloadJSON: String) throws -> T) throws -> T {
        guard let keyRing, let seal = attachedSeal ?? PersonalDataKeys.seal(in: payloadJSON) else { return try body(payloadJSON) }
        let opener = FieldOpener(ring: keyRing, seal: seal, stream: streamId, type: type)
        if let opened = try PersonalDataSplice.opened(payloadJSON, open: { try opener.open($0, field: $1, to: &$2) }) { return try body(opened) }
        return try PersonalData.$opener.withValue(opener) { try body(payloadJSON) }
    }
}
