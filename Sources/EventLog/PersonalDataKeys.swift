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
    /// is not kept here (its transaction may still roll back).
    private let cache = Mutex<[CacheKey: [UInt8]]>([:])

    struct CacheKey: Hashable {
        let database: String
        let person: String
    }
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

    /// What sealing a batch needs: each event's personal payload (nil: none), the keys its people
    /// have (nil for one erased), and the people who have none yet, in the order of their ids.
    struct KeyPlan {
        var payloads: [(any EventPayload & HoldsPersonalData)?]
        var keys: [String: [UInt8]?]
        var unknown: [String]
    }

    /// The plan of sealing `events`: their people's keys from the cache, then those stored, read in
    /// one query. Its `unknown` people get their keys made by `sealed(_:plan:on:)`; outside a
    /// transaction the append then runs in one, so the keys and the events take one commit.
    func plan(_ events: [NewEvent], on connection: PostgresConnection) throws -> KeyPlan {
        let payloads = try events.map { try Self.personalPayload($0) }
        let people = Set(payloads.compactMap { $0?.personalDataOwner }).sorted()
        let (keys, unknown) = try knownKeys(for: people, database: connection.configuration.redactedDescription, on: connection)
        return KeyPlan(payloads: payloads, keys: keys, unknown: unknown)
    }

    /// New keys for `people` (sorted ids, none of whom had one a moment ago), in one transaction
    /// (the caller's, or one of its own) under each person's lock, taken in the order of their ids:
    /// erasing takes the same lock, so no key is made for somebody being erased, and two appends
    /// making keys for the same new people take their locks in one order. The locks and the insert
    /// go in one round trip; a person who got a key meanwhile, or was erased, is read. A key made is
    /// not cached: the transaction may roll back; the next append reads it.
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

    /// The keys of `people` cached or stored (those stored are cached now), nil for one erased, and
    /// the people who have neither, in the order given.
    private func knownKeys(for people: [String], database: String, on connection: PostgresConnection) throws -> (keys: [String: [UInt8]?], unknown: [String]) {
        var keys: [String: [UInt8]?] = [:]
        var missing: [String] = []
        cache.withLock { cache in
            for person in people {
                if let key = cache[CacheKey(database: database, person: person)] { keys[person] = .some(key) } else { missing.append(person) }
            }
        }
        if missing.isEmpty { return (keys, []) }
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
        cache.withLock { cache in
            if cache.count + found.count > Self.cacheLimit { cache.removeAll(keepingCapacity: true) }
            for (person, key) in found { cache[CacheKey(database: database, person: person)] = key }
        }
        return (keys, unknown)
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
        var keys = plan.keys
        if !plan.unknown.isEmpty { keys.merge(try makeKeys(plan.unknown, on: connection)) { _, made in made } }
        // A seal id and a nonce for each of (usually) one field an event.
        var random = RandomBytes(expected: plan.payloads.lazy.filter { $0 != nil }.count * (Self.sealIdRandomBytes + AES256GCM.nonceBytes))
        return try zip(events, plan.payloads).map { event, payload in
            guard let payload, let key = keys[payload.personalDataOwner] else { return nil }
            return try sealed(event, payload: payload, key: key, random: &random)
        }
    }

    /// `event` sealed under `key` (nil: its person is erased, the fields are stored erased).
    private func sealed(_ event: NewEvent, payload: any EventPayload & HoldsPersonalData, key: [UInt8]?, random: inout RandomBytes) throws -> String? {
        let person = payload.personalDataOwner
        let seal = Base64URL.encode(random.take(Self.sealIdRandomBytes)) + ":" + person
        let sealer = FieldSealer(key: key, seal: seal, stream: event.streamId, person: person, type: event.type)
        let fields = type(of: payload).personalFields
        // The payload's text with its personal members replaced (PersonalDataSplice), or, for a
        // text that is not one object, libjansson's tree of it.
        if let spliced = try PersonalDataSplice.sealed(event.payloadJSON, fields: fields, seal: seal, sealing: { text, field, output in
            switch try sealer.seal(text, field: field, nonce: random.take(AES256GCM.nonceBytes)) {
            case .sealed(let sealed):
                output.append(contentsOf: #"{"$sealed":{"v":""#.utf8)
                output.append(contentsOf: sealed.v.utf8)
                output.append(contentsOf: #"","h":""#.utf8)
                output.append(contentsOf: sealed.h.utf8)
                output.append(contentsOf: #""}}"#.utf8)
            case .erased:
                output.append(contentsOf: #"{"$erased":true}"#.utf8)
            }
        }) {
            return spliced
        }
        guard case .object(var members) = try JSONValue(parsing: event.payloadJSON) else { return nil }
        for field in fields {
            guard case .string(let text)? = members[field] else { continue }
            switch try sealer.seal(text, field: field) {
            case .sealed(let sealed): members[field] = .object(["$sealed": .object(["v": .string(sealed.v), "h": .string(sealed.h)])])
            case .erased: members[field] = .object(["$erased": .bool(true)])
            }
        }
        members["$seal"] = .string(seal)
        var text = JSONText(capacity: event.payloadJSON.utf8.count + 160)
        text.value(.object(members))
        return text.string
    }

    /// `sealed(_:on:)`, for the benchmark that measures it alone.
    public func sealedForMeasuring(_ event: NewEvent, on connection: PostgresConnection) throws -> String? {
        try sealed(event, on: connection)
    }

    /// The typed payload of `event` when its type holds personal data.
    static func personalPayload(_ event: NewEvent) throws -> (any EventPayload & HoldsPersonalData)? {
        guard personalTypes.contains(event.type) else { return nil }
        if let typed = event.typedPayload as? any EventPayload & HoldsPersonalData { return typed }
        // A payload that is not of its type's shape is the validator's to refuse; without one it
        // is stored as given (no reader can read it as that type either).
        return (try? InboxCatalogue.registry.decode(type: event.type, schemaVersion: event.schemaVersion, payload: Data(event.payloadJSON.utf8)))
            as? any EventPayload & HoldsPersonalData
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
            guard let start = find(sealName, in: bytes, probe: 1) else { return nil }
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
            return split(String(decoding: UnsafeBufferPointer(rebasing: bytes[begin..<index]), as: UTF8.self))
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
        guard let colon = seal.firstIndex(of: ":") else { return nil }
        return (String(seal[..<colon]), String(seal[seal.index(after: colon)...]))
    }

    /// The index of the first `needle` in `bytes`: libc's `memchr` to each candidate for the
    /// needle's byte at `probe` (best one rare in payloads: the `$` of `"$seal"`, not its quote),
    /// `memcmp` of the whole.
    static func find(_ needle: [UInt8], in bytes: UnsafeBufferPointer<UInt8>, probe: Int = 0) -> Int? {
        guard let base = bytes.baseAddress, needle.indices.contains(probe), bytes.count >= needle.count else { return nil }
        let last = bytes.count - needle.count
        var index = 0
        return needle.withUnsafeBytes { needle -> Int? in
            let byte = Int32(needle[probe])
            while index <= last {
                guard let found = memchr(base + index + probe, byte, last - index + 1) else { return nil }
                index = UnsafeRawPointer(found) - UnsafeRawPointer(base) - probe
                if memcmp(base + index, needle.baseAddress!, needle.count) == 0 { return index }
                index += 1
            }
            return nil
        }
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

    mutating func take(_ count: Int) -> [UInt8] {
        if used + count > pool.count {
            pool = SecureRandom.bytes(max(draw, count))
            used = 0
        }
        defer { used += count }
        return Array(pool[used..<(used + count)])
    }
}

/// Seals the personal fields of one event being encoded for the log.
struct FieldSealer: PersonalDataSealing {
    /// Nil: the person is erased; their fields are stored erased.
    let key: [UInt8]?
    let seal: String
    let stream: String
    let person: String
    let type: String

    func seal(_ text: String, field: String) throws -> PersonalDataSealed {
        try seal(text, field: field, nonce: SecureRandom.bytes(AES256GCM.nonceBytes))
    }

    func seal(_ text: String, field: String, nonce: [UInt8]) throws -> PersonalDataSealed {
        guard let key else { return .erased }
        let sealed = try AES256GCM.seal(
            Array(text.utf8), key: key, associatedData: FieldCrypto.associatedData(seal, stream: stream, person, type, field), nonce: nonce)
        return .sealed(SealedField(v: Base64URL.encode(sealed), h: FieldCrypto.mac(text, key: key, type: type, field: field)))
    }
}

/// Opens the sealed fields of one event being decoded.
struct FieldOpener: PersonalDataOpening {
    let ring: KeyRing
    let seal: String
    let stream: String
    let person: String
    let type: String

    func open(_ sealed: SealedField, field: String) throws -> PersonalText {
        guard let key = ring.key(person) else { return .erased }
        guard let bytes = Base64URL.decode(sealed.v), bytes.count <= 1 << 20 else { throw PersonalDataFieldError(field: field) }
        do {
            let text = try AES256GCM.open(bytes, key: key, associatedData: FieldCrypto.associatedData(seal, stream: stream, person, type, field))
            return .text(String(decoding: text, as: UTF8.self))
        } catch {
            throw PersonalDataFieldError(field: field)
        }
    }
}

/// A sealed field that does not open with its person's key: altered, or moved from elsewhere.
struct PersonalDataFieldError: Error, CustomStringConvertible {
    let field: String
    var description: String { "The sealed field \(field) does not open with its person's key: it was altered or moved from another event." }
}

enum FieldCrypto {
    static let associatedDataPrefix = Array("wristler/personal/v2".utf8)
    static let macPrefix = Array("wristler/personal-mac/v1".utf8)

    /// "wristler/personal/v2", the seal (the event's own id and its person), the stream, the
    /// person, the type and the field, NUL between them.
    static func associatedData(_ seal: String, stream: String, _ person: String, _ type: String, _ field: String) -> [UInt8] {
        joined(associatedDataPrefix, [seal, stream, person, type, field])
    }

    static func joined(_ prefix: [UInt8], _ parts: [String]) -> [UInt8] {
        var bytes = prefix
        bytes.reserveCapacity(prefix.count + parts.reduce(0) { $0 + $1.utf8.count + 1 })
        for part in parts {
            bytes.append(0)
            bytes.append(contentsOf: part.utf8)
        }
        return bytes
    }

    /// 128 bits of HMAC-SHA256 of the field's text under the person's key.
    static func mac(_ text: String, key: [UInt8], type: String, field: String) -> String {
        Base64URL.encode(HMAC.mac(.sha256, key: key, data: joined(macPrefix, [type, field, text])).prefix(16))
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
        let opener = FieldOpener(ring: keyRing, seal: seal.id + ":" + seal.person, stream: streamId, person: seal.person, type: type)
        if let opened = try PersonalDataSplice.opened(payloadJSON, open: opener.open) { return try body(opened) }
        return try PersonalData.$opener.withValue(opener) { try body(payloadJSON) }
    }
}
