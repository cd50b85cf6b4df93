import Crypto
import Encodings
import Foundation
import Identity
import InboxAPI
import PasswordHashing
import PostgresClient
import Testing

/// The identity role's parts that need no database: TOTP against RFC 6238's own vectors, Argon2id,
/// the strict form reader, the signing keys' folder and their JWKS, the provider keys' JWK form.
@Suite struct IdentityPartsTests {
    /// RFC 6238 appendix B, SHA-1, with the 8-digit codes it lists (their last 6 digits are the
    /// 6-digit codes, since the code is the number modulo 10^digits).
    @Test(arguments: [
        (59, "94287082"), (1_111_111_109, "07081804"), (1_111_111_111, "14050471"), (1_234_567_890, "89005924"), (2_000_000_000, "69279037"),
        (20_000_000_000, "65353130"),
    ] as [(Int, String)])
    func totpCodesAreRFC6238s(time: Int, code: String) {
        let totp = TOTP(secret: Array("12345678901234567890".utf8))
        let step = TOTP.step(at: Date(timeIntervalSince1970: TimeInterval(time)))
        #expect(totp.code(step: step, digits: 8) == code)
        #expect(totp.code(step: step) == String(code.suffix(6)))
    }

    /// The OpenAPI document's pattern for an account's address takes what the routes take
    /// (`Accounts.isPlausibleEmail` after `normalized`): a looser one let make fuzz send "0".
    @Test func theEmailPatternTakesWhatTheAccountRoutesTake() throws {
        let expression = try NSRegularExpression(pattern: Accounts.emailPattern)
        for sample in [
            "anna@example.com", "0", "", "a@b", "ab", "a@.b", "a@b.", "@b.nl", "a@", "a b@c.nl", "a@b@c.nl", " anna@example.com ", "\tanna@example.com",
            "année@exämple.com", "a\u{7F}@b.nl", "a@b\u{1}.nl", "x@y.z",
        ] {
            let matches = expression.firstMatch(in: sample, range: NSRange(sample.startIndex..., in: sample)) != nil
            #expect(matches == Accounts.isPlausibleEmail(Accounts.normalized(sample)), "\(sample.debugDescription): the pattern says \(matches)")
        }
    }

    @Test func aTOTPCodeMatchesOneStepEitherSideAndNeverAStepAlreadyAccepted() {
        let totp = TOTP(secret: TOTP.newSecret())
        let now = Date(timeIntervalSince1970: 1_800_000_015)
        let step = TOTP.step(at: now)
        #expect(totp.match(totp.code(step: step), at: now, after: 0) == step)
        #expect(totp.match(totp.code(step: step - 1), at: now, after: 0) == step - 1)
        #expect(totp.match(totp.code(step: step + 1), at: now, after: 0) == step + 1)
        #expect(totp.match(totp.code(step: step - 2), at: now, after: 0) == nil)
        #expect(totp.match(totp.code(step: step), at: now, after: step) == nil, "the step accepted last")
        #expect(totp.match(totp.code(step: step - 1), at: now, after: step) == nil, "an earlier one")
        #expect(totp.match("12345", at: now, after: 0) == nil && totp.match("12a456", at: now, after: 0) == nil)
        #expect(totp.uri(account: "anna@example.com").hasPrefix("otpauth://totp/Wristler:anna@example.com?secret=\(Base32.encode(totp.secret))"))
    }

