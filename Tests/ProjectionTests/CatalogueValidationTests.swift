import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

/// Appends are checked against the catalogue: nothing of a refused batch is written, and the error
/// names the field.
@Suite struct CatalogueValidationTests {
    static func refusal(_ events: [NewEvent], in db: TestDatabase) async throws -> (index: Int, field: String, reason: String)? {
        let store = EventStore(client: db.client, validator: EventValidator(registry: InboxCatalogue.registry))
        do {
            _ = try await store.append(events)
            return nil
        } catch EventLogError.invalidEvent(let index, let field, let reason) {
            return (index, field, reason)
        }
    }

    static func raw(_ stream: String, _ type: String, _ payload: String) -> NewEvent {
        NewEvent(streamId: stream, type: type, payloadJSON: payload, metadata: EventMetadata())
    }

    @Test func aBadEventAnywhereInABatchIsRefusedNamingItsFieldAndNothingIsWritten() async throws {
        try await withTestDatabase { db in
            let good = try NewEvent(PasswordChanged(personId: "p1"))
            let cases: [(NewEvent, String, String)] = [
                (Self.raw("watch-1", "watch_auctioned", "{}"), "type", "not an event type"),
                (Self.raw("person-p1-security", "password_changed", #"{"person":"p1"}"#), "payload.personId", "missing"),
                (Self.raw("conversation-c1", "message_sent",
                          #"{"conversationId":"c1","messageId":"m1","authorSide":"shop","authorId":"a","body":"x"}"#),
                 "payload.authorSide", "shop"),
                (Self.raw("conversation-c1", "message_sent",
                          #"{"conversationId":"c1","messageId":"m1","authorSide":"buyer","authorId":"a","body":"x","offer":{"amount":"ten","currency":"EUR"}}"#),
                 "payload.offer.amount", "not"),
                (try NewEvent(NotificationPreferenceChanged(personId: "p1", category: .security, channel: .push, enabled: false)),
                 "payload.enabled", "locked"),
                (try NewEvent(NotificationPreferenceChanged(personId: "p1", category: .savedSearches, channel: .email, enabled: false)),
                 "payload.category", "each saved search"),
                (Self.raw("person-p2-security", "password_changed", #"{"personId":"p1"}"#), "stream", "person-p1-security"),
                (NewEvent(streamId: "person-p1-security", type: "password_changed", schemaVersion: 2, payloadJSON: #"{"personId":"p1"}"#,
                          metadata: EventMetadata()), "schemaVersion", "newer"),
                (try NewEvent(LegacyNotificationImported(personId: "p1", notificationId: "n1", category: .messages, event: "offer_received",
                                                        ids: [:], createdAt: "yesterday", read: false)), "payload.createdAt", "ISO 8601"),
            ]
            for (bad, field, words) in cases {
                let refusal = try await Self.refusal([good, bad], in: db)
                #expect(refusal?.index == 1, "\(bad.type): \(String(describing: refusal))")
                #expect(refusal?.field == field, "\(bad.type): \(String(describing: refusal))")
                #expect(refusal?.reason.contains(words) == true, "\(bad.type): \(String(describing: refusal))")
            }
            #expect(try await db.store.headPosition() == 0)
            // Fields the catalogue does not know are let through, for producers a release ahead.
            #expect(try await Self.refusal([Self.raw("person-p1-security", "password_changed", #"{"personId":"p1","via":"app"}"#)], in: db) == nil)
        }
    }
}
