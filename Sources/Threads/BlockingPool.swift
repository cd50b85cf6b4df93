import Foundation

/// A fixed set of threads that run jobs in the order they come, for work that blocks (a request
/// waiting on its database, a libpq call). Outside Swift's cooperative pool, which must never block.
/// With one thread, jobs run one at a time in order (a connection's thread).
public final class BlockingPool: @unchecked Sendable {
    public typealias Job = @Sendable () -> Void

    // Guarded by `condition`.
    private let condition = NSCondition()
    /// Queued jobs from `head` on; a taken job's slot is emptied at once, so that nothing a done
    /// job captured (a connection's job holds its caller's closure: a replay's batch of 20,000
    /// events, a request's body) outlives it. Keeping the done jobs until the next compaction (1,024
    /// of them) kept every batch a replay or a projector read, about 870 bytes an event, 13 GiB at
    /// ten million (docs/benchmarks.md, issue 14).
    private var jobs: [Job?] = []
    private var head = 0
    private var stopping = false

    /// `name` names the threads (`name-1`, `name-2`, ..., or `name` for one).
    public init(threads: Int, name: String) {
        let count = max(1, threads)
        for number in 1...count {
            // Named from inside: on Linux a name set before start does not reach the thread.
            let thread = Thread { [self] in
                Thread.current.name = count == 1 ? name : "\(name)-\(number)"
                run()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    public func submit(_ job: @escaping Job) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Lets the threads finish the jobs queued, then end.
    public func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        condition.unlock()
    }

    private func run() {
        while true {
            condition.lock()
            while head == jobs.count && !stopping { condition.wait() }
            if head == jobs.count {
                condition.unlock()
                return
            }
            let job = jobs[head]
            jobs[head] = nil
            head += 1
            // Dropping the done jobs now and then keeps the queue from growing, without moving
            // every job on every take.
            if head > 1024 && head * 2 > jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            condition.unlock()
            job?()
        }
    }
}