    /// AES-256-GCM seals under the secrets key: what it sealed opens, and a changed byte, another
    /// purpose (the row it belongs to) or another key does not; the key file takes raw, hex and
    /// base64 forms and refuses anything else with a sentence.
    @Test func aSealedSecretOpensOnlyWithItsKeyAndPurpose() throws {
        let key = try SecretsKey(bytes: (0..<32).map { UInt8($0) })
        let sealed = try key.seal(Array("-----BEGIN PRIVATE KEY-----".utf8), for: "identity_signing_keys/k1")
        #expect(try key.open(sealed, for: "identity_signing_keys/k1") == Array("-----BEGIN PRIVATE KEY-----".utf8))
        #expect(!String(decoding: sealed, as: UTF8.self).contains("PRIVATE"))
        #expect(try key.seal([1, 2, 3], for: "x") != key.seal([1, 2, 3], for: "x"), "a fresh nonce each time")
        var changed = sealed
        changed[20] ^= 1
        #expect(throws: CryptoError.self) { try key.open(changed, for: "identity_signing_keys/k1") }
        #expect(throws: CryptoError.self) { try key.open(sealed, for: "identity_signing_keys/k2") }
        let other = try SecretsKey(bytes: [UInt8](repeating: 7, count: 32))
        #expect(throws: CryptoError.self) { try other.open(sealed, for: "identity_signing_keys/k1") }
        #expect(throws: CryptoError.self) { try key.open(Array(sealed.prefix(10)), for: "identity_signing_keys/k1") }

        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("secrets-key-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let bytes = (0..<32).map { UInt8($0 * 7 % 256) }
        for (name, contents) in [
            ("raw", Data(bytes)), ("hex", Data((Hex.encode(bytes) + "\n").utf8)), ("base64", Data((Data(bytes).base64EncodedString() + "\n").utf8)),
        ] {
            let path = folder + "/" + name
            try contents.write(to: URL(fileURLWithPath: path))
            #expect(try SecretsKey.load(path: path).open(try SecretsKey(bytes: bytes).seal([9], for: "p"), for: "p") == [9], "\(name)")
        }
        try Data("too short\n".utf8).write(to: URL(fileURLWithPath: folder + "/bad"))
        #expect(throws: CryptoError.self) { try SecretsKey.load(path: folder + "/bad") }
        #expect(throws: CryptoError.self) { try SecretsKey.load(path: folder + "/missing") }
    }

    @Test func base32IsRFC4648s() {
        // RFC 4648 §10.
        for (text, encoded) in [("f", "MY"), ("fo", "MZXQ"), ("foo", "MZXW6"), ("foob", "MZXW6YQ"), ("fooba", "MZXW6YTB"), ("foobar", "MZXW6YTBOI")] {
            #expect(Base32.encode(Array(text.utf8)) == encoded)
            #expect(Base32.decode(encoded.lowercased()) == Array(text.utf8))
        }
        #expect(Base32.decode("MZ1W") == nil)
    }

    @Test func argon2idHashesVerifyOnlyTheirPasswordAndCarryTheirCost() throws {
        let cost = Argon2Cost(memoryKiB: 1024, iterations: 2)
        let hash = try Argon2id.hash("correct horse battery", cost: cost)
        #expect(hash.hasPrefix("$argon2id$v=19$m=1024,t=2,p=1$"))
        #expect(Argon2id.verify("correct horse battery", against: hash))
        #expect(!Argon2id.verify("correct horse batterY", against: hash))
        #expect(!Argon2id.verify("correct horse battery", against: "$argon2i$not-ours"))
        #expect(try Argon2id.hash("correct horse battery", cost: cost) != hash, "a salt of its own")
        #expect(Argon2id.cost(of: hash) == cost)
        #expect(throws: PasswordHashingError.self) { try Argon2id.hash(String(repeating: "x", count: 1025), cost: cost) }
        #expect(!Argon2id.verify(String(repeating: "x", count: 1025), against: hash))
    }

    @Test func theFormReaderRefusesWhatIsNotPlainlyAForm() throws {
        let form = try FormBody(Array("a=1&b=x+y%2Bz&c=&d".utf8))
        #expect(form["a"] == "1" && form["b"] == "x y+z" && form["c"] == nil && form["d"] == nil)
        for body in ["a=1&a=2", "a=%4", "a=%zz", "a=%00", "a=%0D%0A", "=x", "a=%C3%28", "b=\u{7F}"] {
            #expect(throws: FormBody.Refusal.self, "\(body)") { try FormBody(Array(body.utf8)) }
        }
        #expect(throws: FormBody.Refusal.self) { try FormBody(Array(("a=" + String(repeating: "x", count: 1025)).utf8)) }
        #expect(try FormBody(Array(("a=" + String(repeating: "x", count: 1025)).utf8), limits: ["a": 2000])["a"]?.count == 1025)
        #expect(FormBody.encode([("state", "a b&c=d/é")]) == "state=a%20b%26c%3Dd%2F%C3%A9")
    }

    @Test func recoveryCodesAreReadForgivingCaseSpacesAndDashesOnly() {
        let code = RecoveryCode.generate()
        #expect(code.count == 19 && code.split(separator: "-").count == 4)
        #expect(RecoveryCode.digest(code.uppercased().replacingOccurrences(of: "-", with: " ")) == RecoveryCode.digest(code))
        #expect(RecoveryCode.normalized("k7qm-2xpa-93vd-hh4t") == nil, "9 is not base32")
        #expect(RecoveryCode.normalized("ééééééééééééééé") == nil)
    }

    /// Two nodes started at once on one empty folder (as `make run` and `inbox token` may be):
    /// every one of them signs with the same single key.
    @Test func loadsOfOneEmptyFolderAtOnceMakeOneKey() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let kids = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<8 {
                group.addTask { try await BlockingThread.run { try SigningKeys.load(directory: folder, signingKid: nil).keys.signingKid } }
            }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        #expect(kids.count == 1, "\(kids)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".pem") }.count == 1)
    }

