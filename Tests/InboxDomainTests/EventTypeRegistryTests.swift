import Foundation
import InboxDomain
import Testing

// MARK: Test event types

/// "listing_priced" as the code knows it today (schema version 3). Its history:
/// - v1 `{"listing": "L1", "price": 12.5}`: a price in euros, as a decimal;
/// - v2 `{"listingId": "L1", "price": 12.5}`: the listing field renamed;
/// - v3 `{"listingId": "L1", "price": {"cents": 1250, "currency": "EUR"}}`: money in cents with a currency.
struct ListingPriced: EventPayload, Equatable {
    static let eventType = "listing_priced"
    static let schemaVersion = 3

    struct Money: Codable, Equatable {
        var cents: Int
        var currency: String
    }

    var listingId: String
    var price: Money
}

/// A type still at its first schema version (the protocol's default).
struct MessageSent: EventPayload, Equatable {
    static let eventType = "message_sent"
    var conversationId: String
    var body: String
}

struct UpcasterFailure: Error, Equatable {
    var why: String
}

enum ListingPricedUpcasters {
    /// v1 → v2: `listing` is renamed `listingId`.
    static let renameListing = EventUpcaster(type: ListingPriced.eventType, fromVersion: 1) { value in
        var value = value
        value["listingId"] = value["listing"]
        value["listing"] = nil
        return value
    }

    /// v2 → v3: the decimal euro price becomes cents with a currency.
    static let priceInCents = EventUpcaster(type: ListingPriced.eventType, fromVersion: 2) { value in
        var value = value
        if let euros = value["price"]?.doubleValue {
            value["price"] = .object(["cents": .number((euros * 100).rounded()), "currency": .string("EUR")])
        }
        return value
    }
}

// MARK: Tests

@Suite struct EventTypeRegistryTests {
    static func registry(upcasters: [EventUpcaster] = [ListingPricedUpcasters.renameListing, ListingPricedUpcasters.priceInCents])
        -> EventTypeRegistry
    {
        var registry = EventTypeRegistry()
        registry.register(ListingPriced.self)
        registry.register(MessageSent.self)
        for upcaster in upcasters { registry.register(upcaster) }
        return registry
    }

