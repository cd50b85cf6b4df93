import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

/// The people's data keys as an append makes them: a batch's new people get theirs together, in one
/// transaction, and appends racing over the same new people make each key once; a key made is
/// cached once its transaction commits, never before.
@Suite struct PersonalDataKeysTests {
    static func message(_ index: Int, author: String, body: String) throws -> NewEvent {
        try NewEvent(
            catalogueEvent: InboxDomain.MessageSent(conversationId: "c-\(index % 7)", messageId: "m-\(author)-\(index)", authorSide: .buyer, authorId: author, body: body))
    }

    @Test func appendsRacingOverTheSameNewPeopleMakeEachKeyOnceAndEveryFieldOpens() async throws {
        try await withTestDatabase { db in
            // One of them was erased before: their field is stored erased, and no key is made for them.
            _ = try await db.client.withConnection { connection in
                try connection.transaction { try PersonalDataKeys.erase("person-13", on: $0) }
            }
            let people = (0..<40).map { "person-\($0)" }
            try await withThrowingTaskGroup(of: Void.self) { group in
                for writer in 0..<4 {
                    // Each writer names the people in another order, in batches of 40 events.
                    let order = writer % 2 == 0 ? people : people.reversed()
                    group.addTask {
                        for round in 0..<3 {
                            let batch = try order.enumerated().map { index, person in
                                try Self.message(writer * 1_000 + round * 100 + index, author: person, body: "words of \(person)")
                            }
                            _ = try await db.store.append(batch)
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await db.scalar("SELECT count(*)::int FROM person_data_keys", Int.self) == 39)
            #expect(try await db.scalar("SELECT count(*)::int FROM person_data_keys WHERE person_id = 'person-13'", Int.self) == 0)
            let messages = try await db.events().map { try $0.decode(InboxDomain.MessageSent.self, using: InboxCatalogue.registry) }
            #expect(messages.count == 4 * 3 * 40)
            for message in messages {
                #expect(message.body == (message.authorId == "person-13" ? .erased : .text("words of \(message.authorId)")), "\(message.messageId)")
            }
            // Nothing in the clear.
            #expect(try await db.scalar("SELECT count(*)::int FROM events WHERE payload::text LIKE '%words of%'", Int.self) == 0)
        }
    }

    @Test func aKeyMadeIsCachedOnceItsAppendCommitsAndNotWhenItRollsBack() async throws {
        try await withTestDatabase { db in
            try await db.client.withConnection { connection in
                // Made and committed by the append's own transaction: the person's next append is
                // the append alone, one round trip, with no read of their key.
                _ = try EventStore.append([try Self.message(1, author: "new-a", body: "first of a")], on: connection)
                let before = connection.roundTrips
                _ = try EventStore.append([try Self.message(2, author: "new-a", body: "second of a")], on: connection)
                #expect(connection.roundTrips - before == 1)

                // Made in the caller's transaction, which rolls back: nothing is cached, so the
                // next append makes the key again (a key cached from the rollback would seal a
                // field that nothing could open).
                struct RolledBack: Error {}
                #expect(throws: RolledBack.self) {
                    try connection.transaction { connection in
                        _ = try EventStore.append([try Self.message(3, author: "new-b", body: "lost words of b")], on: connection)
                        throw RolledBack()
                    }
                }
                // Made by an append that its own transaction rolls back (a stream at another version).
                let refused = try Self.message(4, author: "new-c", body: "lost words of c")
                #expect(throws: EventLogError.self) {
                    _ = try EventStore.append([refused], expectedVersions: [refused.streamId: .exactly(7)], on: connection)
                }
                #expect(try connection.query("SELECT count(*)::int FROM person_data_keys WHERE person_id IN ('new-b', 'new-c')").scalar(Int.self) == 0)
                _ = try EventStore.append([try Self.message(5, author: "new-b", body: "words of b"), try Self.message(6, author: "new-c", body: "words of c")], on: connection)
            }
            #expect(try await db.scalar("SELECT count(*)::int FROM person_data_keys WHERE person_id IN ('new-a', 'new-b', 'new-c')", Int.self) == 3)
            let bodies = try await db.events().map { try $0.decode(InboxDomain.MessageSent.self, using: InboxCatalogue.registry).body }
            #expect(bodies == [.text("first of a"), .text("second of a"), .text("words of b"), .text("words of c")])
        }
    }
}
