import Crypto
import Foundation
import Identity
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Testing

/// Sign in with Apple and Google against local servers that publish their keys and sign ID tokens
/// as Apple and Google do: the nonce, the account made or linked, names, Apple's web flow and its
/// one-time handoff, and the authorization code exchanged.
@Suite struct SocialSignInTests {
    static func social(
        _ identity: IdentityHarness, _ provider: SocialProvider, idToken: String? = nil, handoff: String? = nil, nonce: String?,
        extra: [(String, String)] = []
    ) async throws -> Reply {
        var fields = [("grant_type", TokenEndpoint.grantSocial), ("client_id", IdentityHarness.client), ("provider", provider.rawValue)]
        if let idToken { fields.append(("id_token", idToken)) }
        if let handoff { fields.append(("handoff", handoff)) }
        if let nonce { fields.append(("nonce", nonce)) }
        return try await identity.token(fields + extra)
    }

    /// The handoff of a `303` from `/oauth/apple/return`.
    static func handoff(in reply: Reply) throws -> String? {
        guard let location = reply.header("Location"), let query = location.split(separator: "?", maxSplits: 1).last else { return nil }
        return try FormBody(Array(query.utf8))["handoff"]
    }

    @Test func theRightNonceSignsInAndMakesTheAccountWithTheNamesAppleToldTheApp() async throws {
        try await IdentityHarness.with(providers: true) { identity in
            let providers = try #require(identity.providers)
            let nonce = "n-0S6_WzA2Mj+/="
            let token = try providers.idToken(.apple, subject: "001234.apple", nonce: nonce, email: "anna@privaterelay.appleid.com")
            let reply = try await Self.social(
                identity, .apple, idToken: token, nonce: nonce, extra: [("given_name", "Anna"), ("family_name", "de Vries"), ("scope", "account:read")])
            #expect(reply.status == 200, "\(reply)")
            #expect(reply["refresh_token"] != nil)
            let access = try identity.verified(try #require(reply["access_token"]))
            #expect(access.scopes == [.accountRead])
            let account = try #require(try await identity.role.administration.findOnThread(email: "anna@privaterelay.appleid.com"))
            #expect(access.subject == account.personId)
            #expect(account.givenName == "Anna" && account.familyName == "de Vries" && account.emailVerified && account.passwordHash == nil)
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM events WHERE type = 'signed_in'", Int.self) == 1)

            // Later sign-ins: the same account, never renamed; a name still empty is filled.
            try await identity.db.client.execute("UPDATE identity_accounts SET family_name = '' WHERE person_id = '\(account.personId)'")
            let later = try providers.idToken(.apple, subject: "001234.apple", nonce: "second", email: nil)
            let again = try await Self.social(identity, .apple, idToken: later, nonce: "second", extra: [("given_name", "Annie"), ("family_name", "Jansen")])
            #expect(again.status == 200, "\(again)")
            #expect(try identity.verified(try #require(again["access_token"])).subject == account.personId)
            let renamed = try #require(try await identity.role.administration.findOnThread(email: account.email))
            #expect(renamed.givenName == "Anna" && renamed.familyName == "Jansen")
        }
    }

    /// An ID token that signed somebody in, captured with its nonce, does not sign in again while
    /// it is valid, by the token endpoint or through Apple's web flow; the provider's next one does.
    @Test func anIDTokenThatSignedInDoesNotSignInAgain() async throws {
        try await IdentityHarness.with(providers: true) { identity in
            let providers = try #require(identity.providers)
            let token = try providers.idToken(.google, subject: "g-replay", nonce: "n-1", email: "rita@gmail.com")
            #expect(try await Self.social(identity, .google, idToken: token, nonce: "n-1").status == 200)
            let replayed = try await Self.social(identity, .google, idToken: token, nonce: "n-1")
            #expect(replayed.status == 400 && replayed["error"] == "invalid_grant", "\(replayed)")
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM events WHERE type = 'signed_in'", Int.self) == 1)
            let next = try providers.idToken(.google, subject: "g-replay", nonce: "n-2", email: "rita@gmail.com")
            #expect(try await Self.social(identity, .google, idToken: next, nonce: "n-2").status == 200, "the provider's next token")
            // Stored as a digest, never the token.
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM identity_used_id_tokens WHERE digest LIKE 'eyJ%'", Int.self) == 0)
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM identity_used_id_tokens", Int.self) == 2)
        }
    }

    @Test func aWrongOrMissingNonceIsRefused() async throws {
        try await IdentityHarness.with(providers: true) { identity in
            let providers = try #require(identity.providers)
            let token = try providers.idToken(.google, subject: "g-1", nonce: "the-apps-nonce", email: "anna@gmail.com")
            let wrong = try await Self.social(identity, .google, idToken: token, nonce: "another-nonce")
            #expect(wrong.status == 400 && wrong["error"] == "invalid_grant", "\(wrong)")
            let trimmed = try await Self.social(identity, .google, idToken: token, nonce: "the-apps-nonce ")
            #expect(trimmed["error"] == "invalid_grant", "exactly as sent")
            let missing = try await Self.social(identity, .google, idToken: token, nonce: nil)
            #expect(missing.status == 400 && missing["error"] == "invalid_request", "\(missing)")
            let withoutClaim = try providers.idToken(.google, subject: "g-1", nonce: nil, email: "anna@gmail.com")
            #expect(try await Self.social(identity, .google, idToken: withoutClaim, nonce: "the-apps-nonce")["error"] == "invalid_grant")
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM identity_accounts", Int.self) == 0)
            let right = try await Self.social(identity, .google, idToken: token, nonce: "the-apps-nonce")
            #expect(right.status == 200, "\(right)")
        }
    }

    @Test func aTokenNotMadeForUsOrNotByTheProviderIsInvalidGrant() async throws {
        try await IdentityHarness.with(providers: true) { identity in
            let providers = try #require(identity.providers)
            let stranger = try RS256PrivateKey.generate()
            let tokens: [(String, String)] = [
                ("another app's", try providers.idToken(.google, subject: "g", audience: "someone-else", nonce: "n", email: "a@gmail.com")),
                ("expired", try providers.idToken(.google, subject: "g", nonce: "n", email: "a@gmail.com", expiresIn: -120)),
                ("signed by a stranger", try providers.idToken(.google, subject: "g", nonce: "n", email: "a@gmail.com", signedBy: stranger)),
                ("of a key nobody published", try providers.idToken(.google, subject: "g", nonce: "n", email: "a@gmail.com", signedBy: stranger, kid: "made-up")),
                ("of another issuer", try providers.idToken(.google, subject: "g", nonce: "n", email: "a@gmail.com", claims: ["iss": .string("https://evil.example")])),
                ("Apple's, sent as Google's", try providers.idToken(.apple, subject: "g", audience: ProviderServer.googleClient, nonce: "n", email: "a@gmail.com")),
                ("not a JWT", "not.a.jwt"),
            ]
            for (what, token) in tokens {
                let reply = try await Self.social(identity, .google, idToken: token, nonce: "n")
                #expect(reply.status == 400 && reply["error"] == "invalid_grant", "\(what): \(reply)")
            }
            // The key set was fetched once, then at most once more for the unknown kid.
            #expect((providers.keyFetches["google"] ?? 0) <= 2, "\(providers.keyFetches)")
        }
    }

    @Test func anAddressOfAnUnverifiedAccountIsRefusedRatherThanLinkedAndAVerifiedOneIsLinked() async throws {
        try await IdentityHarness.with(providers: true) { identity in
            let providers = try #require(identity.providers)
            let unverified = try await identity.account("anna@example.com", verified: false)
            let token = try providers.idToken(.google, subject: "g-anna", nonce: "n1", email: "Anna@example.com")
            let refused = try await Self.social(identity, .google, idToken: token, nonce: "n1")
            #expect(refused.status == 400 && refused["error"] == "invalid_grant", "\(refused)")
            #expect(refused["error_description"]?.contains("e-mail and password") == true)
            #expect(try await identity.db.scalar("SELECT count(*)::int FROM identity_social_links", Int.self) == 0)

            let verified = try await identity.account("bert@example.com", givenName: "Bert")
            let bertsToken = try providers.idToken(
                .google, subject: "g-bert", nonce: "n2", email: "bert@example.com", claims: ["given_name": .string("Robert"), "family_name": .string("Smit")])
            let linked = try await Self.social(identity, .google, idToken: bertsToken, nonce: "n2")
            #expect(linked.status == 200, "\(linked)")
            #expect(try identity.verified(try #require(linked["access_token"])).subject == verified.personId)
            let bert = try #require(try await identity.role.administration.findOnThread(email: "bert@example.com"))
            #expect(bert.givenName == "Bert" && bert.familyName == "Smit", "Google's name fills only what was empty")
            #expect(unverified.emailVerified == false)

            let unverifiedByGoogle = try providers.idToken(.google, subject: "g-cleo", nonce: "n3", email: "cleo@example.com", emailVerified: false)
            #expect(try await Self.social(identity, .google, idToken: unverifiedByGoogle, nonce: "n3")["error"] == "invalid_grant")
        }
    }

    @Test func aBlockedAccountSignedInByAppleIsAccountBlocked() async throws {
        try await IdentityHarness.with(providers: true) { identity in
            let providers = try #require(identity.providers)
            let first = try await Self.social(
                identity, .apple, idToken: try providers.idToken(.apple, subject: "a-1", nonce: "n", email: "anna@example.com"), nonce: "n")
            let personId = try identity.verified(try #require(first["access_token"])).subject
            try await identity.block(personId)
            let reply = try await Self.social(identity, .apple, idToken: try providers.idToken(.apple, subject: "a-1", nonce: "m", email: nil), nonce: "m")
            #expect(reply.status == 403 && reply["error"] == "account_blocked" && reply["contact_url"] != nil, "\(reply)")
        }
    }

    @Test func applesWebFlowHandsOffOnceWithinFiveMinutesAndTheIDTokenNeverTravelsInAURL() async throws {
        try await IdentityHarness.with(providers: true) { identity in
            let providers = try #require(identity.providers)
            let nonce = "android-nonce-1"
            let idToken = try providers.idToken(
                .apple, subject: "a-web", audience: ProviderServer.appleServices, nonce: nonce, email: "anna@example.com")
            let user = #"{"name":{"firstName":"Anna","lastName":"Bakker"},"email":"anna@example.com"}"#
            let posted = try await identity.send(
                "POST", IdentityRoutes.appleReturnPath, headers: TokenRequestTests.form,
                body: Array(FormBody.encode([("state", "s&1=2"), ("code", "good-web-code"), ("id_token", idToken), ("user", user)]).utf8))
            #expect(posted.status == 303, "\(posted)")
            let location = try #require(posted.header("Location"))
            #expect(location.hasPrefix("https://wristler.eu/app/apple-sign-in?"))
            #expect(!location.contains(idToken.prefix(30)))
            let query = try FormBody(Array(location.split(separator: "?", maxSplits: 1)[1].utf8))
            #expect(query["state"] == "s&1=2")
            let handoff = try #require(query["handoff"])

            let wrongNonce = try await Self.social(identity, .apple, handoff: handoff, nonce: "another")
            #expect(wrongNonce["error"] == "invalid_grant", "a handoff is used by any attempt: \(wrongNonce)")

            // The same ID token posted again is a replay: refused, with no handoff. Apple's next one signs in.
            let again = try await identity.send(
                "POST", IdentityRoutes.appleReturnPath, headers: TokenRequestTests.form,
                body: Array(FormBody.encode([("state", "s2"), ("code", "good-web-code-2"), ("id_token", idToken), ("user", user)]).utf8))
            #expect(try Self.handoff(in: again) == nil && again.header("Location")?.contains("error=invalid_grant") == true, "\(again)")
            let nextToken = try providers.idToken(
                .apple, subject: "a-web", audience: ProviderServer.appleServices, nonce: nonce, email: "anna@example.com")
            let second = try await identity.send(
                "POST", IdentityRoutes.appleReturnPath, headers: TokenRequestTests.form,
                body: Array(FormBody.encode([("state", "s2"), ("code", "good-web-code-2"), ("id_token", nextToken), ("user", user)]).utf8))
            let handoff2 = try #require(try Self.handoff(in: second))
            let signedIn = try await Self.social(identity, .apple, handoff: handoff2, nonce: nonce)
            #expect(signedIn.status == 200, "\(signedIn)")
            let account = try #require(try await identity.role.administration.findOnThread(email: "anna@example.com"))
            #expect(account.givenName == "Anna" && account.familyName == "Bakker", "the name Apple posted travels with the handoff")
            let replayed = try await Self.social(identity, .apple, handoff: handoff2, nonce: nonce)
            #expect(replayed.status == 400 && replayed["error"] == "invalid_grant", "a handoff works once: \(replayed)")

            // Five minutes.
            let third = try await identity.send(
                "POST", IdentityRoutes.appleReturnPath, headers: TokenRequestTests.form,
                body: Array(FormBody.encode([("state", "s3"), ("id_token", try providers.idToken(
                    .apple, subject: "a-web", audience: ProviderServer.appleServices, nonce: nonce, email: "anna@example.com"))]).utf8))
            let handoff3 = try #require(try Self.handoff(in: third))
            identity.clock.advance(301)
            #expect(try await Self.social(identity, .apple, handoff: handoff3, nonce: nonce)["error"] == "invalid_grant")
        }
    }

    @Test func aCancelledWebFlowRedirectsWithTheErrorAndTheState() async throws {
        try await IdentityHarness.with(providers: true) { identity in
            let posted = try await identity.send(
                "POST", IdentityRoutes.appleReturnPath, headers: TokenRequestTests.form,
                body: Array(FormBody.encode([("state", "xyz"), ("error", "user_cancelled_authorize")]).utf8))
            #expect(posted.status == 303)
            let location = try #require(posted.header("Location"))
            #expect(location == "https://wristler.eu/app/apple-sign-in?error=user_cancelled_authorize&state=xyz")
            let forged = try await identity.send(
                "POST", IdentityRoutes.appleReturnPath, headers: TokenRequestTests.form,
                body: Array(FormBody.encode([("state", "xyz"), ("id_token", "forged.token.here")]).utf8))
            #expect(forged.header("Location") == "https://wristler.eu/app/apple-sign-in?error=invalid_grant&state=xyz")
        }
    }

    @Test func applesAuthorizationCodeIsExchangedAndAFailedExchangeNeverFailsTheSignIn() async throws {
        try await IdentityHarness.with(providers: true) { identity in
            let providers = try #require(identity.providers)
            let token = try providers.idToken(.apple, subject: "a-code", nonce: "n", email: "anna@example.com")
            let reply = try await Self.social(identity, .apple, idToken: token, nonce: "n", extra: [("authorization_code", "good-native")])
            #expect(reply.status == 200)
            var stored: String?
            for _ in 0..<100 {
                stored = try await identity.db.scalar("SELECT coalesce(apple_refresh_token, '') FROM identity_social_links WHERE subject = 'a-code'", String.self)
                if stored?.isEmpty == false { break }
                try await Task.sleep(for: .milliseconds(50))
            }
            #expect(stored == "apple-refresh-for-good-native")
            let exchange = try #require(providers.exchanges.first)
            #expect(exchange["client_id"] == ProviderServer.appleBundle && exchange["redirect_uri"] == nil, "a native code: \(exchange)")

            let other = try providers.idToken(.apple, subject: "a-code", nonce: "m", email: nil)
            let failed = try await Self.social(identity, .apple, idToken: other, nonce: "m", extra: [("authorization_code", "expired-code")])
            #expect(failed.status == 200, "Apple refusing the code changes nothing for the sign-in")
        }
    }
}

extension AccountAdministration {
    /// `find(email:)` off the cooperative pool.
    func findOnThread(email: String) async throws -> Account? {
        let administration = self
        return try await BlockingThread.run { try administration.find(email: email) }
    }
}
