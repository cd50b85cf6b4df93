import Foundation

/// What the sender does after a provider answered a push. The classification is pure (status,
/// body and `Retry-After` in, outcome out); acting on it is the sender's.
public enum PushOutcome: Sendable, Hashable {
    /// Accepted by Apple or Google. (Not a promise the phone shows it: a phone that is off gets
    /// it later or never, and neither provider says which.)
    case delivered
    /// The token is dead for this app: delete the registration on the spot, and never retry.
    case unregistered(reason: String)
    /// APNs does not know the token on this host: probe the other host once (a registration
    /// without `apnsEnvironment`), and delete the registration when that host refuses it too.
    case badDeviceToken
    /// The provider token (APNs) or access token (FCM) is stale: get a new one as the
    /// `ProviderTokenPolicy` allows, and retry once.
    case expiredProviderToken
    /// A passing refusal (429, 5xx): try again after `after` when the provider said, with backoff
    /// otherwise, until the push's deadline.
    case retry(reason: String, after: Duration?)
    /// Will never succeed as sent: count and log it, keep the token, never retry.
    case permanent(reason: String)
}

/// `Retry-After` (RFC 9110 10.2.3): a number of seconds or an HTTP date (IMF-fixdate, the one form
/// senders may write). A date in the past is no wait at all; anything else unreadable is nil.
public enum RetryAfter {
    public static func parse(_ value: String?, now: Date) -> Duration? {
        guard let value else { return nil }
        let bytes = Array(value.utf8.drop { $0 == 0x20 || $0 == 0x09 }.reversed().drop { $0 == 0x20 || $0 == 0x09 }.reversed())
        guard !bytes.isEmpty else { return nil }
        if bytes.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) {
            guard bytes.count <= 9 else { return nil }
            return .seconds(number(bytes[...]))
        }
        guard let date = httpDate(bytes) else { return nil }
        let seconds = date - Int64(now.timeIntervalSince1970.rounded(.down))
        return .seconds(max(seconds, 0))
    }

    /// `Sun, 06 Nov 1994 08:49:37 GMT` as unix seconds.
    static func httpDate(_ bytes: [UInt8]) -> Int64? {
        guard bytes.count == 29, bytes[3] == UInt8(ascii: ","), bytes[4] == 0x20, bytes[7] == 0x20, bytes[11] == 0x20,
            bytes[16] == 0x20, bytes[19] == UInt8(ascii: ":"), bytes[22] == UInt8(ascii: ":"), bytes[25] == 0x20,
            Array(bytes[26...]) == Array("GMT".utf8)
        else { return nil }
        let digitSpans = [5..<7, 12..<16, 17..<19, 20..<22, 23..<25]
        guard digitSpans.allSatisfy({ bytes[$0].allSatisfy { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) } }) else { return nil }
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        guard let monthIndex = months.firstIndex(where: { Array($0.utf8) == Array(bytes[8..<11]) }) else { return nil }
        let day = number(bytes[5..<7]), year = number(bytes[12..<16])
        let hour = number(bytes[17..<19]), minute = number(bytes[20..<22]), second = number(bytes[23..<25])
        guard (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        return daysFromCivil(year: year, month: Int64(monthIndex + 1), day: day) * 86_400 + hour * 3600 + minute * 60 + second
    }

    private static func number(_ digits: ArraySlice<UInt8>) -> Int64 {
        digits.reduce(0) { $0 * 10 + Int64($1 - UInt8(ascii: "0")) }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    static func daysFromCivil(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
