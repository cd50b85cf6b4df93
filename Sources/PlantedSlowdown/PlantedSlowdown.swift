#if PLANTED_SLOWDOWN
import Foundation
#endif

/// The paths the release gate judges, by the names `inbox-bench gate` gives them.
public enum PlantedPath: String, Sendable, CaseIterable {
    case append
    case replay
    case catchUp = "catch-up"
    case bellPage = "bell-page"
    case conversationList = "conversation-list"
    case threadMessages = "thread-messages"
    case posting
    case fanout = "fan-out"
    case mail
    case refresh
}

/// A slowdown planted on purpose in one path, to prove that the release gate catches it
/// (`make bench-planted`, docs/benchmarks.md). Only a build made with `-Xswiftc -DPLANTED_SLOWDOWN`
/// has it; there `INBOX_PLANTED_SLOWDOWN=path:µs` makes that path's every unit of work (an event
/// appended, replayed or caught up, a request answered, a push or a mail sent) spend that many
/// microseconds of CPU more, spinning. In every other build `spend` is empty and inlined away.
public enum Planted {
    @inlinable @inline(__always)
    public static func spend(_ path: PlantedPath, units: Int = 1) {
        #if PLANTED_SLOWDOWN
        PlantedSpin.spend(path, units: units)
        #endif
    }
}

#if PLANTED_SLOWDOWN
@usableFromInline
enum PlantedSpin {
    /// `INBOX_PLANTED_SLOWDOWN=thread-messages:120`; nil (nothing spent) when unset.
    static let chosen: (path: PlantedPath, microseconds: Int)? = {
        guard let value = ProcessInfo.processInfo.environment["INBOX_PLANTED_SLOWDOWN"], !value.isEmpty else { return nil }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let path = PlantedPath(rawValue: String(parts[0])), let microseconds = Int(parts[1]), microseconds > 0 else {
            fatalError("INBOX_PLANTED_SLOWDOWN must be path:microseconds, a path of \(PlantedPath.allCases.map(\.rawValue)), not \(value)")
        }
        return (path, microseconds)
    }()

    @usableFromInline
    static func spend(_ path: PlantedPath, units: Int) {
        guard let chosen, chosen.path == path, units > 0 else { return }
        let deadline = ContinuousClock.now.advanced(by: .microseconds(chosen.microseconds * units))
        while ContinuousClock.now < deadline {}
    }
}
#endif
