import EventLog
import Foundation
import InboxDomain
import PostgresClient

/// Group commit for the inline driver: appends that arrive while another is committing join one
/// transaction, so a burst of writers pays one WAL flush (and one pass over each projection's
/// checkpoint row) between them instead of one each.
///
/// No thread of its own: a caller that holds a connection leads when no group is running, on that
/// connection (a caller holding none, `append(_:using:)`, first takes one from the pool: the oldest
/// of them, one at a time, already while the group before it runs, and only while no caller
/// holding a connection waits, since those may hold the pool's last connections). It takes the
/// queued requests (itself first, then oldest first, at most `maximumRequests` of them and
/// `maximumEvents` events; only requests for the same database),
/// runs `BEGIN`, each request's append (behind a savepoint: a refused append, a wrong expected
/// version say, rolls back that request alone and keeps its error), projects everything the group
/// appended with `InlineProjections.project` (its per-projection savepoints and deferral rules
/// unchanged), and `COMMIT`s once. The others wait on a condition until their group has committed,
/// then return their own events, or their own error; when the `COMMIT` fails, every request the
/// group had accepted gets that error (nothing of the group is in the log, nothing was
/// acknowledged). Requests that arrive meanwhile queue for the next group.
///
/// Each request sleeps on a semaphore of its own, and is woken only when something it waits for
/// may have come: its group's answer, its turn to lead (the oldest queued request holding a
/// connection, once no group runs) or to take a connection from the pool (the oldest queued
/// request, once none holding a connection is queued and none is taking one). With one condition
/// for all, every group's end woke every waiting request, dozens of threads to find one leader
/// (docs/benchmarks.md, issue 12's tenth session).
///
/// Do not call `append(_:using: client)` while holding a connection of `client`'s pool: with every
/// connection held that way, no one could lead.
///
/// A waiting request holds no connection (`InlineProjections.append(_:using:)`: the leader takes
/// one from the pool for its group), or its own connection idle and outside any transaction
/// (callers inside a transaction of their own do not come here), so it holds no lock the leader
/// could wait for.
public final class InlineGroupCommit: @unchecked Sendable {
    // Everything below `condition` is read and written only while holding it (each request waits
    // on its own `Ticket.wake`, not on it).
    private let condition = NSLock()
    private var queue: [Ticket] = []
    private var running = false
    /// A waiting request is taking a connection from the pool to lead with.
    private var acquiring = false
    private var statistics = Statistics()

    /// The most requests one transaction takes.
    public let maximumRequests: Int
    /// The most events one transaction takes (a request with more than this still runs, alone).
    public let maximumEvents: Int

    public init(maximumRequests: Int = 100, maximumEvents: Int = 2_000) {
        self.maximumRequests = max(1, maximumRequests)
        self.maximumEvents = max(1, maximumEvents)
    }

    /// How many groups have committed (or failed) and how many requests they held; and, by
    /// projection, how many of the requests that committed had it applied inline or left it to
    /// its projector (their authors may not see their write at once: `/metrics`).
    public struct Statistics: Sendable, Hashable {
        public var groups = 0
        public var requests = 0
        public var largestGroup = 0
        public var applied: [String: Int] = [:]
        public var deferred: [String: Int] = [:]
    }

    public var counts: Statistics {
        condition.lock()
        defer { condition.unlock() }
        return statistics
    }

    /// Whether a group is being committed, and how many requests wait for the next one.
    public var state: (running: Bool, queued: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (running, queue.count)
    }

    /// One request: what to append, what else to write in its savepoint, and (once its group is
    /// done) what came of it.
    final class Ticket: @unchecked Sendable {
        let append: EventStore.PreparedAppend
        let also: (@Sendable (PostgresConnection) throws -> Void)?
        let database: PostgresConfiguration
        /// The driver it came through: the projections it asks for, and its outcome's filter.
        let projections: InlineProjections
        /// Whether its caller holds a connection while it waits (and so may lead). Under the condition.
        var holdsConnection = false
        /// Set by the leader, under the committer's condition, once the group is done.
        var result: Result<(appended: [AppendedEvent], outcome: InlineProjections.Outcome), any Error>?
        /// Signalled when this request may have something to do or to return (`wakeNext`).
        let wake = DispatchSemaphore(value: 0)

        init(
            append: EventStore.PreparedAppend, also: (@Sendable (PostgresConnection) throws -> Void)?, database: PostgresConfiguration,
            projections: InlineProjections
        ) {
            self.append = append
            self.also = also
            self.database = database
            self.projections = projections
        }
    }

    /// Where a leader runs its group: on the connection its caller holds, or on one it takes from
    /// the pool for the group (its followers then wait holding no connection at all).
    enum Leader {
        case held(PostgresConnection)
        case pooled(PostgresClient)

        var database: PostgresConfiguration {
            switch self {
            case .held(let connection): connection.configuration
            case .pooled(let client): client.configuration.connection
            }
        }
    }

