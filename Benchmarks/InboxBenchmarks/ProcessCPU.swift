import Foundation
import Glibc

/// CPU time (user + system) of processes on this machine, from /proc: a figure the machine's
/// other load hardly moves, unlike a rate. Used to say where a benchmark's time goes per event.
enum ProcessCPU {
    /// Seconds of CPU `pid` has used (all its threads); with `children`, plus what its
    /// waited-for children used, and what its living children use now (a PostgreSQL postmaster
    /// and its backends).
    static func seconds(of pid: Int32, children: Bool = false) -> Double {
        guard let fields = stat(pid) else { return 0 }
        var ticks = fields[13] + fields[14]
        if children {
            ticks += fields[15] + fields[16]
            for child in childPIDs(of: pid) {
                if let childFields = stat(child) { ticks += childFields[13] + childFields[14] }
            }
        }
        return Double(ticks) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// The parent of `pid` (the postmaster of a backend).
    static func parent(of pid: Int32) -> Int32? {
        stat(pid).map { Int32($0[3]) }
    }

    /// Fields of /proc/<pid>/stat as numbers, numbered from 0 as in proc(5) minus one; the name
    /// (field 2, in parentheses, which may hold spaces) and the state (3) read as 0.
    private static func stat(_ pid: Int32) -> [Int]? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return nil }
        let rest = text[text.index(after: close)...].split(separator: " ")
        return [Int(pid), 0] + rest.map { Int($0) ?? 0 }
    }

    private static func childPIDs(of parent: Int32) -> [Int32] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        return entries.compactMap { Int32($0) }.filter { self.parent(of: $0) == parent }
    }
}
