import Foundation
import Testing
import Threads

/// `BlockingPool` is the thread behind every PostgreSQL connection: what a job captured must not
/// outlive the job. Done jobs once stayed queued until 1,024 had gathered, which kept every batch a
/// replay or a projector read (docs/benchmarks.md, issue 14).
@Suite struct BlockingPoolCaptureTests {
    final class Payload: Sendable {}

    @Test func whatADoneJobCapturedIsLetGoBeforeTheNextJobRuns() {
        let pool = BlockingPool(threads: 1, name: "blocking-pool-test")
        defer { pool.stop() }
        weak var captured: Payload?
        let ran = DispatchSemaphore(value: 0)
        do {
            let payload = Payload()
            captured = payload
            pool.submit { [payload] in
                _ = payload
                ran.signal()
            }
        }
        ran.wait()
        // One thread runs jobs in order: when the second has run, the first is done and gone.
        let second = DispatchSemaphore(value: 0)
        pool.submit { second.signal() }
        second.wait()
        #expect(captured == nil, "the first job's capture is still alive after a later job ran")
    }
}