    /// Runs `append` (and `also` after it, in the same savepoint) in the next group transaction,
    /// and returns when that transaction has committed. Drivers with other projections may share
    /// one committer (the API's routes do): a group applies every projection any of its requests
    /// asks for, to all of the group's events (a projection applies the log in order), and each
    /// request is told of the projections its own driver has.
    func run(
        _ append: EventStore.PreparedAppend, also: (@Sendable (PostgresConnection) throws -> Void)?, projections: InlineProjections,
        leader: Leader
    ) throws -> (appended: [AppendedEvent], outcome: InlineProjections.Outcome) {
        let ticket = Ticket(append: append, also: also, database: leader.database, projections: projections)
        condition.lock()
        queue.append(ticket)
        switch leader {
        case .held(let connection):
            return try wait(ticket, on: connection)
        case .pooled(let client):
            // Only a request that holds a connection leads. One waiting request at a time (the
            // oldest) takes one from the pool, and only while no request holding a connection is
            // queued: those lead without waiting for the pool, whose connections they may hold.
            // It takes it while a group is still running, so that it leads the next group the
            // moment that one commits, instead of waiting for the pool only then.
            while true {
                if let result = ticket.result {
                    condition.unlock()
                    return try result.get()
                }
                if !acquiring, !queue.contains(where: \.holdsConnection), queue.first === ticket {
                    acquiring = true
                    condition.unlock()
                    var entered = false
                    do {
                        return try client.withConnectionBlocking { connection in
                            condition.lock()
                            entered = true
                            acquiring = false
                            return try wait(ticket, on: connection)
                        }
                    } catch let error where !entered {
                        condition.lock()
                        acquiring = false
                        if let index = queue.firstIndex(where: { $0 === ticket }) {
                            queue.remove(at: index)
                            wakeNext()
                            condition.unlock()
                            throw error
                        }
                        // Taken into a group meanwhile: its answer comes from there.
                        wakeNext()
                        continue
                    }
                }
                sleep(ticket)
            }
        }
    }

    /// Waits for `ticket`'s group, leading one on `connection` whenever none is running. Holding
    /// `condition` on entry; released on return.
    private func wait(
        _ ticket: Ticket, on connection: PostgresConnection
    ) throws -> (appended: [AppendedEvent], outcome: InlineProjections.Outcome) {
        ticket.holdsConnection = true
        // Came from the pool already answered: a request behind it may have to take one now.
        if ticket.result != nil { wakeNext() }
        while true {
            if let result = ticket.result {
                condition.unlock()
                return try result.get()
            }
            if !running {
                running = true
                let group = takeGroup(leader: ticket)
                // No request holding a connection is left queued: the oldest takes one from the
                // pool while this group runs, to lead the next.
                wakeNext()
                condition.unlock()
                let results = Self.commit(group, on: connection)
                condition.lock()
                for (member, result) in zip(group, results) {
                    member.result = result
                    guard case .success(let answer) = result else { continue }
                    for name in answer.outcome.applied { statistics.applied[name, default: 0] += 1 }
                    for name in answer.outcome.deferred { statistics.deferred[name, default: 0] += 1 }
                }
                running = false
                statistics.groups += 1
                statistics.requests += group.count
                statistics.largestGroup = max(statistics.largestGroup, group.count)
                for member in group where member !== ticket { member.wake.signal() }
                wakeNext()
                continue
            }
            sleep(ticket)
        }
    }

    /// Releases `condition`, sleeps until `ticket` is woken, and takes `condition` again.
    private func sleep(_ ticket: Ticket) {
        condition.unlock()
        ticket.wake.wait()
        condition.lock()
    }

    /// Wakes the request that has to act next, if any: with no group running, the oldest queued
    /// request holding a connection (it leads); with none such queued and none taking a connection
    /// from the pool, the oldest queued request (it takes one). Holding `condition`. A request
    /// woken for nothing finds nothing to do and sleeps again; one woken twice only looks twice.
    private func wakeNext() {
        if let holder = queue.first(where: \.holdsConnection) {
            if !running { holder.wake.signal() }
        } else if !acquiring, let first = queue.first {
            first.wake.signal()
        }
    }

    /// `leader` and the oldest queued requests for its database, within the bounds; taken off the
    /// queue. Holding `condition`.
    private func takeGroup(leader: Ticket) -> [Ticket] {
        queue.removeAll { $0 === leader }
        var group = [leader]
        var events = leader.append.events.count
        var index = 0
        while index < queue.count, group.count < maximumRequests {
            let next = queue[index]
            guard next.database == leader.database else {
                index += 1
                continue
            }
            if events + next.append.events.count > maximumEvents { break }
            events += next.append.events.count
            group.append(queue.remove(at: index))
        }
        return group
    }

    typealias Answer = Result<(appended: [AppendedEvent], outcome: InlineProjections.Outcome), any Error>

    /// One transaction for `group`; an answer for each of its requests, in order.
    ///
    /// The projections' writes go with the `COMMIT`, in its round trip (`InlineProjections.project`,
    /// `writesGoWithNext`). When one of them fails, so does that `COMMIT`, and nothing of the group
    /// is committed: the group is then done again from its `BEGIN`, the careful way (the writes in
    /// a round trip of their own, behind a savepoint, and projection by projection after a
    /// failure, deferring or parking as always), so that a refused write costs the group nothing
    /// but the time.
    static func commit(_ group: [Ticket], on connection: PostgresConnection) -> [Answer] {
        let projections = InlineProjections.joining(group.map(\.projections))
        if let answers = attempt(group, projections: projections, writesGoWithNext: true, on: connection) { return answers }
        return attempt(group, projections: projections, writesGoWithNext: false, on: connection) ?? []
    }

