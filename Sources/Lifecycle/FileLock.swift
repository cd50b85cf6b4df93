#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// An exclusive `flock(2)` on a lock file, held while `body` runs: what keeps two processes
/// started at once on one data folder from each making "the" key the other does not know.
public enum FileLock {
    public struct Failed: Error, CustomStringConvertible {
        public var description: String
    }

    public static func exclusive<T>(_ path: String, _ body: () throws -> T) throws -> T {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw Failed(description: "Cannot open \(path): \(String(cString: strerror(errno))).") }
        defer { close(descriptor) }
        while flock(descriptor, LOCK_EX) != 0 {
            guard errno == EINTR else { throw Failed(description: "Cannot lock \(path): \(String(cString: strerror(errno))).") }
        }
        return try body()
    }
}
