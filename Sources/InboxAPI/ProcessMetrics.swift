import Foundation

/// The `process_*` metrics every Prometheus client library exports, read from Linux's /proc for
/// this process: CPU seconds, resident and virtual memory, open and allowed file descriptors, and
/// its start time.
enum ProcessMetrics {
    static func text() -> String {
        var lines: [String] = []
        func add(_ name: String, _ type: String, _ help: String, _ value: Double?) {
            guard let value else { return }
            lines += ["# HELP \(name) \(help)", "# TYPE \(name) \(type)", "\(name) \(value == value.rounded() && abs(value) < 1e15 ? String(Int64(value)) : String(value))"]
        }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let page = Double(sysconf(Int32(_SC_PAGESIZE)))
        // /proc/self/stat: the fields after the command's closing parenthesis, from field 3 on.
        let stat = (try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8)).flatMap { text in
            text.lastIndex(of: ")").map { text[text.index(after: $0)...].split(separator: " ").map(String.init) }
        }
        func field(_ number: Int) -> Double? { stat.flatMap { number - 3 < $0.count ? Double($0[number - 3]) : nil } }
        if let user = field(14), let system = field(15), ticks > 0 {
            add("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.", (user + system) / ticks)
        }
        add("process_virtual_memory_bytes", "gauge", "Virtual memory size, in bytes.", field(23))
        add("process_resident_memory_bytes", "gauge", "Resident memory size, in bytes.", field(24).map { $0 * page })
        if let started = field(22), ticks > 0, let uptime = Self.bootTime() {
            add("process_start_time_seconds", "gauge", "Start time of the process since the Unix epoch, in seconds.", uptime + started / ticks)
        }
        add("process_open_fds", "gauge", "Open file descriptors.", (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).map { Double($0.count) })
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 {
            add("process_max_fds", "gauge", "The most file descriptors the process may open.", Double(limit.rlim_cur))
        }
        return lines.isEmpty ? "" : lines.joined(separator: "\n") + "\n"
    }

    /// When the machine booted, in seconds since the Unix epoch (`btime` of /proc/stat).
    static func bootTime() -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("btime ") })
        else { return nil }
        return Double(line.dropFirst(6).trimmingCharacters(in: .whitespaces))
    }
}
