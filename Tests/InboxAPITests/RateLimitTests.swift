import Foundation
import HTTPServer
import InboxAPI
import InboxTesting
import Testing

/// Requests per token: 429 with Retry-After, guests more tightly than people.
@Suite struct RateLimitTests {
    @Test func aTokenOverItsLimitGets429WithRetryAfterAndAGuestSooner() async throws {
        try await withTestDatabase { db in
            let route = Route(.get, "/v1/test/limited", access: .signedIn(scope: nil), describedAs: RouteDescription("A test route.")) { _ in HTTPResponse(status: 204) }
            // Refilled so slowly that a slow machine cannot refill a request during the test.
            let limiter = RateLimiter(limits: .init(personPerSecond: 0.01, personBurst: 5, guestPerSecond: 0.01, guestBurst: 2))
            let api = APIServer(routes: [route], gate: nil, verifier: AccessTokenTests.verifier, rateLimiter: limiter)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
            defer { server.shutdown() }
            let client = APITestServer(server: server, db: db)
            let person = ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "p1", scopes: []))]
            var statuses: [Int] = []
            for _ in 0..<7 { statuses.append(try await client.send("GET", "/v1/test/limited", headers: person).status) }
            #expect(statuses == [204, 204, 204, 204, 204, 429, 429])
            let limited = try await client.send("GET", "/v1/test/limited", headers: person)
            #expect(limited.firstError["code"] as? String == "too_many_requests")
            // One request takes 100 s to come back at 0.01 a second.
            #expect(limited.header("Retry-After").flatMap(Int.init).map { (50...100).contains($0) } == true, "\(String(describing: limited.header("Retry-After")))")
            // Another person has a bucket of their own.
            let other = ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "p2", scopes: []))]
            #expect(try await client.send("GET", "/v1/test/limited", headers: other).status == 204)
            // A guest is refused sooner (and, within the limit, told to sign in).
            let guest = ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "", scopes: [], guest: true))]
            var guestStatuses: [Int] = []
            for _ in 0..<3 { guestStatuses.append(try await client.send("GET", "/v1/test/limited", headers: guest).status) }
            #expect(guestStatuses == [403, 403, 429])
        }
    }
}
