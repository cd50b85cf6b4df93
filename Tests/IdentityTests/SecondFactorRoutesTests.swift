import Crypto
import EventLog
import Foundation
import Identity
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

/// The person's own second factor through real sockets: enrolling, confirming, the codes, turning it off.
@Suite struct SecondFactorRoutesTests {
    static func withRoutes(secrets: SecretsKey? = nil, _ body: (IdentityHarness) async throws -> Void) async throws {
        try await IdentityHarness.with(
            extraRoutes: { pool in
                MeRoutes.routes(client: pool)
                    + SecondFactorRoutes.routes(client: pool, secrets: secrets, validator: EventValidator(registry: InboxCatalogue.registry))
            }, body)
    }

    static func code(_ code: String) -> [UInt8] { Array(#"{"data":{"type":"second-factors","attributes":{"code":"\#(code)"}}}"#.utf8) }

    static func secret(fromURI uri: String) throws -> TOTP {
        let components = try #require(URLComponents(string: uri))
        let text = try #require(components.queryItems?.first { $0.name == "secret" }?.value)
        return TOTP(secret: try #require(Base32.decode(text)))
    }

    static func events(_ identity: IdentityHarness) async throws -> [String] {
        try await identity.db.client.withConnection { connection in
            try connection.query("SELECT type FROM events WHERE type LIKE 'second_factor%' OR type = 'recovery_codes_renewed' ORDER BY position").map {
                try $0.decode(String.self, "type")
            }
        }
    }

    @Test(arguments: [false, true]) func enrollingConfirmingAndTurningItOffAsThePersonThemself(sealed: Bool) async throws {
        try await Self.withRoutes(secrets: sealed ? try SecretsKey(bytes: Array(repeating: 7, count: 32)) : nil) { identity in
            _ = try await identity.account("fenna@example.com")
            let (token, _) = try await MeRoutesTests.signIn(identity, "fenna@example.com", scope: "account-security:write")
            let headers = MeRoutesTests.headers(token)
            let started = try await identity.send("POST", "/v1/me/second-factor", headers: headers)
            #expect(started.status == 201, "\(started)")
            let attributes = try #require((started.json["data"] as? [String: Any])?["attributes"] as? [String: Any])
            let uri = try #require(attributes["otpauthUri"] as? String)
            #expect(uri.hasPrefix("otpauth://totp/Wristler:fenna@example.com?secret="), "\(uri)")
            let totp = try Self.secret(fromURI: uri)
            #expect(Base32.encode(totp.secret) == attributes["secret"] as? String)

            // A wrong code: 422 naming the field, attempts counted; the right one turns it on.
            let wrong = try await identity.send("POST", "/v1/me/second-factor/confirmation", headers: headers, body: Self.code("000000"))
            #expect(wrong.status == 422 && wrong.text.contains(#""pointer":"/data/attributes/code""#) && wrong.text.contains(#""attemptsRemaining":4"#), "\(wrong)")
            let confirmed = try await identity.send(
                "POST", "/v1/me/second-factor/confirmation", headers: headers, body: Self.code(identity.currentCode(totp)))
            #expect(confirmed.status == 200, "\(confirmed)")
            let codes = try #require(((confirmed.json["data"] as? [String: Any])?["attributes"] as? [String: Any])?["recoveryCodes"] as? [String])
            #expect(codes.count == 10)
            let stored = try await identity.db.scalar("SELECT sealed FROM identity_totp", Bool.self)
            #expect(stored == sealed)
            let me = try await identity.send("GET", "/v1/me", headers: headers)
            #expect(((me.json["data"] as? [String: Any])?["attributes"] as? [String: Any])?["secondFactor"] as? Bool == true)
            #expect(try await identity.send("POST", "/v1/me/second-factor", headers: headers).status == 409, "on already")

            // The password step now asks for a code, and the authenticator's works.
            let step = try await identity.password("fenna@example.com", "correct horse battery")
            #expect(step.status == 401 && step["error"] == "mfa_required", "\(step)")

            // New recovery codes need a code (a recovery code will do, once); the old ones are dead.
            identity.clock.advance(31)
            let renewed = try await identity.send("POST", "/v1/me/recovery-codes", headers: headers, body: Self.code(codes[0]))
            #expect(renewed.status == 200, "\(renewed)")
            let fresh = try #require(((renewed.json["data"] as? [String: Any])?["attributes"] as? [String: Any])?["recoveryCodes"] as? [String])
            #expect(Set(fresh).isDisjoint(with: codes))
            let old = try await identity.send("POST", "/v1/me/second-factor/removal", headers: headers, body: Self.code(codes[1]))
            #expect(old.status == 422, "an old recovery code is dead: \(old)")

            // Off with a new recovery code.
            let off = try await identity.send("POST", "/v1/me/second-factor/removal", headers: headers, body: Self.code(fresh[0]))
            #expect(off.status == 200, "\(off)")
            #expect(try await identity.password("fenna@example.com", "correct horse battery").status == 200, "no code asked any more")
            #expect(try await identity.send("POST", "/v1/me/second-factor/removal", headers: headers, body: Self.code(fresh[1])).status == 409)
            #expect(try await Self.events(identity) == ["second_factor_enabled", "recovery_codes_renewed", "second_factor_disabled"])
        }
    }

    @Test func fiveWrongCodesEndTheEnrolmentAndTheAccountsCodeLimitHolds() async throws {
        try await Self.withRoutes { identity in
            _ = try await identity.account("gijs@example.com")
            let (token, _) = try await MeRoutesTests.signIn(identity, "gijs@example.com", scope: "account-security:write")
            let headers = MeRoutesTests.headers(token)
            let started = try await identity.send("POST", "/v1/me/second-factor", headers: headers)
            let totp = try Self.secret(fromURI: try #require(((started.json["data"] as? [String: Any])?["attributes"] as? [String: Any])?["otpauthUri"] as? String))
            for _ in 0..<5 {
                #expect(try await identity.send("POST", "/v1/me/second-factor/confirmation", headers: headers, body: Self.code("123456")).status == 422)
            }
            let spent = try await identity.send("POST", "/v1/me/second-factor/confirmation", headers: headers, body: Self.code(identity.currentCode(totp)))
            #expect(spent.status == 409 && spent.text.contains("no_enrolment"), "even the right code, after five wrong: \(spent)")
            // The account's code limit (10 in 300 s): the next codes are 429 with Retry-After.
            var limited: Reply?
            for _ in 0..<6 where limited == nil {
                let reply = try await identity.send("POST", "/v1/me/second-factor/confirmation", headers: headers, body: Self.code("123456"))
                if reply.status == 429 { limited = reply }
            }
            let reply = try #require(limited, "no 429 within 12 codes")
            #expect(reply.header("Retry-After").flatMap(Int.init) ?? 0 >= 1, "\(reply)")
            let wrongType = try await identity.send(
                "POST", "/v1/me/second-factor/removal", headers: headers, body: Array(#"{"data":{"type":"people","attributes":{"code":"1"}}}"#.utf8))
            #expect(wrongType.status == 409 || wrongType.status == 429, "\(wrongType)")
            #expect(try await Self.events(identity).isEmpty)
        }
    }
}
