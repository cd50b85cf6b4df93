import Encodings
import Foundation
import Testing

import MailTesting
@testable import Mail

@Suite struct UnsubscribeLinkTests {
    static let secretOne = [UInt8](repeating: 1, count: 32)
    static let secretTwo = Array(0..<48).map { UInt8($0) }
    let links = try! UnsubscribeLink(keys: [.init(version: 2, secret: secretTwo), .init(version: 1, secret: secretOne)], current: 2)
    let person = "7c0b9a52-6f0e-4a57-9d9a-2f7f6f3c1e11"
    let issued = Date(timeIntervalSince1970: 1_796_089_681)

    @Test func aTokenVerifiesToItsPersonCategoryAndTime() throws {
        let token = try links.token(personId: person, category: "sale.completed", issuedAt: issued)
        #expect(token.hasPrefix("v2."))
        #expect(token.utf8.allSatisfy { $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || ($0 < 128 && Character(UnicodeScalar($0)).isLetter) || (48...57).contains($0) })
        let result = try links.verify(token).get()
        #expect(result == UnsubscribeLink.Unsubscribe(personId: person, category: "sale.completed", issuedAt: issued))
    }

    @Test func tokensOfAnOlderKeyStillVerifyAfterRotationAndRetiredKeysAreNamed() throws {
        let old = try UnsubscribeLink(keys: [.init(version: 1, secret: Self.secretOne)], current: 1)
        let token = try old.token(personId: person, category: "messages", issuedAt: issued)
        #expect(try links.verify(token).get().category == "messages")
        let rotated = try UnsubscribeLink(keys: [.init(version: 2, secret: Self.secretTwo)], current: 2)
        #expect(rotated.verify(token) == .failure(.unknownVersion(1)))
        #expect(UnsubscribeLink.Rejection.unknownVersion(1).description.contains("version 1"))
    }

    @Test func aTokenMadeWithAnotherKeyOfTheSameVersionIsABadSignature() throws {
        let other = try UnsubscribeLink(keys: [.init(version: 2, secret: [UInt8](repeating: 9, count: 32))], current: 2)
        let token = try other.token(personId: person, category: "messages", issuedAt: issued)
        #expect(links.verify(token) == .failure(.badSignature))
    }

    @Test func changingAnyCharacterIsRefused() throws {
        let token = try links.token(personId: person, category: "messages", issuedAt: issued)
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        var characters = Array(token)
        for index in characters.indices where characters[index] != "." {
            let original = characters[index]
            characters[index] = alphabet.first { $0 != original }!
            let result = links.verify(String(characters))
            if case .success = result { Issue.record("a changed token verified: \(String(characters))") }
            characters[index] = original
        }
    }

    @Test func anotherPersonsPayloadUnderAValidSignatureIsRefused() throws {
        let token = try links.token(personId: person, category: "messages", issuedAt: issued)
        let parts = token.split(separator: ".")
        let forged = Base64URL.encode(Array("someone-else|messages|1796089681".utf8))
        #expect(links.verify("\(parts[0]).\(forged).\(parts[2])") == .failure(.badSignature))
    }

    @Test func truncatedTokensAreRefused() throws {
        let token = try links.token(personId: person, category: "messages", issuedAt: issued)
        for length in 0..<token.count {
            let result = links.verify(String(token.prefix(length)))
            guard case .failure(let rejection) = result else {
                Issue.record("a token cut to \(length) characters verified")
                continue
            }
            #expect(rejection == .malformed || rejection == .badSignature, "cut to \(length): \(rejection)")
        }
    }

    @Test func malformedNULAndHugeTokensAreRefusedWithAReason() throws {
        let token = try links.token(personId: person, category: "messages", issuedAt: issued)
        #expect(links.verify("") == .failure(.malformed))
        #expect(links.verify("v2") == .failure(.malformed))
        #expect(links.verify("v2..") == .failure(.malformed))
        #expect(links.verify("x" + token.dropFirst()) == .failure(.malformed))
        #expect(links.verify("v02" + token.dropFirst(2)) == .failure(.malformed))
        #expect(links.verify("v99999" + token.dropFirst(2)) == .failure(.malformed))
        #expect(links.verify(token + "\0") == .failure(.malformed))
        #expect(links.verify(token.replacingOccurrences(of: ".", with: "\0.")) == .failure(.malformed))
        #expect(links.verify(token + ".extra") == .failure(.malformed))
        #expect(links.verify(token + "=") == .failure(.malformed))
        #expect(links.verify("v7" + token.dropFirst(2)) == .failure(.unknownVersion(7)))
        let huge = token + String(repeating: "A", count: 1_000_000)
        let start = ContinuousClock.now
        #expect(links.verify(huge) == .failure(.tooLong))
        #expect(ContinuousClock.now - start < .milliseconds(50), "a huge token is refused before any work")
        #expect(links.verify(String(repeating: "A", count: 513)) == .failure(.tooLong))
        for rejection in [UnsubscribeLink.Rejection.tooLong, .malformed, .badSignature, .unknownVersion(3)] {
            #expect(rejection.description.hasSuffix("."))
        }
    }

    @Test func fieldsThatCouldBreakThePayloadAreRefusedWhenSigning() {
        for (personId, category) in [("a|b", "c"), ("a", "b|c"), ("", "c"), ("a", ""), ("a\0", "c"), ("ü", "c"), (String(repeating: "a", count: 129), "c")] {
            #expect(throws: MailError.self) { try links.token(personId: personId, category: category) }
        }
    }

    @Test func keysAreReadFromTheSettingAndWeakOnesRefused() throws {
        let setting = "2:\(Base64URL.encode(Self.secretTwo)), 1:\(Base64URL.encode(Self.secretOne))"
        let parsed = try UnsubscribeLink(setting: setting)
        #expect(parsed.current == 2)
        let token = try links.token(personId: person, category: "messages", issuedAt: issued)
        #expect(try parsed.verify(token).get().personId == person)
        for bad in ["", "2", "x:\(Base64URL.encode(Self.secretTwo))", "2:+/=", "2:\(Base64URL.encode([UInt8](repeating: 1, count: 16)))", "0:\(Base64URL.encode(Self.secretTwo))",
            "1:\(Base64URL.encode(Self.secretOne)),1:\(Base64URL.encode(Self.secretTwo))"]
        {
            #expect(performing: { try UnsubscribeLink(setting: bad) }, throws: { error in
                (error as? MailError)?.code == .invalidSetting && (error as? MailError)?.description.contains("INBOX_UNSUBSCRIBE_KEYS") == true
            })
        }
    }

    @Test func theURLCarriesTheTokenAsAQueryParameter() throws {
        let url = try links.url(base: "https://api.wristler.eu/v1/unsubscribe", personId: person, category: "messages", issuedAt: issued)
        let token = try #require(URLComponents(string: url)?.queryItems?.first { $0.name == "token" }?.value)
        #expect(try links.verify(token).get().category == "messages")
        #expect(try links.url(base: "https://x.eu/u?lang=de", personId: person, category: "m").contains("?lang=de&token=v2."))
    }
}
