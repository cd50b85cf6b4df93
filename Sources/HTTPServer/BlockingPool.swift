import Foundation

/// A fixed set of threads that run jobs in the order they come, for work that blocks (a request
/// waiting on its database). Outside Swift's cooperative pool, which must never block.
final class BlockingPool: @unchecked Sendable {
    typealias Job = @Sendable () -> Void

    // Guarded by `condition`.
    private let condition = NSCondition()
    private var jobs: [Job] = []
    private var head = 0
    private var stopping = false

    init(threads: Int, name: String) {
        for number in 1...max(1, threads) {
            let thread = Thread { [self] in
                Thread.current.name = "\(name)-\(number)"
                run()
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
    }

    func submit(_ job: @escaping Job) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    /// Lets the threads finish the jobs queued, then end.
    func stop() {
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
            head += 1
            // Dropping the done jobs now and then keeps the queue from growing, without moving
            // every job on every take.
            if head > 1024 && head * 2 > jobs.count {
                jobs.removeFirst(head)
                head = 0
            }
            condition.unlock()
            job()
        }
    }
}
