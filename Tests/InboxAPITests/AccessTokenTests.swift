import Crypto
import Encodings
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import Testing

/// ES256 keys and the access tokens signed with them.
@Suite struct AccessTokenTests {
    static let key = try! ES256PrivateKey.generate()
    static let signer = TokenSigner(key: key, kid: "k1")
    static let verifier = TokenVerifier(keys: TokenKeys(keys: ["k1": try! key.publicKey]))

    @Test func aSignatureVerifiesOnlyForItsDataAndKey() throws {
        let data = Array("header.payload".utf8)
        let signature = try Self.key.sign(data)
        #expect(signature.count == 64)
        #expect(try Self.key.publicKey.verify(signature: signature, data: data))
        #expect(!(try Self.key.publicKey.verify(signature: signature, data: Array("header.payloaD".utf8))))
        #expect(!(try ES256PrivateKey.generate().publicKey.verify(signature: signature, data: data)))
        var flipped = signature
        flipped[10] ^= 1
        #expect(!(try Self.key.publicKey.verify(signature: flipped, data: data)))
    }

    /// ES256 signatures are accepted in both their `s` and `n - s` forms (docs/tokens.md, "Signature
    /// malleability"): issuers do not commonly normalize s, so requiring low-S would refuse valid
    /// tokens. The other form signs the same claims, and the token cache keys by the token's text,
    /// so it is one more entry, bounded like any other.
    @Test func aSignatureIsAcceptedInBothItsSAndNMinusSForms() throws {
        let verifier = TokenVerifier(keys: TokenKeys(keys: ["k1": try Self.key.publicKey]))
        let token = try Self.signer.mint(subject: "alice", scopes: [.accountRead])
        let parts = token.split(separator: ".")
        let signature = try #require(Base64URL.decode(parts[2]))
        let flipped = Array(signature.prefix(32)) + Self.p256Order(minus: Array(signature.suffix(32)))
        #expect(flipped != signature)
        let other = parts[0] + "." + parts[1] + "." + Base64URL.encode(flipped)
        #expect(try Self.key.publicKey.verify(signature: flipped, data: Array((parts[0] + "." + parts[1]).utf8)))
        #expect(try verifier.verify(authorization: "Bearer " + token).subject == "alice")
        #expect(try verifier.verify(authorization: "Bearer " + other).subject == "alice")
        #expect(verifier.cached.count == 2, "each form is an entry of its own")
    }

    /// n - s for P-256's group order n, in 32 big-endian bytes.
    static func p256Order(minus s: [UInt8]) -> [UInt8] {
        let n: [UInt8] = [
            0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51,
        ]
        var result = [UInt8](repeating: 0, count: 32)
        var borrow = 0
        for index in stride(from: 31, through: 0, by: -1) {
            var digit = Int(n[index]) - Int(s[index]) - borrow
            borrow = digit < 0 ? 1 : 0
            if digit < 0 { digit += 256 }
            result[index] = UInt8(digit)
        }
        return result
    }

    @Test func keysRoundTripThroughPEMAndAJWK() throws {
        let reloaded = try ES256PrivateKey(pem: Self.key.pem)
        let data = Array("x".utf8)
        #expect(try Self.key.publicKey.verify(signature: reloaded.sign(data), data: data))
        // A JWK's x and y are the last 64 bytes of the SubjectPublicKeyInfo of an uncompressed point.
        let pem = try Self.key.publicKey.pem
        let base64 = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
        let der = try #require(Data(base64Encoded: base64))
        let point = Array(der.suffix(64))
        let fromJWK = try ES256PublicKey(x: Array(point.prefix(32)), y: Array(point.suffix(32)))
        #expect(fromJWK.verify(signature: try Self.key.sign(data), data: data))
        #expect(throws: CryptoError.self) { _ = try ES256PublicKey(pem: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n") }
    }

