import Encodings
import Foundation
import Identity
import InboxDomain
import InboxAPI
import InboxTesting
import PasswordHashing
import Testing

/// The password grant through real sockets: the five outcomes of the app guide's checklist (tokens,
/// `mfa_required`, `invalid_otp`, `account_blocked`, `invalid_grant`), the code step without the
/// password, the challenge's end, and a block arriving between the steps.
@Suite struct PasswordGrantTests {
    @Test func theRightPasswordGetsAnAccessTokenTheAPIVerifiesAndARefreshToken() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("Anna@Example.com")
            let reply = try await identity.password("anna@example.COM", "correct horse battery", scope: "account:read messages:read")
            #expect(reply.status == 200, "\(reply)")
            #expect(reply["token_type"] == "Bearer")
            #expect(reply.json["expires_in"] as? Int == 3600)
            #expect(reply["scope"] == "account:read messages:read")
            #expect(reply.header("Cache-Control") == "no-store")
            #expect(reply.header("Content-Type") == "application/json;charset=UTF-8")
            let refresh = try #require(reply["refresh_token"])
            #expect(OpaqueSecret.isWellFormed(refresh))
            let token = try identity.verified(try #require(reply["access_token"]))
            #expect(token.subject == account.personId)
            #expect(token.scopes == [.accountRead, .messagesRead])
            #expect(!token.isGuest)
            #expect(abs(token.expiresAt.timeIntervalSinceNow - 3600) < 60)
            // The refresh token is kept as its digest only: its text is in no row of the role's tables.
            let digest = Hex.encode(OpaqueSecret(text: refresh).digest)
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM identity_refresh_tokens WHERE digest = '\\x\(digest)'::bytea", Int.self) == 1)
            #expect(try await identity.db.scalar(
                "SELECT count(*)::int FROM identity_refresh_tokens t, identity_sessions s WHERE t::text LIKE '%\(refresh)%' OR s::text LIKE '%\(refresh)%'", Int.self) == 0)
        }
    }

    @Test func aWrongPasswordAndAnUnknownAddressGetTheSameAnswer() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let wrong = try await identity.password("anna@example.com", "not the password")
            let unknown = try await identity.password("nobody@example.com", "not the password")
            let social = try await identity.account("apple-only@example.com", password: nil)
            let noPassword = try await identity.password(social.email, "not the password")
            try await identity.block(account.personId)
            let blockedWrong = try await identity.password("anna@example.com", "still not the password")
            for reply in [wrong, unknown, noPassword, blockedWrong] {
                #expect(reply.status == 400)
                #expect(reply["error"] == "invalid_grant")
                #expect(reply.body == wrong.body, "byte for byte: \(reply)")
                #expect(reply.headers.keys.sorted() == wrong.headers.keys.sorted())
            }
        }
    }

    @Test func aSecondFactorAsksForACodeAndTheCodeAloneFinishesTheSignInWithThePasswordStepsScope() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let (totp, _) = try await identity.secondFactor(account.personId)
            let first = try await identity.password("anna@example.com", "correct horse battery", scope: "account:read account-security:write")
            #expect(first.status == 401, "\(first)")
            #expect(first["error"] == "mfa_required")
            #expect(first.json["challenge_expires_in"] as? Int == 300)
            #expect(first["access_token"] == nil && first["refresh_token"] == nil)
            let challenge = try #require(first["challenge"])

            let wrong = try await identity.code(challenge, "000000" == identity.currentCode(totp) ? "111111" : "000000")
            #expect(wrong.status == 401)
            #expect(wrong["error"] == "invalid_otp")
            #expect(wrong.json["attempts_remaining"] as? Int == 4)

            // The same challenge again, without the password; the scope sent here is ignored.
            let right = try await identity.token([
                ("grant_type", TokenEndpoint.grantPassword), ("client_id", IdentityHarness.client), ("challenge", challenge),
                ("otp", identity.currentCode(totp)), ("scope", "messages:read"),
            ])
            #expect(right.status == 200, "\(right)")
            let token = try identity.verified(try #require(right["access_token"]))
            #expect(token.subject == account.personId)
            #expect(token.scopes == [.accountRead, .accountSecurityWrite])
            #expect(right["refresh_token"] != nil)

            // Used: the challenge works once.
            let again = try await identity.code(challenge, identity.currentCode(totp))
            #expect(again.status == 400 && again["error"] == "invalid_grant")
        }
    }

    @Test func theChallengeIsDestroyedAfterItsLastAttemptAndThenEvenTheRightCodeIsInvalidGrant() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let (totp, _) = try await identity.secondFactor(account.personId)
            let challenge = try #require(try await identity.password("anna@example.com", "correct horse battery")["challenge"])
            let wrongCode = identity.currentCode(totp) == "123456" ? "654321" : "123456"
            for remaining in [4, 3, 2, 1] {
                let reply = try await identity.code(challenge, wrongCode)
                #expect(reply.status == 401 && reply["error"] == "invalid_otp", "\(reply)")
                #expect(reply.json["attempts_remaining"] as? Int == remaining)
            }
            let last = try await identity.code(challenge, wrongCode)
            #expect(last.status == 400 && last["error"] == "invalid_grant", "the fifth wrong code: \(last)")
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM identity_challenges", Int.self) == 0)
            let right = try await identity.code(challenge, identity.currentCode(totp))
            #expect(right.status == 400 && right["error"] == "invalid_grant")
        }
    }

    @Test func anExpiredChallengeIsInvalidGrant() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let (totp, _) = try await identity.secondFactor(account.personId)
            let challenge = try #require(try await identity.password("anna@example.com", "correct horse battery")["challenge"])
            identity.clock.advance(301)
            let reply = try await identity.code(challenge, identity.currentCode(totp))
            #expect(reply.status == 400 && reply["error"] == "invalid_grant", "\(reply)")
        }
    }

    @Test func aTOTPCodeIsAcceptedOnceAndARecoveryCodeWorksOnce() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let (totp, recovery) = try await identity.secondFactor(account.personId)
            #expect(recovery.count == 10)
            let code = identity.currentCode(totp)
            let first = try await identity.code(try #require(try await identity.password(account.email, "correct horse battery")["challenge"]), code)
            #expect(first.status == 200)
            let reused = try await identity.code(try #require(try await identity.password(account.email, "correct horse battery")["challenge"]), code)
            #expect(reused.status == 401 && reused["error"] == "invalid_otp", "the same code twice: \(reused)")

            let spaced = recovery[3].uppercased().replacingOccurrences(of: "-", with: " ")
            let byRecovery = try await identity.code(try #require(try await identity.password(account.email, "correct horse battery")["challenge"]), spaced)
            #expect(byRecovery.status == 200, "\(byRecovery)")
            let recoveryAgain = try await identity.code(
                try #require(try await identity.password(account.email, "correct horse battery")["challenge"]), recovery[3])
            #expect(recoveryAgain.status == 401 && recoveryAgain["error"] == "invalid_otp")
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM identity_recovery_codes WHERE used_at IS NOT NULL", Int.self) == 1)
        }
    }

    @Test func aBlockedAccountIsToldSoInItsLanguageOnlyWithTheRightPassword() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            try await identity.block(account.personId)
            let expected: [(String, String, String)] = [
                ("nl-BE, nl;q=0.9", "nl", "Je account is geblokkeerd door Wristler."),
                ("de", "de", "Dein Konto wurde von Wristler gesperrt."),
                ("fr-FR", "fr", "Votre compte a été bloqué par Wristler."),
                ("ja", "en", "Your account has been blocked by Wristler. Please contact us if you believe this is a mistake."),
            ]
            for (accept, language, start) in expected {
                let reply = try await identity.password("anna@example.com", "correct horse battery", headers: ["Accept-Language": accept])
                #expect(reply.status == 403, "\(reply)")
                #expect(reply["error"] == "account_blocked")
                #expect(reply["error_description"]?.hasPrefix(start) == true, "\(accept): \(reply)")
                #expect(reply["contact_url"] == "https://wristler.eu/contact")
                #expect(reply.header("Content-Language") == language)
                #expect(reply["access_token"] == nil)
            }
            let wrong = try await identity.password("anna@example.com", "wrong password")
            #expect(wrong.status == 400 && wrong["error"] == "invalid_grant")
        }
    }

    @Test func aBlockBetweenThePasswordAndTheCodeIsAccountBlockedAtTheCodeStep() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let (totp, _) = try await identity.secondFactor(account.personId)
            let challenge = try #require(try await identity.password("anna@example.com", "correct horse battery")["challenge"])
            try await identity.block(account.personId)
            let reply = try await identity.code(challenge, identity.currentCode(totp), headers: ["Accept-Language": "de"])
            #expect(reply.status == 403 && reply["error"] == "account_blocked", "\(reply)")
            #expect(reply["error_description"]?.hasPrefix("Dein Konto") == true)
            #expect(reply["contact_url"] != nil)
            let again = try await identity.code(challenge, identity.currentCode(totp))
            #expect(again.status == 400 && again["error"] == "invalid_grant", "the challenge went with the block")
            // The block is in the log, for the rest of the tier.
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM events WHERE type = 'account_blocked'", Int.self) == 1)
        }
    }

    @Test func aSignInIsASignedInEventWithItsPlatformAndDevice() async throws {
        try await IdentityHarness.with { identity in
            let account = try await identity.account("anna@example.com")
            let reply = try await identity.token(
                [
                    ("grant_type", TokenEndpoint.grantPassword), ("client_id", IdentityHarness.client), ("username", account.email),
                    ("password", "correct horse battery"), ("device", "Anna's iPhone"),
                ], headers: ["X-Wristler-App": "android/3.1.0"])
            #expect(reply.status == 200)
            let token = try identity.verified(try #require(reply["access_token"]))
            let payload = try await identity.db.scalar("SELECT payload::text FROM events WHERE type = 'signed_in'", String.self)
            let metadata = try await identity.db.scalar("SELECT metadata::text FROM events WHERE type = 'signed_in'", String.self)
            #expect(payload.contains("\"platform\": \"app:android\""), "\(payload)")
            // The device is sealed under Anna's key: not in the row, and read back through the log.
            #expect(!payload.contains("Anna's iPhone") && payload.contains("\"device\": {\"$sealed\""), "\(payload)")
            let read = try await identity.db.events(where: "type = 'signed_in'").first
            #expect(try read?.decode(SignedIn.self, using: InboxCatalogue.registry).device == "Anna's iPhone")
            #expect(payload.contains("\"personId\": \"\(account.personId)\""))
            #expect(metadata.contains("\"service\": \"identity\"") && metadata.contains("\"appVersion\": \"3.1.0\""), "\(metadata)")
            let session = try await identity.db.scalar("SELECT id::text FROM identity_sessions", String.self)
            #expect(payload.contains("\"signInId\": \"\(session)\""))
            #expect(token.id != session, "the token's own id is not the session's")
        }
    }
}
