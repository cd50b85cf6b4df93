import Glibc

/// Finding bytes in bytes with libc (`memchr`, `memcmp`), where the standard library's generic
/// `firstRange(of:)` walks element by element through protocol witnesses.
public enum ByteSearch {
    /// The index of the first `needle` in `bytes` at or after `start`: `memchr` to each candidate
    /// for the needle's byte at `probe` (best one rare in the text), `memcmp` of the whole.
    public static func find(_ needle: [UInt8], in bytes: UnsafeBufferPointer<UInt8>, from start: Int = 0, probe: Int = 0) -> Int? {
        guard let base = bytes.baseAddress, needle.indices.contains(probe), start >= 0, bytes.count - start >= needle.count else { return nil }
        let last = bytes.count - needle.count
        var index = start
        return needle.withUnsafeBytes { needle -> Int? in
            let byte = Int32(needle[probe])
            while index <= last {
                guard let found = memchr(base + index + probe, byte, last - index + 1) else { return nil }
                index = UnsafeRawPointer(found) - UnsafeRawPointer(base) - probe
                if memcmp(base + index, needle.baseAddress!, needle.count) == 0 { return index }
                index += 1
            }
            return nil
        }
    }
}