    static let expected = ListingPriced(listingId: "L1", price: .init(cents: 1250, currency: "EUR"))
    static let v1 = Data(#"{"listing":"L1","price":12.5}"#.utf8)
    static let v2 = Data(#"{"listingId":"L1","price":12.5}"#.utf8)
    static let v3 = Data(#"{"listingId":"L1","price":{"cents":1250,"currency":"EUR"}}"#.utf8)

    /// The reason of the EventDecodingError `body` throws (nil, and a failed expectation, when it
    /// throws nothing or another error).
    static func reason(
        sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void
    ) -> EventDecodingError.Reason? {
        let error = #expect(throws: EventDecodingError.self, sourceLocation: sourceLocation) { try body() }
        return error?.reason
    }

    // MARK: Registration

    @Test func registeredTypesAreKnownAtTheirCurrentVersion() {
        let registry = Self.registry()
        #expect(registry.isKnown("listing_priced"))
        #expect(registry.isKnown("message_sent"))
        #expect(!registry.isKnown("order_placed"))
        #expect(registry.currentVersion(of: "listing_priced") == 3)
        #expect(registry.currentVersion(of: "message_sent") == 1)
        #expect(registry.currentVersion(of: "order_placed") == nil)
    }

    // MARK: Current version

    @Test func aCurrentVersionPayloadDecodesAsItsType() throws {
        let registry = Self.registry(upcasters: [])
        #expect(try registry.decode(ListingPriced.self, schemaVersion: 3, payload: Self.v3) == Self.expected)
        let message = try registry.decode(
            MessageSent.self, schemaVersion: 1, payload: Data(#"{"conversationId":"c-1","body":"Hi"}"#.utf8))
        #expect(message == MessageSent(conversationId: "c-1", body: "Hi"))
    }

    @Test func aCurrentVersionPayloadDecodesByItsStoredTypeName() throws {
        let registry = Self.registry(upcasters: [])
        let event = try registry.decode(type: "listing_priced", schemaVersion: 3, payload: Self.v3)
        #expect(event as? ListingPriced == Self.expected)
    }

    @Test func upcastingACurrentVersionPayloadLeavesItUntouched() throws {
        let registry = Self.registry()
        #expect(try registry.upcast(type: "listing_priced", schemaVersion: 3, payload: Self.v3) == Self.v3)
    }

    @Test func theUpcastersAreNotRunForACurrentVersionPayload() throws {
        let failing = EventUpcaster(type: ListingPriced.eventType, fromVersion: 2) { _ in throw UpcasterFailure(why: "ran") }
        let registry = Self.registry(upcasters: [ListingPricedUpcasters.renameListing, failing])
        #expect(try registry.decode(ListingPriced.self, schemaVersion: 3, payload: Self.v3) == Self.expected)
    }

    // MARK: Upcasting

    @Test func aVersionOnePayloadIsUpcastThroughVersionTwoToThree() throws {
        let registry = Self.registry()
        #expect(try registry.decode(ListingPriced.self, schemaVersion: 1, payload: Self.v1) == Self.expected)
        #expect(try registry.decode(type: "listing_priced", schemaVersion: 1, payload: Self.v1) as? ListingPriced == Self.expected)
    }

    @Test func aVersionTwoPayloadIsUpcastByTheLastStepOnly() throws {
        // Without the v1 → v2 step: a v2 payload needs only v2 → v3.
        let registry = Self.registry(upcasters: [ListingPricedUpcasters.priceInCents])
        #expect(try registry.decode(ListingPriced.self, schemaVersion: 2, payload: Self.v2) == Self.expected)
    }

    @Test func upcastGivesTheCurrentShapeAsJSON() throws {
        let registry = Self.registry()
        let data = try registry.upcast(type: "listing_priced", schemaVersion: 1, payload: Self.v1)
        let value = try JSONDecoder().decode(JSONValue.self, from: data)
        #expect(
            value
                == .object([
                    "listingId": .string("L1"), "price": .object(["cents": .number(1250), "currency": .string("EUR")]),
                ]))
        // Cents stay an integer in the text, so any Codable Int reads them.
        #expect(String(decoding: data, as: UTF8.self).contains(#""cents":1250"#))
    }

    @Test func theUpcastersRunInVersionOrderWhateverTheOrderTheyWereRegisteredIn() throws {
        let registry = Self.registry(upcasters: [ListingPricedUpcasters.priceInCents, ListingPricedUpcasters.renameListing])
        #expect(try registry.decode(ListingPriced.self, schemaVersion: 1, payload: Self.v1) == Self.expected)
    }

    @Test func anUpcasterOfAnotherTypeIsNotUsed() {
        let other = EventUpcaster(type: "message_sent", fromVersion: 2) { $0 }
        let registry = Self.registry(upcasters: [ListingPricedUpcasters.renameListing, other])
        #expect(
            Self.reason { _ = try registry.decode(ListingPriced.self, schemaVersion: 1, payload: Self.v1) }
                == .missingUpcaster(from: 2))
    }

    // MARK: Refusals

    @Test func aNewerStoredVersionIsRefusedAsNewerSchemaVersion() {
        let registry = Self.registry()
        let v4 = Data(#"{"listingId":"L1","price":{"cents":1250,"currency":"EUR"},"vat":true}"#.utf8)
        #expect(
            Self.reason { _ = try registry.decode(ListingPriced.self, schemaVersion: 4, payload: v4) }
                == .newerSchemaVersion(stored: 4, known: 3))
        #expect(
            Self.reason { _ = try registry.decode(type: "listing_priced", schemaVersion: 4, payload: v4) }
                == .newerSchemaVersion(stored: 4, known: 3))
    }

    @Test func theNewerSchemaVersionErrorNamesTheTypeAndBothVersions() throws {
        let registry = Self.registry()
        let error = #expect(throws: EventDecodingError.self) {
            _ = try registry.decode(type: "listing_priced", schemaVersion: 4, payload: Self.v3)
        }
        let description = try #require(error).description
        #expect(description.contains("listing_priced"))
        #expect(description.contains("4"))
        #expect(description.contains("3"))
        #expect(error?.type == "listing_priced")
        #expect(error?.schemaVersion == 4)
    }

    @Test func aMissingFirstUpcasterIsRefusedAsMissingUpcasterFromOne() {
        let registry = Self.registry(upcasters: [ListingPricedUpcasters.priceInCents])
        #expect(
            Self.reason { _ = try registry.decode(ListingPriced.self, schemaVersion: 1, payload: Self.v1) }
                == .missingUpcaster(from: 1))
    }

