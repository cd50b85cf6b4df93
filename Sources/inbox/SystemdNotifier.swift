import CSystemd
import Foundation
import Lifecycle

/// Tells systemd how the process is doing, through libsystemd's `sd_notify` (units of
/// `Type=notify`, packaging/systemd/): `READY=1` once every server of the process listens (the
/// database was reached and migrated before any role started), then `WATCHDOG=1` at half the
/// unit's `WatchdogSec=` while the process's tasks run (a process whose tasks hang stops pinging,
/// and systemd restarts it), and `STOPPING=1` when the roles begin to stop. Without
/// `NOTIFY_SOCKET` in the environment (not started by systemd) it is not added at all.
struct SystemdNotifier: Service {
    let readiness: Readiness
    let roles: [String]
    let log: Logger

    static var isExpected: Bool { getenv("NOTIFY_SOCKET") != nil }

    /// The watchdog's interval, when the unit asks for one (`WATCHDOG_USEC`, for this process).
    static var watchdogInterval: Duration? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return .microseconds(Int64(microseconds))
    }

    func run() async throws {
        do {
            try await readiness.wait()
        } catch {
            return  // stopped before it was ready: systemd learns it from the exit
        }
        notify("READY=1\nSTATUS=running: \(roles.joined(separator: ", "))")
        let watchdog = Self.watchdogInterval
        log.info("told systemd the tier is ready", metadata: ["watchdog": watchdog.map { "\($0)" } ?? "off"])
        do {
            while true {
                if let watchdog {
                    try await Task.sleep(for: watchdog / 2)
                    notify("WATCHDOG=1")
                } else {
                    try await Task.sleep(for: .seconds(3600))
                }
            }
        } catch {
            notify("STOPPING=1\nSTATUS=stopping")
        }
    }

    private func notify(_ state: String) {
        let result = sd_notify(0, state)
        if result < 0 { log.warning("sd_notify failed", metadata: ["errno": .int(-result), "state": .string(state)]) }
    }
}
