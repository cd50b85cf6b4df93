import Encodings
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// How long the disk under the database takes to make a write durable: 8 KiB written and
/// `fdatasync`ed, again and again, into a file of the cluster's own folder (the disk its WAL is
/// flushed to), as PostgreSQL does for every commit with `synchronous_commit` on.
///
/// A message post is acknowledged only once its commit is durable, and inline groups commit one
/// after another, so a flush that stalls holds every post behind it: the worst flushes are a floor
/// under posting's p99 that no code of the tier can lift (docs/benchmarks.md, "Issue 12, seventh
/// session"). Measured on a quiet disk, in the same run as the posting rows.
struct DiskFlushProbe {
    /// A flush slower than this is counted as a stall (issue 12's p99 target for a post).
    static let stall: Duration = .milliseconds(20)
    static let writeBytes = 8_192
    /// The file's size: the writes go round it, overwriting blocks already allocated, as
    /// PostgreSQL's recycled WAL segments do.
    static let fileBytes = 8 * 1_048_576

    struct Result {
        var flushes: Int
        var seconds: Double
        var p50: Double
        var p99: Double
        var p999: Double
        /// The slowest flush, in seconds.
        var worst: Double
        /// Flushes slower than `stall`.
        var stalls: Int
    }

    /// Flushes for `duration` in a new file under `folder`, removed afterwards.
    static func measure(in folder: URL, for duration: Duration) throws -> Result {
        let path = folder.appendingPathComponent("disk-flush-probe-\(getpid())").path
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard descriptor >= 0 else { throw BenchmarkFailure(description: "disk flush probe: cannot create \(path): \(String(cString: strerror(errno)))") }
        defer {
            close(descriptor)
            unlink(path)
        }
        let block = [UInt8](repeating: 0x5a, count: writeBytes)
        func write(at offset: Int) throws {
            let written = block.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, writeBytes, off_t(offset)) }
            guard written == writeBytes else {
                throw BenchmarkFailure(description: "disk flush probe: a write to \(path) failed: \(String(cString: strerror(errno)))")
            }
        }
        // Allocated and durable first, so the timed flushes carry no allocation of their own.
        for offset in stride(from: 0, to: fileBytes, by: writeBytes) { try write(at: offset) }
        guard fsync(descriptor) == 0 else { throw BenchmarkFailure(description: "disk flush probe: fsync of \(path) failed") }

        let clock = ContinuousClock()
        let start = clock.now
        let end = start + duration
        var latencies: [Double] = []
        latencies.reserveCapacity(100_000)
        var offset = 0
        while clock.now < end {
            try write(at: offset)
            offset = (offset + writeBytes) % fileBytes
            let before = clock.now
            guard fdatasync(descriptor) == 0 else {
                throw BenchmarkFailure(description: "disk flush probe: fdatasync of \(path) failed: \(String(cString: strerror(errno)))")
            }
            latencies.append((clock.now - before).inSeconds)
        }
        let seconds = (clock.now - start).inSeconds
        latencies.sort()
        func percentile(_ fraction: Double) -> Double {
            latencies.isEmpty ? 0 : latencies[min(latencies.count - 1, Int(Double(latencies.count) * fraction))]
        }
        let stall = stall.inSeconds
        return Result(
            flushes: latencies.count, seconds: seconds, p50: percentile(0.5), p99: percentile(0.99), p999: percentile(0.999),
            worst: latencies.last ?? 0, stalls: latencies.reduce(0) { $0 + ($1 > stall ? 1 : 0) })
    }
}
