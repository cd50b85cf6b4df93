import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

/// Version 2 of an offer: the amount is in cents with a currency (version 1 had euros as a number).
struct OfferMade: EventPayload, Equatable {
    static let eventType = "offer_made"
    static let schemaVersion = 2
    var conversationId: String
    var amountCents: Int64
    var currency: String
}

@Suite struct UpcastingTests {
    static var registry: EventTypeRegistry {
        var registry = EventTypeRegistry()
        registry.register(OfferMade.self)
        registry.register(
            EventUpcaster(type: "offer_made", fromVersion: 1) { old in
                var new = old
                new["amountCents"] = .integer(Int64(((old["amountEuros"]?.doubleValue ?? 0) * 100).rounded()))
                new["currency"] = .string("EUR")
                new["amountEuros"] = nil
                return new
            })
        return registry
    }

    @Test func anOldPayloadInTheLogIsReadInTheCurrentShape() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        _ = try await db.store.append([
            NewEvent(
                streamId: "conversation-1", type: "offer_made", schemaVersion: 1,
                payloadJSON: #"{"conversationId":"c-1","amountEuros":8450.5}"#, metadata: EventMetadata(origin: .appAndroid)),
            try NewEvent(
                streamId: "conversation-1", payload: OfferMade(conversationId: "c-1", amountCents: 900_000, currency: "EUR"),
                metadata: EventMetadata(origin: .web)),
        ])
        let stored = try await db.readAll()
        #expect(stored.map(\.schemaVersion) == [1, 2])
        let offers = try stored.map { try $0.decode(OfferMade.self, using: Self.registry) }
        #expect(offers[0] == OfferMade(conversationId: "c-1", amountCents: 845_050, currency: "EUR"))
        #expect(offers[1].amountCents == 900_000)
    }

    @Test func aPayloadFromANewerReleaseIsAnErrorNotAGuess() async throws {
        let db = try await TestDatabase.make()
        defer { Task { await db.drop() } }
        _ = try await db.store.append(
            NewEvent(
                streamId: "conversation-1", type: "offer_made", schemaVersion: 3, payloadJSON: #"{"conversationId":"c-1"}"#,
                metadata: EventMetadata()))
        let stored = try #require(try await db.readAll().first)
        let error = #expect(throws: EventDecodingError.self) { try stored.decode(OfferMade.self, using: Self.registry) }
        #expect(error?.reason == .newerSchemaVersion(stored: 3, known: 2))
    }
}