    @Test func aJWKSFileIsLoadedByKid() throws {
        let pem = try Self.key.publicKey.pem
        let der = Array(try #require(Data(base64Encoded: pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined())))
        let jwks = #"{"keys":[{"kty":"EC","crv":"P-256","kid":"2026-11","x":"\#(Base64URL.encode(Array(der.suffix(64).prefix(32))))","y":"\#(Base64URL.encode(Array(der.suffix(32))))","use":"sig","alg":"ES256"}]}"#
        let path = NSTemporaryDirectory() + "jwks-\(UUID().uuidString).json"
        try jwks.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let keys = try TokenKeys.load(path: path)
        #expect(keys.keys.keys.sorted() == ["2026-11"])
        let token = try TokenSigner(key: Self.key, kid: "2026-11").mint(subject: "p1", scopes: [.accountRead])
        #expect(try TokenVerifier(keys: keys).verify(authorization: "Bearer \(token)").subject == "p1")
    }

    @Test func aGoodTokenGivesItsPersonScopesAndGuestMark() throws {
        let token = try Self.signer.mint(subject: "p7", scopes: [.accountRead, .accountWrite])
        let verified = try Self.verifier.verify(authorization: "Bearer \(token)")
        #expect(verified.subject == "p7")
        #expect(verified.scopes == [.accountRead, .accountWrite])
        #expect(!verified.isGuest)
        let guest = try Self.verifier.verify(authorization: "Bearer " + Self.signer.mint(subject: "", scopes: [.catalogueRead], guest: true))
        #expect(guest.isGuest)
    }

    @Test func everyBadTokenIsA401SayingWhy() throws {
        func code(_ authorization: String?) -> String? {
            do {
                _ = try Self.verifier.verify(authorization: authorization)
                return nil
            } catch {
                #expect(error.status == 401)
                #expect(error.headers.contains { $0.name == "WWW-Authenticate" && $0.value == "Bearer" })
                return error.code.rawValue
            }
        }
        let good = try Self.signer.mint(subject: "p1", scopes: [])
        let parts = good.split(separator: ".").map(String.init)
        let expired = try Self.signer.mint(subject: "p1", scopes: [], lifetime: 60, issuedAt: Date().addingTimeInterval(-3600))
        let otherKey = try TokenSigner(key: ES256PrivateKey.generate(), kid: "k1").mint(subject: "p1", scopes: [])
        let unknownKid = try TokenSigner(key: Self.key, kid: "k9").mint(subject: "p1", scopes: [])
        let forged = [parts[0], Base64URL.encode(Array(#"{"sub":"admin","exp":9999999999}"#.utf8)), parts[2]].joined(separator: ".")
        let none = [Base64URL.encode(Array(#"{"alg":"none","kid":"k1"}"#.utf8)), parts[1], ""].joined(separator: ".")
        #expect(code(nil) == "missing_token")
        #expect(code("") == "missing_token")
        #expect(code("Basic dXNlcjpwYXNz") == "invalid_token")
        #expect(code("Bearer not-a-jwt") == "invalid_token")
        #expect(code("Bearer \(expired)") == "token_expired")
        #expect(code("Bearer \(otherKey)") == "invalid_token")
        #expect(code("Bearer \(unknownKid)") == "invalid_token")
        #expect(code("Bearer \(forged)") == "invalid_token")
        #expect(code("Bearer \(none)") == "invalid_token")
        #expect(code("Bearer \(good)") == nil)
        #expect(code("bearer \(good)") == nil, "the scheme is case-insensitive")
    }
}

/// Tokens and scopes at the API's door, through real sockets.
@Suite struct AccessControlTests {
    static let route = Route(.get, "/v1/test/mine", access: .signedIn(scope: .accountWrite), describedAs: RouteDescription("A test route.")) { context in
        HTTPResponse(status: 200, contentType: JSONAPI.mediaType, body: JSONAPI.encode(.object(["meta": .object(["person": .string(context.token?.subject ?? "")])])))
    }

    @Test func noTokenIs401AGuestIs403SignInRequiredAndAMissingScopeIs403NamingIt() async throws {
        try await withTestDatabase { db in
            let gate = AppVersionGate(client: db.client, refreshInterval: .zero)
            let api = APIServer(routes: [Self.route], gate: gate, verifier: AccessTokenTests.verifier)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            let client = APITestServer(server: server, db: db)
            let signer = AccessTokenTests.signer

            let none = try await client.send("GET", "/v1/test/mine")
            #expect(none.status == 401)
            #expect(none.header("WWW-Authenticate") == "Bearer")
            #expect(none.firstError["code"] as? String == "missing_token")

            let guest = try await client.send("GET", "/v1/test/mine", headers: ["Authorization": "Bearer " + signer.mint(subject: "", scopes: [.accountWrite], guest: true)])
            #expect(guest.status == 403)
            #expect(guest.firstError["code"] as? String == "sign_in_required")

            let readOnly = try await client.send("GET", "/v1/test/mine", headers: ["Authorization": "Bearer " + signer.mint(subject: "p1", scopes: [.accountRead])])
            #expect(readOnly.status == 403)
            #expect(readOnly.firstError["code"] as? String == "missing_scope")
            #expect((readOnly.firstError["meta"] as? [String: Any])?["scopes"] as? [String] == ["account:write"])

            let good = try await client.send("GET", "/v1/test/mine", headers: ["Authorization": "Bearer " + signer.mint(subject: "p1", scopes: [.accountWrite])])
            #expect(good.status == 200)
            #expect((good.json["meta"] as? [String: Any])?["person"] as? String == "p1")
        }
    }
}
