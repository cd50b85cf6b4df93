import Crypto
import Encodings
import Foundation
import Testing

/// Hex and base64url: round trips, the exact text other systems expect, and refusal of anything else.
@Suite struct ByteEncodingTests {
    @Test func hexIsLowerCaseTwoDigitsAByteAndReadsBackEitherCase() {
        #expect(Hex.encode([UInt8]()) == "")
        #expect(Hex.encode([0x00, 0x0f, 0xa0, 0xff]) == "000fa0ff")
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 37 + 250) }
            #expect(Hex.decode(Hex.encode(bytes)) == bytes)
            #expect(Hex.encode(bytes) == bytes.map { String(format: "%02x", $0) }.joined())
        }
        #expect(Hex.decode("DEADbeef") == [0xde, 0xad, 0xbe, 0xef])
        var escaped: [UInt8] = []
        Hex.append(0x2f, to: &escaped, uppercase: true)
        Hex.append(0xe9, to: &escaped)
        #expect(escaped == Array("2Fe9".utf8))
    }

    @Test func hexRefusesAnOddCountAndEveryNonDigit() {
        for refused in ["0", "abc", "0g", "zz", " 00", "00 ", "0x00", "é0"] { #expect(Hex.decode(refused) == nil, "\(refused)") }
        for byte in UInt8.min...UInt8.max {
            let isDigit = (48...57).contains(byte) || (65...70).contains(byte) || (97...102).contains(byte)
            #expect((Hex.value(ofDigit: byte) != nil) == isDigit, "\(byte)")
        }
    }

    @Test func uuidTextIsEightFourFourFourTwelveInLowerCase() {
        let bytes: [UInt8] = (0..<16).map { UInt8($0 * 17) }
        #expect(Hex.uuidString(bytes) == "00112233-4455-6677-8899-aabbccddeeff")
        #expect(UUID(uuidString: Hex.uuidString(bytes)) != nil)
    }

    /// base64url as RFC 4648 writes it, for every remainder of three, and nothing else read back.
    @Test func base64URLRoundTripsAndRefusesWhatIsNotIt() {
        #expect(Base64URL.encode(Array("".utf8)) == "")
        #expect(Base64URL.encode(Array("f".utf8)) == "Zg")
        #expect(Base64URL.encode(Array("fo".utf8)) == "Zm8")
        #expect(Base64URL.encode(Array("foo".utf8)) == "Zm9v")
        #expect(Base64URL.encode(Array("foob".utf8)) == "Zm9vYg")
        #expect(Base64URL.encode([0xFB, 0xFF, 0xBF]) == "-_-_")
        for length in 0..<40 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 * 37 + 250) }
            #expect(Base64URL.decode(Base64URL.encode(bytes)) == bytes)
            #expect(Base64URL.encode(bytes) == Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: ""))
        }
        for refused in ["Zg==", "+/+/", "Z", "Zm9vY", "Zh", "Zm9 v", "Zm9v\u{0}"] { #expect(Base64URL.decode(refused) == nil, "\(refused)") }
        // Appended after what the output holds, from a slice and from bytes not in one buffer.
        var output = Array("x:".utf8)
        Base64URL.append(Array("foob".utf8)[1...], to: &output)
        Base64URL.append((0..<2).lazy.map { UInt8($0) + 0x66 }, to: &output)
        #expect(String(decoding: output, as: UTF8.self) == "x:b29iZmc")
        // Decoded after what the output holds; refused text leaves it as it was.
        var decoded = Array("x:".utf8)
        #expect(Array("Zm9vYg".utf8).withUnsafeBufferPointer { Base64URL.decode(contiguous: $0, appendingTo: &decoded) })
        #expect(Array("Zm8".utf8).withUnsafeBufferPointer { Base64URL.decode(contiguous: $0, appendingTo: &decoded) })
        for refused in ["Zm9vY", "Zm9v*g", "Zh"] {
            #expect(!Array(refused.utf8).withUnsafeBufferPointer { Base64URL.decode(contiguous: $0, appendingTo: &decoded) }, "\(refused)")
        }
        #expect(String(decoding: decoded, as: UTF8.self) == "x:foobfo")
        #expect(Base64URL.decode("Zm9vYg"[...]) == Array("foob".utf8))
    }
}

/// Durations as the numbers logs, metrics and C interfaces take.
@Suite struct DurationTests {
    @Test func secondsAndMillisecondsKeepTheFraction() {
        #expect(Duration.milliseconds(1500).inSeconds == 1.5)
        #expect(Duration.microseconds(2500).inMilliseconds == 2.5)
        #expect(Duration.seconds(3).inMilliseconds == 3000)
        #expect(Duration.zero.inSeconds == 0)
    }

    @Test func wholeMillisecondsDropTheFractionAndSaturate() {
        #expect(Duration.microseconds(2999).wholeMilliseconds == 2)
        #expect(Duration.seconds(90).wholeMilliseconds == 90_000)
        #expect(Duration.seconds(Int64.max).wholeMilliseconds == .max)
        #expect(Duration.seconds(Int64.min).wholeMilliseconds == .min)
    }
}

/// UUIDs derived from a name by SHA-256 (the bell's notification ids).
@Suite struct HashedUUIDTests {
    @Test func aNameBasedUUIDIsVersion8WithTheRFCVariantAndStable() throws {
        let id = SHA256.uuidString(naming: "wristler-bell:42:p1".utf8)
        #expect(id == SHA256.uuidString(naming: "wristler-bell:42:p1".utf8), "the same name, the same id")
        #expect(id != SHA256.uuidString(naming: "wristler-bell:43:p1".utf8))
        #expect(id == id.lowercased())
        let uuid = try #require(UUID(uuidString: id))
        let bytes = withUnsafeBytes(of: uuid.uuid) { Array($0) }
        #expect(bytes[6] >> 4 == 8, "version 8 (RFC 9562, custom)")
        #expect(bytes[8] >> 6 == 0b10, "the RFC variant")
        // The rest is the digest's first 16 bytes, untouched.
        let digest = SHA256.digest(Array("wristler-bell:42:p1".utf8))
        for index in 0..<16 where index != 6 && index != 8 { #expect(bytes[index] == digest[index]) }
        #expect(bytes[6] & 0x0F == digest[6] & 0x0F)
        #expect(bytes[8] & 0x3F == digest[8] & 0x3F)
    }
}

/// Random UUIDs from OpenSSL's generator (message and saved-search ids).
@Suite struct RandomUUIDTests {
    @Test func aRandomUUIDIsVersion4WithTheRFCVariantInLowerCaseAndNeverRepeats() throws {
        var seen = Set<String>()
        var bitsSet = [Int](repeating: 0, count: 128)
        for _ in 0..<2_000 {
            let id = RandomUUID.string()
            #expect(id == id.lowercased() && id.utf8.count == 36)
            let uuid = try #require(UUID(uuidString: id))
            let bytes = withUnsafeBytes(of: uuid.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4, "version 4 (RFC 9562, random)")
            #expect(bytes[8] >> 6 == 0b10, "the RFC variant")
            #expect(seen.insert(id).inserted)
            for bit in 0..<128 where bytes[bit / 8] & (0x80 >> UInt8(bit % 8)) != 0 { bitsSet[bit] += 1 }
        }
        // The 122 random bits each come out set about half the time (and the six stamped ones fixed).
        let stamped: Set<Int> = [48, 49, 50, 51, 64, 65]
        for bit in 0..<128 where !stamped.contains(bit) { #expect((800...1_200).contains(bitsSet[bit]), "bit \(bit): \(bitsSet[bit]) of 2,000") }
    }
}
