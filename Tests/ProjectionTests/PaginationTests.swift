import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import Testing

/// Keyset pages that neither skip nor repeat rows when rows are inserted during a walk.
@Suite struct PaginationTests {
    /// Appends and waits until the projectors (running around each test) have the rows.
    static func write(_ events: [any CatalogueEvent], to db: TestDatabase) async throws {
        _ = try await db.store.append(try events.map(newEvent))
        try await db.waitUntilProjected()
    }

    @Test func aBellWalkWithEntriesArrivingDuringItSeesEveryOlderEntryOnceAndEndsWithoutANextCursor() async throws {
        try await withTestDatabase { db in
            try await db.withProjectors {
            for _ in 0..<6 {
                try await Self.write((0..<10).map { _ in SignedIn(personId: "p1", signInId: UUID().uuidString, platform: "web") }, to: db)
            }
            let before = Set(try await db.client.query("SELECT notification_id FROM bell_entries WHERE person_id = 'p1'") {
                try $0.decode(String.self, "notification_id")
            })
            #expect(before.count == 60)
            var seen: [String] = []
            var cursor: KeysetCursor?
            var pages = 0
            repeat {
                let after = cursor
                let page = try await db.client.withConnection { connection in
                    try BellReader.page(person: "p1", after: after, limit: 7, on: connection)
                }
                seen += page.rows.map(\.id)
                cursor = page.next
                pages += 1
                // New entries arrive while the person walks.
                try await Self.write([PasswordChanged(personId: "p1"), SignedIn(personId: "p1", signInId: "x\(pages)", platform: "web")], to: db)
            } while cursor != nil
            #expect(seen.count == Set(seen).count, "an entry came twice")
            #expect(before.isSubset(of: Set(seen)), "\(before.subtracting(seen).count) older entries were skipped")
            #expect(pages == 9)
            }
        }
    }

    @Test func aCursorSurvivesItsTokenAndAGarbledTokenIsRefused() throws {
        let cursor = KeysetCursor(key: 1_764_412_345_123_456, id: "c|1/é")
        #expect(try KeysetCursor(token: cursor.token) == cursor)
        for garbled in ["", "abc", "djF8eA", cursor.token + "!", "v1|1|x", String(repeating: "A", count: 600)] {
            #expect(throws: KeysetCursor.Malformed.self, "\(garbled)") { try KeysetCursor(token: garbled) }
        }
    }

    @Test func conversationAndMessageWalksWithInsertsDuringThemNeitherSkipNorRepeat() async throws {
        try await withTestDatabase { db in
            try await db.withProjectors {
            var events: [any CatalogueEvent] = []
            for index in 0..<30 {
                events.append(ConversationStarted(conversationId: "c\(index)", buyerId: "buyer", shopId: "shop", watchId: "w\(index)"))
                events.append(MessageSent(conversationId: "c\(index)", messageId: "c\(index)-m", authorSide: .buyer, authorId: "buyer", body: "Hi"))
            }
            for index in 0..<40 {
                events.append(MessageSent(conversationId: "c0", messageId: "m\(index)", authorSide: index % 2 == 0 ? .seller : .buyer, authorId: "x", body: "\(index)"))
            }
            try await Self.write(events, to: db)

            var threads: [String] = []
            var cursor: KeysetCursor?
            var added = 0
            repeat {
                let after = cursor
                let page = try await db.client.withConnection { connection in
                    try ThreadReader.conversations(owner: "buyer", side: .buyer, after: after, limit: 4, on: connection)
                }
                threads += page.rows.map(\.conversationId)
                cursor = page.next
                added += 1
                try await Self.write(
                    [ConversationStarted(conversationId: "new\(added)", buyerId: "buyer", shopId: "shop", watchId: "w"),
                     MessageSent(conversationId: "new\(added)", messageId: "new\(added)-m", authorSide: .buyer, authorId: "buyer", body: "Hi")],
                    to: db)
            } while cursor != nil
            #expect(threads.count == 30 && Set(threads).count == 30, "\(threads)")

            var messages: [String] = []
            cursor = nil
            repeat {
                let after = cursor
                let page = try await db.client.withConnection { connection in
                    try ThreadReader.messages(conversation: "c0", after: after, limit: 6, on: connection)
                }
                messages += page.rows.map(\.id)
                cursor = page.next
                try await Self.write([MessageSent(conversationId: "c0", messageId: "later\(messages.count)", authorSide: .seller, authorId: "s", body: "more")], to: db)
            } while cursor != nil
            #expect(messages.count == 41 && Set(messages).count == 41)
            #expect(messages.last == "c0-m", "oldest last")
            }
        }
    }
}

/// What `inbox replay` prints as it goes.
@Suite struct ReplayProgressTests {
    @Test func progressSaysEventsDoneTheRateAndTheTimeLeft() {
        let progress = Replayer.Progress(eventsDone: 200_000, eventsTotal: 1_000_000, elapsed: .seconds(10))
        #expect(progress.description == "replay: 200000 of about 1000000 events, 20000 events/s, about 40 s left")
        let done = Replayer.Progress(eventsDone: 1_000, eventsTotal: 1_000, elapsed: .seconds(1))
        #expect(done.description == "replay: 1000 of about 1000 events, 1000 events/s")
    }
}
