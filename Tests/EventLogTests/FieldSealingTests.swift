import Crypto
import Encodings
import InboxDomain
import Testing

@testable import EventLog

/// The sealing of personal fields with OpenSSL contexts kept across fields and keys
/// (`BatchSealer`, `FieldOpening`) writes and reads the same values as the one-shot functions that
/// sealed the logs already stored: the format of `v` and `h` is the log's, not the code's.
@Suite struct FieldSealingTests {
    static let prefix = Array("wristler/personal/v2".utf8)

    static func associatedData(_ parts: [String]) -> [UInt8] {
        var bytes = prefix
        for part in parts { bytes += [0] + Array(part.utf8) }
        return bytes
    }

    @Test func aFieldSealedWithKeptContextsOpensAsTheOneShotFunctionsSealAndOpen() throws {
        let sealer = try BatchSealer(random: RandomBytes(expected: 64))
        let keys = (0..<3).map { _ in SecureRandom.bytes(32) }
        let texts = ["Is the bracelet original?", "", "Grüße 🎉 \"quoted\"\n", String(repeating: "long ", count: 300)]
        // Fields of several events, people and keys, one after another through the same contexts.
        for (index, text) in texts.enumerated() {
            let key = keys[index % keys.count]
            let parts = ["seal\(index):person-\(index)", "conversation-\(index)", "person-\(index)", "message_sent"]
            sealer.startEvent(seal: parts[0], stream: parts[1], person: parts[2], type: parts[3])
            for field in ["body", "subject"] {
                var copy = text
                let sealed = try copy.withUTF8 { try sealer.sealedField(UnsafeRawBufferPointer($0), field: field, key: key) }
                let bytes = try #require(Base64URL.decode(sealed.v))
                // Opened by the one-shot function, with the associated data the log has always bound.
                #expect(try AES256GCM.open(bytes, key: key, associatedData: Self.associatedData(parts + [field])) == Array(text.utf8))
                #expect(throws: CryptoError.self) { try AES256GCM.open(bytes, key: key, associatedData: Self.associatedData(parts + ["other"])) }
                // The MAC by which a retried append is known: HMAC-SHA256 of the type, field and text.
                let mac = HMAC.mac(.sha256, key: key, data: Array("wristler/personal-mac/v1".utf8) + [0] + Array("message_sent".utf8) + [0] + Array(field.utf8) + [0] + Array(text.utf8))
                #expect(sealed.h == Base64URL.encode(mac.prefix(16)))
                // A value the one-shot function sealed opens through a kept context, as a reader
                // opens it; with another key, or moved to another field or event, it does not.
                let stored = SealedField(v: Base64URL.encode(try AES256GCM.seal(Array(text.utf8), key: key, associatedData: Self.associatedData(parts + [field]))), h: "")
                let opener = FieldOpener(key: key, sealID: "seal\(index)", stream: parts[1], person: parts[2], type: parts[3])
                #expect(try opener.open(stored, field: field) == .text(text))
                #expect(try opener.open(sealed, field: field) == .text(text))
                #expect(throws: PersonalDataFieldError.self) { try FieldOpener(key: keys[(index + 1) % keys.count], sealID: "seal\(index)", stream: parts[1], person: parts[2], type: parts[3]).open(stored, field: field) }
                #expect(throws: PersonalDataFieldError.self) { try opener.open(stored, field: "other") }
                #expect(throws: PersonalDataFieldError.self) { try FieldOpener(key: key, sealID: "seal\(index + 1)", stream: parts[1], person: parts[2], type: parts[3]).open(stored, field: field) }
                #expect(throws: PersonalDataFieldError.self) { try opener.open(SealedField(v: stored.v + "*", h: ""), field: field) }
                #expect(try FieldOpener(key: nil, sealID: "seal\(index)", stream: parts[1], person: parts[2], type: parts[3]).open(stored, field: field) == .erased)
            }
        }
    }
}
