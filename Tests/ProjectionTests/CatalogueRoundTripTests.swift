import Encodings
import EventLog
import Foundation
import InboxDomain
import InboxSimulation
import JSONParsing
import Projections
import Testing

/// An event made from a typed value keeps the value (`NewEvent.typedPayload`), and the validator and the
/// inline projections take it instead of decoding the text again. That is right only if decoding
/// the text gives the value back: these tests hold every type of the catalogue to it.
@Suite struct CatalogueRoundTripTests {
    @Test func everyCatalogueEventDecodesBackToTheValueItWasEncodedFrom() throws {
        var simulation = MarketplaceSimulation(configuration: .init(people: 300, shops: 20, watches: 200, seed: 7))
        let registry = InboxCatalogue.registry
        var seen = Set<String>()
        let written = try Self.notInTheSimulation()
        for event in simulation.events(40_000) + written {
            let typed = try #require(event.typedPayload)
            #expect(registry.isCurrent(typed, as: event.type, schemaVersion: event.schemaVersion))
            let decoded = try registry.decode(type: event.type, schemaVersion: event.schemaVersion, payload: Data(event.payloadJSON.utf8))
            let original = try #require(typed as? any Hashable)
            let again = try #require(decoded as? any Hashable)
            #expect(AnyHashable(original) == AnyHashable(again), "\(event.type): \(event.payloadJSON)")
            seen.insert(event.type)
        }
        // A type added to the catalogue fails here until the simulation writes it or it is added above.
        #expect(Set(InboxCatalogue.eventTypes.map { $0.eventType }).subtracting(seen).sorted() == [])
    }

    /// A replay reads payloads from libjansson's tree (`JanssonDecoding`) instead of with
    /// `JSONDecoder`: every type of the catalogue, as the simulation writes it, is read that way
    /// (the point of it), to the value `JSONDecoder` gives. And payloads of the wrong shape (each
    /// member missing, null, or of every other kind, a fraction, a name twice, an unknown name, a
    /// name not in ASCII) are either left to `JSONDecoder` or read to its value, never to another.
    @Test func libjanssonsTreeGivesJSONDecodersValueForEveryCatalogueType() throws {
        var simulation = MarketplaceSimulation(configuration: .init(people: 300, shops: 20, watches: 200, seed: 7))
        let registry = InboxCatalogue.registry
        let written = try Self.notInTheSimulation()
        var seen = Set<String>()
        var variantsTried = 0, variantsRead = 0, variantsLeft = 0
        var shapes = Set<String>()
        for event in simulation.events(40_000) + written {
            let reader = try #require(registry.currentReader(type: event.type, schemaVersion: event.schemaVersion))
            let slow = try registry.decode(type: event.type, schemaVersion: event.schemaVersion, payload: Data(event.payloadJSON.utf8))
            let fast = try #require(Self.fast(event.payloadJSON, reader), "\(event.type) was left to JSONDecoder: \(event.payloadJSON)")
            #expect(Self.same(fast, slow), "\(event.type): \(event.payloadJSON)")
            seen.insert(event.type)
            // Every shape of payload once: the variants of its members.
            let object = try JSONValue(parsing: event.payloadJSON)
            guard case .object(let members) = object else { continue }
            let shape = event.type + ":" + members.keys.sorted().joined(separator: ",")
            guard shapes.insert(shape).inserted else { continue }
            for text in Self.variants(of: members, payload: event.payloadJSON) {
                variantsTried += 1
                let expected = try? registry.decode(type: event.type, schemaVersion: event.schemaVersion, payload: Data(text.utf8))
                guard let read = Self.fast(text, reader) else {
                    variantsLeft += 1
                    continue
                }
                variantsRead += 1
                let original = try #require(expected, "\(event.type): libjansson read what JSONDecoder refuses: \(text)")
                #expect(Self.same(read, original), "\(event.type): \(text)")
            }
        }
        #expect(Set(InboxCatalogue.eventTypes.map { $0.eventType }).subtracting(seen).sorted() == [])
        // Both sides of the rule were exercised: variants read by libjansson, and variants left to JSONDecoder.
        #expect(variantsRead > 100 && variantsLeft > 100, "read \(variantsRead), left \(variantsLeft) of \(variantsTried)")
    }

    /// A payload's text is written as it is encoded (`JSONStreamEncoder`), not by `JSONEncoder`:
    /// for every type of the catalogue it writes the text (none is left to `JSONEncoder`), and that
    /// text is `JSONEncoder`'s, member for member, what the log stores.
    @Test func theStreamingEncoderWritesWhatJSONEncoderWritesForEveryCatalogueType() throws {
        var simulation = MarketplaceSimulation(configuration: .init(people: 300, shops: 20, watches: 200, seed: 7))
        let written = try Self.notInTheSimulation() + [
            // A body with what JSON escapes, and a personal field erased.
            NewEvent(MessageSent(conversationId: "c1", messageId: "m\"1", authorSide: .buyer, authorId: "p1", body: "a \"b\"\\ c/d\n\t\u{1}\u{7F} é ⌚️")),
            {
                var blocked = AccountBlocked(personId: "p1")
                blocked.reason = .erased
                return try NewEvent(blocked)
            }(),
        ]
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        var seen = Set<String>()
        for event in simulation.events(40_000) + written {
            let typed = try #require(event.typedPayload)
            let bytes = Self.streamed(typed)
            let streamed = try #require(bytes, "\(event.type) was left to JSONEncoder")
            let text = String(decoding: streamed, as: UTF8.self)
            #expect(text == event.payloadJSON)
            let foundation = String(decoding: try encoder.encode(typed), as: UTF8.self)
            #expect(try JSONValue(parsing: text) == JSONValue(parsing: foundation), "\(event.type): \(text) against \(foundation)")
            #expect(text.utf8.count == foundation.utf8.count, "\(event.type): \(text) against \(foundation)")
            seen.insert(event.type)
        }
        #expect(Set(InboxCatalogue.eventTypes.map { $0.eventType }).subtracting(seen).sorted() == [])
    }

