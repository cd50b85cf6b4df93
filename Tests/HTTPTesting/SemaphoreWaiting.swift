import Dispatch

extension DispatchSemaphore {
    /// Whether the semaphore is signalled within `timeout`, taking the signal. Polled, so that a
    /// test waiting for a thread of its own holds none of the cooperative pool's threads, which a
    /// busy `make test` may need for the very work being waited for.
    public func signalled(within timeout: Duration) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while wait(timeout: .now()) == .timedOut {
            if ContinuousClock.now >= deadline { return false }
            try await Task.sleep(for: .milliseconds(5))
        }
        return true
    }
}
