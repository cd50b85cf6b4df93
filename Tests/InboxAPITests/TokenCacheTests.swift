import Foundation
import HTTPServer
import InboxAPI
import InboxTesting
import Testing

/// The remembered tokens stay within their bound whatever a client sends.
@Suite struct TokenCacheTests {
    @Test func spellingsOfOneTokenAndGarbageTokensAreRememberedOnceWithinTheBound() async throws {
        try await withTestDatabase { db in
            let route = Route(.get, "/v1/test/cached", access: .signedIn(scope: nil), describedAs: RouteDescription("A test route.")) { _ in HTTPResponse(status: 204) }
            let verifier = TokenVerifier(keys: AccessTokenTests.verifier.keys, cacheBytes: 64 * 1024)
            let api = APIServer(routes: [route], gate: nil, verifier: verifier)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            let client = APITestServer(server: server, db: db)
            let token = try AccessTokenTests.signer.mint(subject: "p1", scopes: [])
            let parts = token.split(separator: ".").map(String.init)
            var statuses: [Int: Int] = [:]
            for spaces in 1...40 {
                for scheme in ["Bearer", "bearer", "BEARER", "bEaReR", "BeArEr"] {
                    let reply = try await client.send("GET", "/v1/test/cached", headers: ["Authorization": scheme + String(repeating: " ", count: spaces) + token])
                    statuses[reply.status, default: 0] += 1
                }
            }
            #expect(statuses == [204: 200], "every spelling of Bearer with one or more spaces is accepted")
            #expect(verifier.cached.count == 1, "one token, however spelled, is one entry")
            // Well-formed tokens whose signature does not verify are never remembered.
            for index in 0..<200 {
                let garbage = [parts[0], parts[1], String(parts[2].dropLast(4)) + String(format: "%04d", index)].joined(separator: ".")
                #expect(try await client.send("GET", "/v1/test/cached", headers: ["Authorization": "Bearer " + garbage]).status == 401)
            }
            #expect(verifier.cached.count == 1)
            // Many valid tokens: the bound in bytes holds.
            for index in 0..<600 {
                let other = try AccessTokenTests.signer.mint(subject: "p\(index)", scopes: [.accountRead])
                #expect(try await client.send("GET", "/v1/test/cached", headers: ["Authorization": "Bearer " + other]).status == 204)
            }
            let cached = verifier.cached
            #expect(cached.bytes <= 64 * 1024, "\(cached)")
            #expect(cached.count > 0 && cached.count < 601, "\(cached)")
        }
    }
}
