/// A `Duration` as a number of seconds or milliseconds, for logs, metrics, rates and the C and SQL
/// interfaces that take a count (`poll`, `statement_timeout`): `components` split in two is easy to
/// get wrong by a factor of a thousand.
extension Duration {
    /// The duration in seconds, with its fraction.
    @inlinable
    public var inSeconds: Double {
        let parts = components
        return Double(parts.seconds) + Double(parts.attoseconds) / 1e18
    }

    /// The duration in milliseconds, with its fraction.
    @inlinable
    public var inMilliseconds: Double {
        let parts = components
        return Double(parts.seconds) * 1000 + Double(parts.attoseconds) / 1e15
    }

    /// The whole milliseconds of the duration (a fraction of one is dropped), saturating instead of
    /// overflowing for absurd durations.
    @inlinable
    public var wholeMilliseconds: Int64 {
        let parts = components
        let (product, overflow) = parts.seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return parts.seconds < 0 ? .min : .max }
        return product + parts.attoseconds / 1_000_000_000_000_000
    }
}