    @Test func aKeysFolderGetsOneKeyAndWithSeveralTheSigningOneMustBeNamed() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let (first, created) = try SigningKeys.load(directory: folder, signingKid: nil)
        #expect(created == first.signingKid)
        let attributes = try FileManager.default.attributesOfItem(atPath: folder + "/\(first.signingKid).pem")
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        #expect(try SigningKeys.load(directory: folder, signingKid: nil).created == nil, "kept, not made again")
        try Data(try ES256PrivateKey.generate().pem.utf8).write(to: URL(fileURLWithPath: folder + "/2027-01-01-next.pem"))
        #expect(throws: SigningKeys.Invalid.self) { try SigningKeys.load(directory: folder, signingKid: nil) }
        let (both, _) = try SigningKeys.load(directory: folder, signingKid: "2027-01-01-next")
        #expect(both.publicKeys.count == 2)
        let token = try both.accessToken(
            subject: "p1", scopes: [.accountRead], clientId: "wristler-app", sessionId: nil, guest: false, lifetime: 3600, issuer: nil, now: Date())
        // The old key still verifies, and the new one signs.
        let jwks = FileManager.default.temporaryDirectory.appendingPathComponent("jwks-\(UUID().uuidString.prefix(8)).json")
        try Data(JSONAPI.bytes(try both.jwks)).write(to: jwks)
        defer { try? FileManager.default.removeItem(at: jwks) }
        let verifier = TokenVerifier(keys: try TokenKeys.load(path: jwks.path))
        #expect(verifier.keys.keys.keys.sorted() == [first.signingKid, "2027-01-01-next"].sorted())
        #expect(try verifier.verify(authorization: "Bearer \(token)").subject == "p1")
        #expect(throws: SigningKeys.Invalid.self) { try SigningKeys.load(directory: folder, signingKid: "missing") }
    }

    /// The keys folder is private; the data folder made above it is not (it would close the
    /// embedded PostgreSQL's folder inside it to that server's user).
    @Test func aKeysFolderIsPrivateAndTheFolderMadeAboveItIsNot() throws {
        let data = FileManager.default.temporaryDirectory.appendingPathComponent("data-\(UUID().uuidString.prefix(8))").path
        defer { try? FileManager.default.removeItem(atPath: data) }
        _ = try SigningKeys.load(directory: data + "/identity-keys", signingKid: nil)
        let mode = { (path: String) in try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int }
        #expect(try mode(data + "/identity-keys") == 0o700)
        let dataMode = try #require(try mode(data))
        #expect(dataMode & 0o011 == 0o011, "\(String(dataMode, radix: 8))")
    }

    @Test func anRSAKeyGoesToItsJWKFormAndBack() throws {
        let key = try RS256PrivateKey.generate()
        let (n, e) = try key.publicKey.components
        #expect(n.count == 256 && e == [1, 0, 1])
        let again = try RS256PublicKey(modulus: n, exponent: e)
        let signature = try key.sign(Array("data".utf8))
        #expect(again.verify(signature: signature, data: Array("data".utf8)))
        #expect(throws: CryptoError.self) { try RS256PublicKey(modulus: Array(n.prefix(128)), exponent: e) }
        let p256 = try ES256PrivateKey.generate()
        let (x, y) = try p256.publicKey.coordinates
        #expect(try ES256PublicKey(x: x, y: y).verify(signature: try p256.sign([1, 2, 3]), data: [1, 2, 3]))
    }
}
