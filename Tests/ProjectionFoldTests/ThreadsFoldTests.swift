import Foundation
import InboxDomain
@testable import Projections
import Testing

/// The threads fold's rules, without a database: events in, rows out.
@Suite struct ThreadsFoldTests {
    typealias Fold = ThreadsFold
    let watchThread = ConversationStarted(conversationId: "c1", buyerId: "b1", shopId: "s1", watchId: "w1")

    func side(_ fold: Fold, _ side: ConversationSide, of conversation: String = "c1") throws -> Fold.Side {
        try #require(fold.sides[Fold.SideKey(conversationId: conversation, side: side.rawValue)])
    }

    func message(_ id: String, from author: AuthorSide, in conversation: String = "c1") -> MessageSent {
        MessageSent(conversationId: conversation, messageId: id, authorSide: author, authorId: author == .buyer ? "b1" : "p9", body: "Hello")
    }

    /// Folds `events` over empty tables.
    func fold(_ events: [ProjectedEvent]) throws -> Fold {
        try Fold.fold(events, conversations: [:], sides: [:], messages: [:])
    }

    @Test func aWatchConversationHasABuyerAndASellerSideAndAnAftercareThreadOnlyABuyerSide() throws {
        var log = TestLog()
        let aftercare = ConversationStarted(conversationId: "c2", kind: .aftercare, buyerId: "b1", shopId: "s1", watchId: nil, orderId: "o1")
        let fold = try fold(log.record(watchThread, aftercare))
        #expect(try side(fold, .buyer).ownerId == "b1")
        #expect(try side(fold, .seller).ownerId == "s1")
        #expect(fold.sides[Fold.SideKey(conversationId: "c2", side: "seller")] == nil)
        #expect(fold.changedConversations.count == 2)
    }

    @Test func theFirstStartOfAConversationCountsAndALaterOneIsIgnored() throws {
        var log = TestLog()
        let again = ConversationStarted(conversationId: "c1", buyerId: "b2", shopId: "s2", watchId: "w2")
        let fold = try fold(log.record(watchThread, again))
        #expect(fold.conversations["c1"]?.buyerId == "b1")
        #expect(try side(fold, .seller).ownerId == "s1")
    }

    @Test func aMessageIsUnreadForTheOtherSideOnlyAndIsTheThreadsLastMessage() throws {
        var log = TestLog()
        let fold = try fold(log.record(watchThread, message("m1", from: .seller)))
        #expect(try side(fold, .buyer).unread)
        #expect(try !side(fold, .seller).unread)
        let thread = try #require(fold.conversations["c1"])
        #expect(thread.lastMessageId == "m1" && thread.lastMessageSide == "seller" && thread.messageCount == 1)
        #expect(thread.lastMessageSeq == 2, "a message's number in its thread is its stream version")
        #expect(fold.newMessages.map(\.id) == ["m1"])
    }

    @Test func aWristlerMessageIsIncomingOnBothSides() throws {
        var log = TestLog()
        let fold = try fold(log.record(watchThread, message("m1", from: .wristler)))
        #expect(try side(fold, .buyer).unread)
        #expect(try side(fold, .seller).unread)
    }