    /// One event of each type the simulation does not write (it writes every other).
    static func notInTheSimulation() throws -> [NewEvent] {
        try [
            NewEvent(ShopMemberRemoved(shopId: "s1", personId: "p2")), NewEvent(PersonUnblocked(blockerId: "p1", blockedId: "p2")),
            NewEvent(SignedOut(personId: "p1", signInIds: ["3f1c", "9a0b"])), NewEvent(SignInLinked(personId: "p1", provider: "google")),
            NewEvent(SignInUnlinked(personId: "p1", provider: "google")), NewEvent(AccountClosed(personId: "p1")), NewEvent(RecoveryCodesRenewed(personId: "p1")), NewEvent(PersonErased(personId: "p1")),
            NewEvent(SignInAttemptsFailed(personId: "p1", attempts: 5)), NewEvent(RefreshTokenReused(personId: "p1", signInId: "s-1")),
            NewEvent(ConversationReopened(conversationId: "c1", personId: "p1")), NewEvent(ShopBlocked(blockerId: "p1", shopId: "s1")),
            NewEvent(ShopUnblocked(blockerId: "p1", shopId: "s1")),
        ]
    }

    static func streamed<P: Encodable>(_ payload: P) -> [UInt8]? { JSONStreamEncoder.encode(payload) }

    static func same(_ one: any EventPayload, _ other: any EventPayload) -> Bool {
        guard let one = one as? any Hashable, let other = other as? any Hashable else { return false }
        return AnyHashable(one) == AnyHashable(other)
    }

    static func fast(_ text: String, _ reader: @Sendable (any Decoder) throws -> any EventPayload) -> (any EventPayload)? {
        var text = text
        return text.withUTF8 { JanssonDecoding.decode(from: UnsafeRawBufferPointer($0), reader) }
    }

    /// The payload with each member in turn missing, null, and replaced by values of every kind;
    /// with an unknown member; with a member given twice; with a name outside ASCII; with whole
    /// numbers written with a fraction.
    static func variants(of members: [String: JSONValue], payload: String) -> [String] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        func text(_ value: [String: JSONValue]) -> String { String(decoding: (try? encoder.encode(JSONValue.object(value))) ?? Data(), as: UTF8.self) }
        let kinds: [JSONValue] = [
            .null, .bool(true), .bool(false), .integer(0), .integer(-1), .integer(Int64.max), .string(""), .string("watch"), .string("sold"),
            .string("buyer"), .string("messages"), .array([]), .array([.string("a")]), .array([.integer(1)]), .object([:]),
            .object(["amount": .integer(5), "currency": .string("EUR")]), .object(["a": .string("b")]),
        ]
        var variants: [String] = []
        for key in members.keys.sorted() {
            var without = members
            without[key] = nil
            variants.append(text(without))
            for kind in kinds {
                var changed = members
                changed[key] = kind
                variants.append(text(changed))
            }
            if case .integer(let number)? = members[key] {
                variants.append(payload.replacingOccurrences(of: "\"\(key)\":\(number)", with: "\"\(key)\":\(number).0"))
            }
            variants.append(String(payload.dropLast()) + ",\"\(key)\":\(text([:]))}")
            // A name outside ASCII (the Kelvin sign is a K to Swift's string comparison, other bytes to libjansson).
            variants.append(payload.replacingOccurrences(of: "\"\(key)\"", with: "\"\u{212A}\(key)\""))
        }
        variants.append(String(payload.dropLast()) + ",\"unknownMember\":[1.5,{\"x\":null}]}")
        variants.append(String(payload.dropLast()) + ",\"caf\u{E9}\":1}")
        variants.append("\u{FEFF}" + payload)
        variants.append(payload + "x")
        return variants
    }

    @Test func changingAnEventsTextTypeOrVersionForgetsItsValue() throws {
        let made = try NewEvent(MessageSent(conversationId: "c1", messageId: "m1", authorSide: .buyer, authorId: "p1", body: "Hello"))
        #expect(made.typedPayload != nil)
        var edited = made
        edited.payloadJSON = #"{"conversationId":"c1","messageId":"m1","authorSide":"buyer","authorId":"p1","body":"Changed"}"#
        #expect(edited.typedPayload == nil)
        edited = made
        edited.schemaVersion = 2
        #expect(edited.typedPayload == nil)
        edited = made
        edited.type = "conversation_read"
        #expect(edited.typedPayload == nil)
        // Not part of what an event is: the same text is the same event.
        let plain = NewEvent(streamId: made.streamId, type: made.type, payloadJSON: made.payloadJSON, metadata: made.metadata)
        #expect(plain == made)
    }

    /// A value of another type than the one registered for its name, or an older version, is not
    /// taken for what decoding would give.
    @Test func aValueIsTakenOnlyForItsRegisteredTypeAtItsCurrentVersion() {
        let registry = InboxCatalogue.registry
        let message = MessageSent(conversationId: "c1", messageId: "m1", authorSide: .buyer, authorId: "p1", body: "Hello")
        #expect(registry.isCurrent(message, as: MessageSent.eventType, schemaVersion: MessageSent.schemaVersion))
        #expect(!registry.isCurrent(message, as: ConversationRead.eventType, schemaVersion: 1))
        #expect(!registry.isCurrent(message, as: MessageSent.eventType, schemaVersion: MessageSent.schemaVersion + 1))
        #expect(!registry.isCurrent(message, as: "no_such_type", schemaVersion: 1))
    }
}
