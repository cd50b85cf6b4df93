import CShims
import Foundation
import Synchronization
import Threads

/// A deadline for receiving a whole request, head and body, counted from the moment its
/// connection could send it: when the connection was accepted, or when the previous answer on it
/// was sent. A connection whose request is not all in by then is closed, however steadily it
/// trickles bytes (libmicrohttpd's own timeout is idle time, restarted by every byte).
///
/// libmicrohttpd has no call to close a connection from outside its callbacks, so a watcher
/// thread shuts the socket down (`shutdown(2)`, not `close`): the connection's event loop then
/// reads the end of the stream and closes the connection itself. The socket is only touched while
/// the connection is known open: libmicrohttpd tells of the close (`closed`) before it closes the
/// descriptor, and both take the same lock, so a number reused by a newer connection is never hit.
final class RequestDeadlines: Sendable {
    private struct Watched {
        let socket: Int32
        /// Nil while the request is being answered: only receiving is bounded.
        var deadline: ContinuousClock.Instant?
    }

    let limit: Duration
    /// By connection, in stripes: every request passes here twice, from every event loop, so one
    /// lock would be a queue (and Swift's `Mutex` spins on two cores; these locks sleep).
    private let watched = Striped<[UInt: Watched]>(count: 16) { [:] }
    private let stopped = Atomic<Bool>(false)
    /// How often the watcher looks, in seconds: a late connection is closed at most this long
    /// after its deadline.
    static let sweepSeconds = 0.1

    init(limit: Duration) {
        self.limit = limit
        let thread = Thread { [self] in
            while !stopped.load(ordering: .relaxed) {
                Thread.sleep(forTimeInterval: Self.sweepSeconds)
                sweep(now: .now)
            }
        }
        thread.name = "http-deadlines"
        thread.start()
    }

    /// A connection was accepted: its first request must be in within `limit`.
    func opened(_ connection: OpaquePointer) {
        let socket = wristler_mhd_connection_socket(connection)
        guard socket >= 0 else { return }
        let key = key(connection)
        watched.withLock(for: key) { $0[key] = Watched(socket: socket, deadline: .now + limit) }
    }

    /// The request's head is in and it may take until `deadline` to arrive whole (a large upload),
    /// when that is later than its deadline now.
    func extend(_ connection: OpaquePointer, until deadline: ContinuousClock.Instant) {
        let key = key(connection)
        watched.withLock(for: key) { entries in
            guard let current = entries[key]?.deadline, current < deadline else { return }
            entries[key]?.deadline = deadline
        }
    }

    /// The request is all in and goes to the handler.
    func received(_ connection: OpaquePointer) {
        let key = key(connection)
        watched.withLock(for: key) { $0[key]?.deadline = nil }
    }

    /// The answer was sent (or the request given up): the next request on the connection gets a
    /// deadline of its own.
    func answered(_ connection: OpaquePointer) {
        let deadline = ContinuousClock.now + limit
        let key = key(connection)
        watched.withLock(for: key) { $0[key]?.deadline = deadline }
    }

    /// libmicrohttpd closes the connection (its socket is still open during this call).
    func closed(_ connection: OpaquePointer) {
        let key = key(connection)
        _ = watched.withLock(for: key) { $0.removeValue(forKey: key) }
    }

    func stop() { stopped.store(true, ordering: .relaxed) }

    private func sweep(now: ContinuousClock.Instant) {
        watched.forEach { watched in
            for (connection, entry) in watched {
                guard let deadline = entry.deadline, deadline <= now else { continue }
                Glibc.shutdown(entry.socket, Int32(SHUT_RDWR))
                watched[connection]?.deadline = nil
            }
        }
    }

    private func key(_ connection: OpaquePointer) -> UInt { UInt(bitPattern: Int(bitPattern: connection)) }
}
