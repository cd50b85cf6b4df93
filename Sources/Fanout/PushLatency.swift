/// How long APNs and FCM took to answer each push, from the send's start to the push's answer
/// (time waiting for a stream of the connection included), as counters the fan-outs add to
/// `push_counters` with the pushes' outcomes: per provider, the answers in each bucket, their
/// count and their sum in microseconds. /metrics makes a Prometheus histogram of them
/// (`inbox_push_provider_duration_seconds{provider}`), summed over every node.
public enum PushLatency {
    /// The buckets' upper bounds, in seconds.
    public static let bounds: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
    static let prefix = "latency."

    /// The provider of a platform's pushes.
    static func provider(_ platform: PushPlatform) -> String {
        switch platform {
        case .ios: "apns"
        case .android: "fcm"
        }
    }

    /// A provider's counter names, made once rather than for every push.
    struct Names {
        let buckets: [String]
        let count: String
        let sum: String

        init(_ provider: String) {
            buckets = (0...PushLatency.bounds.count).map { PushLatency.prefix + provider + ".le." + String($0) }
            count = PushLatency.prefix + provider + ".count"
            sum = PushLatency.prefix + provider + ".sum_us"
        }
    }
    static let names: [PushPlatform: Names] = [.ios: Names(provider(.ios)), .android: Names(provider(.android))]

    /// Adds one answer of `platform`'s provider that took `seconds` to `counts`.
    static func count(_ seconds: Double, platform: PushPlatform, into counts: inout [String: Int]) {
        guard let names = names[platform] else { return }
        let bucket = bounds.firstIndex { seconds <= $0 } ?? bounds.count
        counts[names.buckets[bucket], default: 0] += 1
        counts[names.count, default: 0] += 1
        counts[names.sum, default: 0] += Int(max(0, seconds) * 1_000_000)
    }

    /// Whether a counter of `push_counters` is one of these (not a push's outcome).
    public static func isLatency(_ name: String) -> Bool { name.hasPrefix(prefix) }

    /// The Prometheus histogram of the latency counters among `counters`.
    public static func metricLines(_ counters: [(name: String, count: Int64)]) -> [String] {
        var buckets: [String: [Int64]] = [:]
        var sums: [String: Int64] = [:]
        var totals: [String: Int64] = [:]
        for counter in counters where isLatency(counter.name) {
            let parts = counter.name.dropFirst(prefix.count).split(separator: ".")
            guard parts.count >= 2 else { continue }
            let provider = String(parts[0])
            switch parts[1] {
            case "count": totals[provider] = counter.count
            case "sum_us": sums[provider] = counter.count
            case "le" where parts.count == 3:
                guard let index = Int(parts[2]), index >= 0, index <= bounds.count else { continue }
                buckets[provider, default: [Int64](repeating: 0, count: bounds.count + 1)][index] += counter.count
            default: continue
            }
        }
        var lines = [
            "# HELP inbox_push_provider_duration_seconds How long APNs and FCM took to answer a push, from the send's start.",
            "# TYPE inbox_push_provider_duration_seconds histogram",
        ]
        for provider in Set(totals.keys).union(buckets.keys).sorted() {
            let counts = buckets[provider] ?? [Int64](repeating: 0, count: bounds.count + 1)
            var cumulative: Int64 = 0
            for (index, bound) in bounds.enumerated() {
                cumulative += counts[index]
                lines.append("inbox_push_provider_duration_seconds_bucket{provider=\"\(provider)\",le=\"\(bound)\"} \(cumulative)")
            }
            cumulative += counts[bounds.count]
            lines.append("inbox_push_provider_duration_seconds_bucket{provider=\"\(provider)\",le=\"+Inf\"} \(cumulative)")
            lines.append("inbox_push_provider_duration_seconds_sum{provider=\"\(provider)\"} \(Double(sums[provider] ?? 0) / 1_000_000)")
            lines.append("inbox_push_provider_duration_seconds_count{provider=\"\(provider)\"} \(totals[provider] ?? cumulative)")
        }
        return lines
    }
}
