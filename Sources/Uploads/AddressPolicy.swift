import Foundation

/// Which addresses a `sourceUrl` may be fetched from: public unicast ones only. Checked on the
/// address a connection is actually opened to (`SourceFetcher`), so neither a name that resolves
/// to an inner address (or re-resolves to one: DNS rebinding) nor a redirect can reach one.
///
/// Refused, in IPv4: 0.0.0.0/8, 10/8, 100.64/10 (carrier-grade NAT), 127/8, 169.254/16
/// (link-local, cloud metadata), 172.16/12, 192.0.0/24, 192.168/16, 198.18/15, 224/4 (multicast),
/// 240/4 and the broadcast address. In IPv6: `::` and `::1`, fc00::/7 (unique local), fe80::/10
/// (link-local), fec0::/10, ff00::/8 (multicast), and an IPv4 address carried inside IPv6
/// (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`)
/// whenever that IPv4 address is refused.
public enum AddressPolicy {
    /// Whether an IPv4 address (four bytes, network order) is public.
    public static func isPublic(ipv4 a: [UInt8]) -> Bool {
        guard a.count == 4 else { return false }
        switch (a[0], a[1]) {
        case (0, _), (10, _), (127, _): return false
        case (100, 64...127): return false
        case (169, 254): return false
        case (172, 16...31): return false
        case (192, 168): return false
        case (192, 0) where a[2] == 0: return false
        case (198, 18...19): return false
        case (224...255, _): return false
        default: return true
        }
    }

    /// Whether an IPv6 address (sixteen bytes, network order) is public.
    public static func isPublic(ipv6 a: [UInt8]) -> Bool {
        guard a.count == 16 else { return false }
        let embedded = Array(a[12..<16])
        if a[0..<10].allSatisfy({ $0 == 0 }) {
            // ::ffff:a.b.c.d (mapped), ::a.b.c.d (compatible), and :: and ::1 themselves.
            if a[10] == 0xff && a[11] == 0xff { return isPublic(ipv4: embedded) }
            return false
        }
        if a[0] == 0xfc || a[0] == 0xfd || a[0] == 0xff { return false }
        if a[0] == 0xfe && (a[1] & 0xc0) == 0x80 { return false }  // fe80::/10
        if a[0] == 0xfe && (a[1] & 0xc0) == 0xc0 { return false }  // fec0::/10
        if a[0] == 0x00 && a[1] == 0x64 && a[2] == 0xff && a[3] == 0x9b && a[4..<12].allSatisfy({ $0 == 0 }) {
            return isPublic(ipv4: embedded)
        }
        if a[0] == 0x20 && a[1] == 0x02 { return isPublic(ipv4: Array(a[2..<6])) }
        return true
    }

    /// Whether the address `text` (`203.0.113.7`, `2001:db8::1`) is public; text that is not an
    /// address is not.
    public static func isPublic(_ text: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return isPublic(ipv4: withUnsafeBytes(of: &v4) { Array($0) }) }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return isPublic(ipv6: withUnsafeBytes(of: &v6) { Array($0) }) }
        return false
    }

    /// Whether the socket address at `address` (of `family`) is public, and its text for messages.
    static func check(_ address: UnsafeRawPointer, family: Int32) -> (allowed: Bool, text: String) {
        switch family {
        case AF_INET:
            var v4 = address.loadUnaligned(as: sockaddr_in.self).sin_addr
            let bytes = withUnsafeBytes(of: &v4) { Array($0) }
            return (isPublic(ipv4: bytes), bytes.map(String.init).joined(separator: "."))
        case AF_INET6:
            var v6 = address.loadUnaligned(as: sockaddr_in6.self).sin6_addr
            let bytes = withUnsafeBytes(of: &v6) { Array($0) }
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            _ = inet_ntop(AF_INET6, &v6, &text, socklen_t(text.count))
            return (isPublic(ipv6: bytes), String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        default:
            return (false, "an address of family \(family)")
        }
    }
}
