import Crypto
import Foundation

/// Time-based one-time passwords as RFC 6238 defines them and authenticator apps compute them:
/// HMAC-SHA1 (RFC 4226's HOTP) over 30-second steps since 1970, six digits.
///
/// `match` accepts the code of the current step and of `window` steps either side (a phone's clock
/// a little off, a code typed as its step ended), and says which step matched, so the caller can
/// refuse that step and every earlier one afterwards: no code is accepted twice (RFC 6238 §5.2).
public struct TOTP: Sendable {
    public static let stepSeconds: Int64 = 30
    public static let digits = 6
    public static let window: Int64 = 1

    public let secret: [UInt8]

    public init(secret: [UInt8]) { self.secret = secret }

    /// A new secret of 20 bytes (160 bits, RFC 4226's recommendation).
    public static func newSecret() -> [UInt8] { SecureRandom.bytes(20) }

    /// The step `date` falls in.
    public static func step(at date: Date) -> Int64 { Int64(date.timeIntervalSince1970.rounded(.down)) / stepSeconds }

    /// The code of `step`, `digits` long with leading zeros.
    public func code(step: Int64, digits: Int = TOTP.digits) -> String {
        var counter = UInt64(bitPattern: step).bigEndian
        let message = withUnsafeBytes(of: &counter) { Array($0) }
        let mac = HMAC.mac(.sha1, key: secret, data: message)
        // RFC 4226 §5.3, dynamic truncation.
        let offset = Int(mac[mac.count - 1] & 0x0F)
        let binary = (UInt32(mac[offset] & 0x7F) << 24) | (UInt32(mac[offset + 1]) << 16) | (UInt32(mac[offset + 2]) << 8) | UInt32(mac[offset + 3])
        var modulus: UInt32 = 1
        for _ in 0..<digits { modulus *= 10 }
        let text = String(binary % modulus)
        return String(repeating: "0", count: digits - text.count) + text
    }

    /// The step within the window around `date` whose code `code` is, when it is later than
    /// `after` (the last step accepted); nil otherwise. Every step of the window is computed and
    /// compared in constant time, whichever matches.
    public func match(_ code: String, at date: Date, after: Int64) -> Int64? {
        guard code.utf8.count == Self.digits, code.utf8.allSatisfy({ (48...57).contains($0) }) else { return nil }
        let now = Self.step(at: date)
        var matched: Int64?
        for step in (now - Self.window)...(now + Self.window) {
            if ConstantTime.equal(Array(self.code(step: step).utf8), Array(code.utf8)), step > after, matched == nil { matched = step }
        }
        return matched
    }

    /// The `otpauth://` URI an authenticator app reads from a QR code (Google Authenticator's
    /// key URI format), for `account`.
    public func uri(account: String, issuer: String = "Wristler") -> String {
        var components = URLComponents()
        components.scheme = "otpauth"
        components.host = "totp"
        components.path = "/\(issuer):\(account)"
        components.queryItems = [
            URLQueryItem(name: "secret", value: Base32.encode(secret)), URLQueryItem(name: "issuer", value: issuer),
            URLQueryItem(name: "algorithm", value: "SHA1"), URLQueryItem(name: "digits", value: String(Self.digits)),
            URLQueryItem(name: "period", value: String(Self.stepSeconds)),
        ]
        return components.string ?? ""
    }
}

/// RFC 4648 base32 without padding, upper case: how TOTP secrets are written for people and apps.
public enum Base32 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var output: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = (buffer << 8) | UInt32(byte)
            bits += 8
            while bits >= 5 {
                output.append(alphabet[Int((buffer >> UInt32(bits - 5)) & 31)])
                bits -= 5
            }
        }
        if bits > 0 { output.append(alphabet[Int((buffer << UInt32(5 - bits)) & 31)]) }
        return String(decoding: output, as: UTF8.self)
    }

    /// Nil for a character outside the alphabet (letter case, spaces and `=` are forgiven).
    public static func decode(_ text: String) -> [UInt8]? {
        var output: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for byte in text.uppercased().utf8 where byte != UInt8(ascii: " ") && byte != UInt8(ascii: "=") {
            guard let value = alphabet.firstIndex(of: byte) else { return nil }
            buffer = (buffer << 5) | UInt32(value)
            bits += 5
            if bits >= 8 {
                output.append(UInt8((buffer >> UInt32(bits - 8)) & 0xFF))
                bits -= 8
            }
        }
        return output
    }
}