    /// `commit`'s transaction; nil, with it rolled back, when the writes went with the `COMMIT`
    /// and it failed for anything but a lost connection.
    private static func attempt(
        _ group: [Ticket], projections: InlineProjections, writesGoWithNext: Bool, on connection: PostgresConnection
    ) -> [Answer]? {
        var answers: [Answer?] = Array(repeating: nil, count: group.count)
        var appendedByRequest: [[AppendedEvent]] = Array(repeating: [], count: group.count)
        func failAll(_ error: any Error) -> [Answer] {
            if connection.isOpen && connection.isInTransaction { _ = try? connection.execute("ROLLBACK") }
            return answers.map { $0 ?? .failure(error) }
        }
        // BEGIN goes with the group's first append, in one round trip.
        connection.executeWithNext("BEGIN")
        var records: [RecordedEvent] = []
        var typed: [Int64: any EventPayload] = [:]
        // Runs of plain requests (no expected versions, no work of their own) go in one statement
        // each; when it is refused (an idempotency key reused, say), its requests run one by one.
        var joinedAppends: [Int: [AppendedEvent]] = [:]
        var start = 0
        while start < group.count {
            var end = start
            while end < group.count, group[end].also == nil, group[end].append.isJoinable { end += 1 }
            if end - start >= 2 {
                let parts = group[start..<end].map(\.append)
                do {
                    if let joined = try EventStore.PreparedAppend.joined(parts) {
                        let appended = try joined.run(on: connection)
                        for (offset, own) in EventStore.PreparedAppend.split(appended, into: parts).enumerated() {
                            joinedAppends[start + offset] = own
                        }
                    }
                } catch let error as PostgresError where error.isConnectionError {
                    return failAll(error)
                } catch {
                    if connection.isTransactionFailed { return failAll(error) }
                }
            }
            start = max(end, start + 1)
        }
        for (index, ticket) in group.enumerated() {
            if let appended = joinedAppends[index] {
                appendedByRequest[index] = appended
                records += appended.filter(\.wasAppended).map(\.event)
                typed.merge(InlineProjections.typedPayloads(of: ticket.append.events, appended: appended)) { first, _ in first }
                continue
            }
            do {
                if let also = ticket.also {
                    try connection.execute("SAVEPOINT inbox_group_request")
                    do {
                        let appended = try ticket.append.run(on: connection)
                        try also(connection)
                        try connection.execute("RELEASE SAVEPOINT inbox_group_request")
                        appendedByRequest[index] = appended
                    } catch let error as PostgresError where error.isConnectionError {
                        throw error
                    } catch {
                        try connection.execute("ROLLBACK TO SAVEPOINT inbox_group_request")
                        try connection.execute("RELEASE SAVEPOINT inbox_group_request")
                        answers[index] = .failure(error)
                        continue
                    }
                } else {
                    do {
                        // The append runs behind a savepoint of its own and rolls back to it when refused.
                        appendedByRequest[index] = try ticket.append.run(on: connection)
                    } catch let error as PostgresError where error.isConnectionError {
                        throw error
                    } catch {
                        answers[index] = .failure(error)
                    }
                }
                // Whatever went wrong must not have left the transaction failed for the others. (Asked
                // only after a failure: asking sends the statements held back, a round trip of its own,
                // and after a success nothing can have failed.)
                if answers[index] != nil, connection.isTransactionFailed {
                    throw PostgresError(.clientFailure, "An append of the group left its transaction failed.")
                }
                records += appendedByRequest[index].filter(\.wasAppended).map(\.event)
                typed.merge(InlineProjections.typedPayloads(of: ticket.append.events, appended: appendedByRequest[index])) { first, _ in first }
            } catch {
                return failAll(error)
            }
        }
        let outcome: InlineProjections.Outcome
        do {
            outcome = try projections.project(records, typed: typed, writesGoWithNext: writesGoWithNext, on: connection)
            // A COMMIT of a failed transaction rolls it back and says so only in its tag (asking
            // first would cost a round trip of its own).
            if try connection.execute("COMMIT").commandTag != "COMMIT" {
                throw PostgresError(.clientFailure, "The inline projections left the group's transaction failed; it was rolled back.")
            }
        } catch let error as PostgresError where error.isConnectionError {
            return failAll(error)
        } catch {
            if writesGoWithNext {
                if connection.isOpen && connection.isInTransaction { _ = try? connection.execute("ROLLBACK") }
                if connection.isOpen && !connection.isInTransaction { return nil }
            }
            return failAll(error)
        }
        return group.indices.map { index in
            if let answer = answers[index] { return answer }
            let appended = appendedByRequest[index]
            return .success((appended, group[index].projections.outcome(outcome, for: appended)))
        }
    }
}