    @Test func aMessageFromTheOtherSideUnarchivesTheThread() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(
                watchThread, ConversationArchived(conversationId: "c1", side: .buyer, personId: "b1"),
                ConversationArchived(conversationId: "c1", side: .seller, personId: "p9"), message("m1", from: .seller)))
        #expect(try !side(fold, .buyer).archived, "the seller's message brings the buyer's archived thread back")
        #expect(try side(fold, .seller).archived, "the author's own side stays archived")
    }

    @Test func anArchivedThreadCanBeUnarchived() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(
                watchThread, ConversationArchived(conversationId: "c1", side: .buyer, personId: "b1"),
                ConversationUnarchived(conversationId: "c1", side: .buyer, personId: "b1")))
        #expect(try !side(fold, .buyer).archived)
    }

    @Test func aMessageFromTheBuyerClearsNoReplyNeeded() throws {
        var log = TestLog()
        let marked = try fold(log.record(watchThread, ConversationMarkedNoReplyNeeded(conversationId: "c1", personId: "p9")))
        #expect(marked.conversations["c1"]?.noReplyNeeded == true)
        var later = TestLog(after: log.position)
        let cleared = try Fold.fold(
            later.record(message("m1", from: .buyer)), conversations: marked.conversations, sides: marked.sides, messages: [:])
        #expect(cleared.conversations["c1"]?.noReplyNeeded == false)
    }

    @Test func aReadMarkReadsTheSideUpToThatMessage() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(
                watchThread, message("m1", from: .seller), message("m2", from: .seller),
                ConversationRead(conversationId: "c1", side: .buyer, personId: "b1", upToMessageId: "m1")))
        #expect(try side(fold, .buyer).readThroughSeq == 2)
        #expect(try side(fold, .buyer).unread, "m2 is still unread")
    }

    @Test func aReadMarkForAnUnknownMessageChangesNothing() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(
                watchThread, message("m1", from: .seller),
                ConversationRead(conversationId: "c1", side: .buyer, personId: "b1", upToMessageId: "m-unknown")))
        #expect(try side(fold, .buyer).readThroughSeq == 0)
        #expect(try side(fold, .buyer).unread)
    }

    @Test func aReadMarkForAMessageOfAnotherThreadChangesNothing() throws {
        var log = TestLog()
        let other = ConversationStarted(conversationId: "c2", buyerId: "b1", shopId: "s1", watchId: "w2")
        let fold = try fold(
            log.record(
                watchThread, other, message("m1", from: .seller), message("m2", from: .seller, in: "c2"),
                ConversationRead(conversationId: "c1", side: .buyer, personId: "b1", upToMessageId: "m2")))
        #expect(try side(fold, .buyer).readThroughSeq == 0)
    }

    @Test func anEventAboutAConversationNeverStartedFailsSoTheDriverParksIt() throws {
        var log = TestLog()
        #expect(throws: ProjectionError.self) { try fold(log.record(message("m1", from: .buyer, in: "c-never"))) }
        #expect(throws: ProjectionError.self) {
            try fold(log.record(ConversationArchived(conversationId: "c-never", side: .buyer, personId: "b1")))
        }
    }

    /// A replay keeps every row in one fold and folds batch after batch into it in place: a batch
    /// that fails part way is taken back whole, so the driver can apply it again event by event.
    @Test func aBatchFoldedInPlaceThatFailsPartWayIsTakenBackWhole() throws {
        var log = TestLog()
        var rows = Fold(conversations: [:], sides: [:], messages: [:])
        try rows.apply(log.record(watchThread, message("m1", from: .seller)))
        #expect(rows.newMessages.map(\.id) == ["m1"])
        let failing = log.record(
            message("m2", from: .buyer), ConversationStarted(conversationId: "c2", buyerId: "b2", shopId: "s1", watchId: "w2"),
            ConversationArchived(conversationId: "c1", side: .seller, personId: "p9"), message("m3", from: .buyer, in: "c-never"))
        #expect(throws: ProjectionError.self) { try rows.apply(failing) }
        #expect(Set(rows.conversations.keys) == ["c1"])
        #expect(rows.conversations["c1"]?.messageCount == 1 && rows.conversations["c1"]?.lastMessageId == "m1")
        #expect(rows.sides.count == 2)
        #expect(try side(rows, .seller).readThroughSeq == 2 && !side(rows, .seller).archived)
        #expect(try side(rows, .buyer).unread)
        #expect(Set(rows.knownMessages.keys) == ["m1"])
        #expect(rows.newMessages.isEmpty && rows.changedConversations.isEmpty && rows.changedSides.isEmpty)

        // Event by event, as the driver goes on: all but the failing one apply.
        for event in failing.dropLast() { try rows.apply([event]) }
        #expect(rows.conversations["c1"]?.messageCount == 2 && rows.conversations["c2"] != nil)
        #expect(try side(rows, .seller).archived)
        #expect(Set(rows.knownMessages.keys) == ["m1", "m2"])
    }

    @Test func anOrderAboutAConversationNeverStartedChangesNothingAndOneAboutAKnownThreadMarksIt() throws {
        var log = TestLog()
        let money = Money(amount: 420_000, currency: "EUR")
        let fold = try fold(
            log.record(
                OrderPaid(orderId: "o1", buyerId: "b1", shopId: "s1", watchId: "w9", conversationId: "c-never", amount: money), watchThread,
                OrderPaid(orderId: "o2", buyerId: "b1", shopId: "s1", watchId: "w1", conversationId: "c1", amount: money)))
        #expect(fold.conversations["c-never"] == nil)
        #expect(fold.conversations["c1"]?.ledToOrder == true)
    }

    @Test func aMessageStoredBeforeIsNotStoredOrCountedAgain() throws {
        var log = TestLog()
        let first = try fold(log.record(watchThread, message("m1", from: .seller)))
        var again = TestLog()
        let events = again.record(watchThread, message("m1", from: .seller))
        let places = ["m1": Fold.MessagePlace(conversationId: "c1", seq: 2)]
        let second = try Fold.fold(events, conversations: first.conversations, sides: first.sides, messages: places)
        #expect(second.newMessages.isEmpty)
        #expect(second.conversations["c1"]?.messageCount == 1)
    }

    @Test func theUnreadCounterMovesByTheChangeOfTheFlagAndEveryOwnerHasOneFromTheStart() throws {
        var log = TestLog()
        let started = try fold(log.record(watchThread))
        let buyer = Fold.OwnerSide(ownerId: "b1", side: "buyer")
        let seller = Fold.OwnerSide(ownerId: "s1", side: "seller")
        #expect(started.unreadDeltas == [buyer: 0, seller: 0])

        let sides = started.sides.mapValues { side in
            var stored = side
            stored.existed = true
            return stored
        }
        var later = TestLog(after: log.position)
        let messaged = try Fold.fold(
            later.record(message("m1", from: .seller), message("m2", from: .seller)), conversations: started.conversations, sides: sides,
            messages: [:])
        #expect(messaged.unreadDeltas == [buyer: 1], "two messages make one conversation with unread messages")

        let stored = messaged.sides.mapValues { side in
            var row = side
            row.unreadBefore = row.unread
            return row
        }
        let read = try Fold.fold(
            later.record(ConversationRead(conversationId: "c1", side: .buyer, personId: "b1", upToMessageId: "m2")),
            conversations: messaged.conversations, sides: stored,
            messages: ["m1": Fold.MessagePlace(conversationId: "c1", seq: 2), "m2": Fold.MessagePlace(conversationId: "c1", seq: 3)])
        #expect(read.unreadDeltas == [buyer: -1])
    }

    @Test func aWatchKeepsItsShopAndLatestStatus() throws {
        var log = TestLog()
        let fold = try fold(
            log.record(
                WatchStatusChanged(watchId: "w1", shopId: "s1", status: .forSale), WatchStatusChanged(watchId: "w1", shopId: "s1", status: .sold)))
        #expect(fold.watches["w1"]?.status == "sold")
        #expect(fold.watches["w1"]?.shopId == "s1")
    }
}
