import Foundation
import InboxDomain
@testable import Projections
import Testing

/// The preferences fold's rules, without a database.
@Suite struct PreferencesFoldTests {
    typealias Fold = PreferencesFold
    let created = SavedSearchCreated(savedSearchId: "q1", personId: "b1", name: "Speedmaster", query: .object([:]), interval: .daily, push: true)

    @Test func theLatestSwitchInTheLogWins() throws {
        var log = TestLog()
        let fold = try Fold.fold(
            log.record(
                NotificationPreferenceChanged(personId: "b1", category: .messages, channel: .email, enabled: false),
                NotificationPreferenceChanged(personId: "b1", category: .messages, channel: .email, enabled: true)),
            searches: [:])
        let key = Fold.SwitchKey(person: "b1", category: "messages", channel: "email")
        #expect(fold.switches[key]?.enabled == true)
        #expect(fold.switches[key]?.position == 2, "the row remembers the event that set it, so an older one cannot undo it")
    }

    @Test func aChangeKeepsTheFieldsItLeavesOut() throws {
        var log = TestLog()
        let fold = try Fold.fold(
            log.record(created, SavedSearchChanged(savedSearchId: "q1", personId: "b1", push: false)), searches: [:])
        let row = try #require(fold.writtenSearches.first)
        #expect(row.name == "Speedmaster" && row.interval == "daily" && row.push == false)
        #expect(row.updatedAt == TestLog.time(of: 2) && row.createdAt == TestLog.time(of: 1))
    }

    @Test func aSecondCreationOfTheSameSearchIsIgnored() throws {
        var log = TestLog()
        let again = SavedSearchCreated(savedSearchId: "q1", personId: "b1", name: "Daytona", query: .null, interval: .never, push: false)
        let fold = try Fold.fold(log.record(created, again), searches: [:])
        #expect(fold.writtenSearches.map(\.name) == ["Speedmaster"])
    }

    @Test func aChangeOfADeletedOrUnknownSearchChangesNothing() throws {
        var log = TestLog()
        let fold = try Fold.fold(
            log.record(
                created, SavedSearchDeleted(savedSearchId: "q1", personId: "b1"),
                SavedSearchChanged(savedSearchId: "q1", personId: "b1", name: "Renamed"),
                SavedSearchChanged(savedSearchId: "q-unknown", personId: "b1", name: "Nothing")),
            searches: [:])
        #expect(fold.writtenSearches.count == 1)
        #expect(fold.writtenSearches.first?.deleted == true)
        #expect(fold.writtenSearches.first?.name == "Speedmaster")
    }

    @Test func anEventOlderThanTheStoredRowChangesNothing() throws {
        var early = TestLog()
        let first = try Fold.fold(early.record(created), searches: [:])
        var row = try #require(first.writtenSearches.first)
        row.position = 10
        var log = TestLog(after: 5)
        let fold = try Fold.fold(log.record(SavedSearchDeleted(savedSearchId: "q1", personId: "b1")), searches: ["q1": row])
        #expect(fold.writtenSearches.isEmpty, "an inline apply that ran ahead is never undone by an older event")
    }
}

/// The people fold's rules, without a database.
@Suite struct PeopleFoldTests {
    @Test func theLastEventOfAPairInTheBatchDecides() throws {
        var log = TestLog()
        let fold = try PeopleFold.fold(
            log.record(
                ShopMemberAdded(shopId: "s1", personId: "p1"), ShopMemberRemoved(shopId: "s1", personId: "p1"),
                ShopMemberAdded(shopId: "s1", personId: "p2"), PersonBlocked(blockerId: "b1", blockedId: "p1"),
                PersonUnblocked(blockerId: "b1", blockedId: "p1"), PersonBlocked(blockerId: "b1", blockedId: "p1")))
        #expect(fold.members == [PeopleFold.Pair(first: "s1", second: "p1"): false, PeopleFold.Pair(first: "s1", second: "p2"): true])
        #expect(fold.blocks == [PeopleFold.Pair(first: "b1", second: "p1"): true])
    }

    @Test func theFirstBlockOfAnAccountCounts() throws {
        var log = TestLog()
        let fold = try PeopleFold.fold(
            log.record(AccountBlocked(personId: "p1", reason: "fraud"), AccountBlocked(personId: "p1", reason: "again")))
        #expect(fold.blockedAccounts["p1"]?.reason == "fraud")
        #expect(fold.blockedAccounts["p1"]?.at == TestLog.time(of: 1))
    }

    @Test func eventsThePeopleProjectionIgnoresChangeNothing() throws {
        var log = TestLog()
        let fold = try PeopleFold.fold(log.record(PasswordChanged(personId: "p1"), NotificationRead(personId: "p1", notificationId: "n1")))
        #expect(fold.members.isEmpty && fold.blocks.isEmpty && fold.blockedAccounts.isEmpty)
    }
}
