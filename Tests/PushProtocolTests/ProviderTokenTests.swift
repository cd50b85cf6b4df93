import EventLog
import Crypto
import Foundation
import PushProtocol
import Testing

/// APNs provider tokens, the FCM grant, and when either is renewed.
@Suite struct ProviderTokenTests {
    /// A `.p8` as Apple hands it out: an ES256 key as PKCS#8 (made with `openssl genpkey`).
    static let p8 = """
        -----BEGIN PRIVATE KEY-----
        MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg5PbetsA/9lEotkZP
        9EdpvyhNIJ3Xh0ojTa9cdeik4b2hRANCAARBnC8EM2aOL2O3ygQsroSRwaq7rAD2
        mmDGN6OU1wFRjrxtBPMiyPMamWHU0gBuDtI2l9FTlpK8AhmyG4upcqeR
        -----END PRIVATE KEY-----
        """

    static func base64URLDecode(_ text: Substring) -> [UInt8]? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64).map(Array.init)
    }

    /// The header, claims and signature of a compact JWS, and the bytes signed.
    static func split(_ jwt: String) throws -> (header: [String: Any], claims: [String: Any], signature: [UInt8], signed: [UInt8]) {
        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        try #require(parts.count == 3)
        let headerBytes = try #require(base64URLDecode(parts[0]))
        let claimBytes = try #require(base64URLDecode(parts[1]))
        let signature = try #require(base64URLDecode(parts[2]))
        let header = try #require(try JSONSerialization.jsonObject(with: Data(headerBytes)) as? [String: Any])
        let claims = try #require(try JSONSerialization.jsonObject(with: Data(claimBytes)) as? [String: Any])
        return (header, claims, signature, Array("\(parts[0]).\(parts[1])".utf8))
    }

    @Test func aP8FileIsReadAndItsProviderTokenVerifies() throws {
        let credentials = try APNsCredentials(keyId: "ABC123DEFG", teamId: "DEF123GHIJ", p8: Self.p8)
        let token = try credentials.providerToken(issuedAt: Date(timeIntervalSince1970: 1_700_000_000.9))
        let (header, claims, signature, signed) = try Self.split(token)
        #expect(header.count == 2 && header["alg"] as? String == "ES256" && header["kid"] as? String == "ABC123DEFG")
        #expect(claims.count == 2 && claims["iss"] as? String == "DEF123GHIJ" && claims["iat"] as? Int == 1_700_000_000)
        #expect(signature.count == 64)
        #expect(try credentials.key.publicKey.verify(signature: signature, data: signed))
        var tampered = signed
        tampered[tampered.count - 1] ^= 1
        #expect(try !credentials.key.publicKey.verify(signature: signature, data: tampered))
    }

    @Test func aGeneratedKeyWrittenAsPKCS8ReadsBackAndSigns() throws {
        let generated = try ES256PrivateKey.generate()
        #expect(generated.pem.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let credentials = try APNsCredentials(keyId: "K", teamId: "T", p8: generated.pem)
        let (_, _, signature, signed) = try Self.split(try credentials.providerToken(issuedAt: Date()))
        #expect(try generated.publicKey.verify(signature: signature, data: signed))
        #expect(throws: (any Error).self) { try APNsCredentials(keyId: "K", teamId: "T", p8: try RS256PrivateKey.generate().pem) }
    }

    static let rsa: RS256PrivateKey = try! RS256PrivateKey.generate(bits: 2048)

    static func serviceAccount(dropping: String? = nil, key: String? = nil) -> [UInt8] {
        var fields: [String: String] = [
            "type": "service_account", "project_id": "wristler-push", "private_key_id": "abc", "private_key": key ?? rsa.pem,
            "client_email": "fcm@wristler-push.iam.gserviceaccount.com", "token_uri": "https://oauth2.googleapis.com/token",
        ]
        if let dropping { fields[dropping] = nil }
        return Array(try! JSONSerialization.data(withJSONObject: fields))
    }

    @Test func theServiceAccountIsReadAndEveryMissingFieldIsNamed() throws {
        let account = try FCMServiceAccount(json: Self.serviceAccount())
        #expect(account.projectId == "wristler-push")
        #expect(account.clientEmail == "fcm@wristler-push.iam.gserviceaccount.com")
        #expect(account.tokenURI == "https://oauth2.googleapis.com/token")
        for field in ["project_id", "client_email", "private_key", "token_uri"] {
            #expect(throws: FCMServiceAccountError.missingField(field)) { try FCMServiceAccount(json: Self.serviceAccount(dropping: field)) }
            #expect(FCMServiceAccountError.missingField(field).description.contains(field))
        }
        #expect(throws: FCMServiceAccountError.notJSON) { try FCMServiceAccount(json: Array("[1]".utf8)) }
        #expect(throws: FCMServiceAccountError.notJSON) { try FCMServiceAccount(json: Array("nope".utf8)) }
        do {
            _ = try FCMServiceAccount(json: Self.serviceAccount(key: Self.p8))
            Issue.record("an EC key is not a service account's key")
        } catch {
            guard case .unreadablePrivateKey = error else { throw error }
        }
    }

    @Test func theGrantAssertionHasGooglesClaimsAndAnRS256SignatureThatVerifies() throws {
        let account = try FCMServiceAccount(json: Self.serviceAccount())
        let assertion = try account.assertion(issuedAt: Date(timeIntervalSince1970: 1_700_000_000))
        let (header, claims, signature, signed) = try Self.split(assertion)
        #expect(header.count == 2 && header["alg"] as? String == "RS256" && header["typ"] as? String == "JWT")
        #expect(claims["iss"] as? String == "fcm@wristler-push.iam.gserviceaccount.com")
        #expect(claims["scope"] as? String == "https://www.googleapis.com/auth/firebase.messaging")
        #expect(claims["aud"] as? String == "https://oauth2.googleapis.com/token")
        #expect(claims["iat"] as? Int == 1_700_000_000 && claims["exp"] as? Int == 1_700_003_600)
        #expect(signature.count == 256)
        #expect(try Self.rsa.publicKey.verify(signature: signature, data: signed))
        #expect(try !RS256PrivateKey.generate().publicKey.verify(signature: signature, data: signed))

        let body = String(decoding: FCMTokenExchange.requestBody(assertion: assertion), as: UTF8.self)
        #expect(body == "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=" + assertion)
    }

    /// The RS256 signature checked by OpenSSL's own command, not by this tier's code.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")))
    func anRS256SignatureVerifiesWithTheOpenSSLCommand() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rs256-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let data = Array("eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJ4In0".utf8)
        try Data(data).write(to: directory.appendingPathComponent("data"))
        try Data(try Self.rsa.sign(data)).write(to: directory.appendingPathComponent("sig"))
        try Self.rsa.publicKeyPEM.write(to: directory.appendingPathComponent("pub.pem"), atomically: true, encoding: .utf8)
        // Output to a file, not a pipe, which a server another test starts meanwhile could inherit.
        let (status, said) = try Subprocess.run(
            "/usr/bin/openssl",
            ["dgst", "-sha256", "-verify", directory.appendingPathComponent("pub.pem").path, "-signature",
             directory.appendingPathComponent("sig").path, directory.appendingPathComponent("data").path])
        #expect(status == 0, "\(said)")
        #expect(said.contains("Verified OK"))
    }

    @Test func theTokenEndpointsAnswerGivesTheTokenOrSaysWhy() throws {
        let token = try FCMTokenExchange.parseAnswer(Array(#"{"access_token":"ya29.c.abc","expires_in":3599,"token_type":"Bearer"}"#.utf8))
        #expect(token == FCMAccessToken(accessToken: "ya29.c.abc", expiresIn: .seconds(3599)))
        #expect(throws: FCMTokenError(code: "invalid_grant", detail: "Invalid JWT Signature.")) {
            try FCMTokenExchange.parseAnswer(Array(#"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#.utf8))
        }
        #expect(throws: FCMTokenError.self) { try FCMTokenExchange.parseAnswer(Array(#"{"expires_in":3599}"#.utf8)) }
        #expect(throws: FCMTokenError.self) { try FCMTokenExchange.parseAnswer(Array(#"{"access_token":"x"}"#.utf8)) }
        #expect(throws: FCMTokenError.self) { try FCMTokenExchange.parseAnswer(Array("<html>".utf8)) }
    }

    @Test func anAPNsTokenIsReusedForFiftyMinutesAndNeverRenewedWithinTwenty() {
        let policy = ProviderTokenPolicy.APNs()
        let issued = Date(timeIntervalSince1970: 1_700_000_000)
        func at(_ minutes: Double) -> Date { issued.addingTimeInterval(minutes * 60) }
        #expect(policy.decide(issuedAt: nil, now: issued) == .renew)
        #expect(policy.decide(issuedAt: issued, now: at(0)) == .reuse)
        #expect(policy.decide(issuedAt: issued, now: at(49.9)) == .reuse)
        #expect(policy.decide(issuedAt: issued, now: at(50)) == .renew)
        #expect(policy.decide(issuedAt: issued, now: at(70)) == .renew)
        // ExpiredProviderToken early on: refused until twenty minutes after the last renewal.
        #expect(policy.decide(issuedAt: issued, now: at(5), rejected: true) == .refused(until: at(20)))
        #expect(policy.decide(issuedAt: issued, now: at(19.9), rejected: true) == .refused(until: at(20)))
        #expect(policy.decide(issuedAt: issued, now: at(20), rejected: true) == .renew)
        #expect(policy.decide(issuedAt: issued, now: at(30), rejected: true) == .renew)
        // A clock that stepped back: Apple refuses a token from the future.
        #expect(policy.decide(issuedAt: issued, now: at(-1)) == .renew)
    }

    @Test func anFCMAccessTokenIsKeptUntilFiveMinutesBeforeItExpires() {
        let policy = ProviderTokenPolicy.FCM()
        let obtained = Date(timeIntervalSince1970: 1_700_000_000)
        let token = FCMAccessToken(accessToken: "t", expiresIn: .seconds(3599))
        #expect(policy.refreshAt(token, obtainedAt: obtained) == obtained.addingTimeInterval(3299))
        #expect(policy.needsRefresh(nil, obtainedAt: obtained, now: obtained))
        #expect(!policy.needsRefresh(token, obtainedAt: obtained, now: obtained.addingTimeInterval(3298)))
        #expect(policy.needsRefresh(token, obtainedAt: obtained, now: obtained.addingTimeInterval(3299)))
        #expect(policy.needsRefresh(token, obtainedAt: obtained, now: obtained.addingTimeInterval(60), rejected: true))
        let short = FCMAccessToken(accessToken: "t", expiresIn: .seconds(120))
        #expect(policy.needsRefresh(short, obtainedAt: obtained, now: obtained))
    }
}
