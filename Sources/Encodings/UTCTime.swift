import Foundation
import Glibc

/// A moment written in UTC by the C library's `strftime`, in the POSIX locale (English day and
/// month names whatever the machine's locale): a mail's `Date:` header and the times its lines
/// show. Foundation's `Calendar` made a calendar and a time zone for each, a tenth of a mail's
/// rendering.
public enum UTCTime {
    /// `date` (to the second, rounded down) in `format`, `strftime`'s conversions; empty for a
    /// date no `time_t` holds.
    public static func format(_ date: Date, _ format: String) -> String {
        guard var seconds = time_t(exactly: date.timeIntervalSince1970.rounded(.down)) else { return "" }
        var parts = tm()
        guard gmtime_r(&seconds, &parts) != nil else { return "" }
        var buffer = [CChar](repeating: 0, count: 128)
        let length = strftime_l(&buffer, buffer.count, format, &parts, posix)
        return String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// The POSIX locale of times (`LC_TIME_MASK`), made once: `strftime_l` only reads it.
    nonisolated(unsafe) private static let posix: locale_t = newlocale(1 << LC_TIME, "C", nil)
}