    @Test func aMissingMiddleUpcasterIsRefusedAsMissingUpcasterFromTwo() {
        let registry = Self.registry(upcasters: [ListingPricedUpcasters.renameListing])
        #expect(
            Self.reason { _ = try registry.decode(type: "listing_priced", schemaVersion: 1, payload: Self.v1) }
                == .missingUpcaster(from: 2))
    }

    @Test func anUnknownTypeIsRefusedAsUnknownType() {
        let registry = Self.registry()
        #expect(
            Self.reason { _ = try registry.decode(type: "order_placed", schemaVersion: 1, payload: Data("{}".utf8)) }
                == .unknownType)
        #expect(
            Self.reason { _ = try registry.upcast(type: "order_placed", schemaVersion: 1, payload: Data("{}".utf8)) }
                == .unknownType)
    }

    @Test func anEmptyRegistryKnowsNoType() {
        let registry = EventTypeRegistry()
        #expect(!registry.isKnown("listing_priced"))
        #expect(
            Self.reason { _ = try registry.decode(type: "listing_priced", schemaVersion: 3, payload: Self.v3) }
                == .unknownType)
    }

    @Test func aPayloadMissingAFieldIsRefusedAsMalformedNamingTheField() throws {
        let registry = Self.registry()
        let payload = Data(#"{"price":{"cents":1250,"currency":"EUR"}}"#.utf8)
        let reason = Self.reason { _ = try registry.decode(ListingPriced.self, schemaVersion: 3, payload: payload) }
        guard case .malformedPayload(let why) = try #require(reason) else {
            Issue.record("expected malformedPayload, got \(String(describing: reason))")
            return
        }
        #expect(why.contains(#""listingId""#), "\(why)")
        #expect(why.contains("missing"), "\(why)")
    }

    @Test func aPayloadMissingANestedFieldIsRefusedNamingTheFieldAndItsParent() throws {
        let registry = Self.registry()
        let payload = Data(#"{"listingId":"L1","price":{"cents":1250}}"#.utf8)
        let reason = Self.reason { _ = try registry.decode(type: "listing_priced", schemaVersion: 3, payload: payload) }
        guard case .malformedPayload(let why) = try #require(reason) else {
            Issue.record("expected malformedPayload, got \(String(describing: reason))")
            return
        }
        #expect(why.contains(#""currency""#), "\(why)")
        #expect(why.contains(#""price""#), "\(why)")
    }

    @Test func aFieldOfTheWrongTypeIsRefusedAsMalformedNamingTheField() throws {
        let registry = Self.registry()
        let payload = Data(#"{"listingId":"L1","price":{"cents":"ten","currency":"EUR"}}"#.utf8)
        let reason = Self.reason { _ = try registry.decode(ListingPriced.self, schemaVersion: 3, payload: payload) }
        guard case .malformedPayload(let why) = try #require(reason) else {
            Issue.record("expected malformedPayload, got \(String(describing: reason))")
            return
        }
        #expect(why.contains("price.cents"), "\(why)")
    }

    @Test func aPayloadThatIsMalformedAfterUpcastingIsRefusedNamingTheField() throws {
        let registry = Self.registry()
        // A v1 payload without "listing": the upcasters pass it through, the v3 decoding refuses it.
        let payload = Data(#"{"price":12.5}"#.utf8)
        let reason = Self.reason { _ = try registry.decode(ListingPriced.self, schemaVersion: 1, payload: payload) }
        guard case .malformedPayload(let why) = try #require(reason) else {
            Issue.record("expected malformedPayload, got \(String(describing: reason))")
            return
        }
        #expect(why.contains(#""listingId""#), "\(why)")
    }

    @Test func anOldPayloadThatIsNotJSONIsRefusedAsMalformed() throws {
        let registry = Self.registry()
        let reason = Self.reason { _ = try registry.decode(ListingPriced.self, schemaVersion: 1, payload: Data("{bad".utf8)) }
        guard case .malformedPayload = try #require(reason) else {
            Issue.record("expected malformedPayload, got \(String(describing: reason))")
            return
        }
    }

    @Test func theMalformedPayloadErrorDescriptionNamesTypeVersionAndField() throws {
        let registry = Self.registry()
        let error = #expect(throws: EventDecodingError.self) {
            _ = try registry.decode(
                MessageSent.self, schemaVersion: 1, payload: Data(#"{"conversationId":"c-1"}"#.utf8))
        }
        let description = try #require(error).description
        #expect(description.contains("message_sent"))
        #expect(description.contains("schema version 1"))
        #expect(description.contains(#""body""#))
    }
}
