import Foundation
import InboxAPI
import PostgresClient

/// A sign-in and the refresh tokens it hands out (`identity_sessions`, `identity_refresh_tokens`).
public struct SignInSession: Sendable, Hashable {
    public var id: UUID
    public var personId: String
    public var clientId: String
    public var scopes: [Scope]
}

/// What presenting a refresh token came to.
public enum Refresh: Sendable {
    /// The token was the session's current one: here is the next.
    case renewed(SignInSession, refreshToken: OpaqueSecret)
    /// The token was used before: the whole session has just been ended (OAuth 2.0 security best
    /// current practice, RFC 9700 §4.14.2), since either its holder or a thief has the newer one.
    case reused(personId: String, sessionId: UUID)
    /// Unknown, of another client, or of a session that is over.
    case refused
    /// The refresh asked for a scope the session was not given (the first such scope); the token
    /// is left as it was, still the session's current one.
    case scopeNotGiven(Scope)
}

/// Sign-in sessions: each a family of refresh tokens, one current at a time.
///
/// Guarantees: a refresh token works once; the second presentation of a used one ends the session
/// it belongs to, whoever presents it, and no token of that session works again; two refreshes
/// racing with the same token renew once (the other is the reuse); a session is over 90 days
/// (`lifetime`) after its last refresh, or when ended (reuse, a block, a password change).
public enum Sessions {
    public static func start(
        personId: String, clientId: String, scopes: [Scope], platform: String, device: String?, appVersion: String? = nil, method: String? = nil,
        lifetime: TimeInterval, now: Date, on connection: PostgresConnection
    ) throws -> (SignInSession, OpaqueSecret) {
        let id = UUID()
        _ = try connection.query(
            """
            INSERT INTO identity_sessions (id, person_id, client_id, scopes, platform, device, app_version, method, created_at, refreshed_at, expires_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10)
            """, id, personId, clientId, ScopeList.text(scopes), platform, device, appVersion.map { String($0.prefix(50)) }, method, now,
            now.addingTimeInterval(lifetime))
        let token = OpaqueSecret.generate()
        _ = try connection.query(
            "INSERT INTO identity_refresh_tokens (digest, session_id, generation, issued_at) VALUES ($1, $2, 1, $3)", token.digest, id, now)
        return (SignInSession(id: id, personId: personId, clientId: clientId, scopes: scopes), token)
    }

    /// Renews `token` for `clientId`, in one transaction of its own on `connection`.
    /// `narrowedTo`: the scopes the refresh asks for (none: the session's); one the session was
    /// not given refuses the refresh without spending the token.
    /// `whenReused` runs in the transaction that ends a session whose used token came again (the
    /// identity role appends `refresh_token_reused` there, so the person is told).
    public static func refresh(
        _ token: String, clientId: String, narrowedTo: [Scope] = [], lifetime: TimeInterval, now: Date, on connection: PostgresConnection,
        whenReused: (_ personId: String, _ sessionId: UUID, PostgresConnection) throws -> Void = { _, _, _ in }
    ) throws -> Refresh {
        guard OpaqueSecret.isWellFormed(token) else { return .refused }
        let digest = OpaqueSecret(text: token).digest
        do {
            return try renew(
                digest: digest, clientId: clientId, narrowedTo: narrowedTo, lifetime: lifetime, now: now, on: connection, whenReused: whenReused)
        } catch is RefusedRefresh {
            // The token stays as it was: refusing a refresh of a session that is over changes nothing.
            return .refused
        } catch let refused as ScopeNotGiven {
            // Rolled back too: the app still holds the session's current token.
            return .scopeNotGiven(refused.scope)
        }
    }

    private static func renew(
        digest: Data, clientId: String, narrowedTo: [Scope], lifetime: TimeInterval, now: Date, on connection: PostgresConnection,
        whenReused: (String, UUID, PostgresConnection) throws -> Void
    ) throws -> Refresh {
        try connection.transaction { connection -> Refresh in
            // Marking it used takes the row's lock: a second refresh with the same token waits here
            // and then finds it used.
            guard let used = try connection.query(
                "UPDATE identity_refresh_tokens SET used_at = $2 WHERE digest = $1 AND used_at IS NULL RETURNING session_id, generation", digest, now
            ).first else {
                if let reused = try connection.query(
                    "SELECT t.session_id, s.person_id FROM identity_refresh_tokens t JOIN identity_sessions s ON s.id = t.session_id WHERE t.digest = $1",
                    digest
                ).first {
                    let sessionId = try reused.decode(UUID.self, "session_id")
                    let personId = try reused.decode(String.self, "person_id")
                    try end(sessionId: sessionId, reason: "refresh_token_reused", now: now, on: connection)
                    try whenReused(personId, sessionId, connection)
                    return .reused(personId: personId, sessionId: sessionId)
                }
                return .refused
            }
            let sessionId = try used.decode(UUID.self, "session_id")
            guard let row = try connection.query(
                """
                SELECT s.person_id, s.client_id, s.scopes FROM identity_sessions s JOIN identity_accounts a USING (person_id)
                WHERE s.id = $1 AND s.ended_at IS NULL AND s.expires_at > $2 AND a.blocked_at IS NULL
                FOR UPDATE OF s
                """, sessionId, now
            ).first, try row.decode(String.self, "client_id") == clientId else {
                throw RefusedRefresh()
            }
            let given = ScopeList.from(text: try row.decode(String.self, "scopes"))
            if let outside = narrowedTo.first(where: { !given.contains($0) }) { throw ScopeNotGiven(scope: outside) }
            let next = OpaqueSecret.generate()
            _ = try connection.query(
                "INSERT INTO identity_refresh_tokens (digest, session_id, generation, issued_at) VALUES ($1, $2, $3, $4)", next.digest, sessionId,
                try used.decode(Int.self, "generation") + 1, now)
            _ = try connection.query(
                "UPDATE identity_sessions SET refreshed_at = $2, expires_at = $3 WHERE id = $1", sessionId, now, now.addingTimeInterval(lifetime))
            let session = SignInSession(id: sessionId, personId: try row.decode(String.self, "person_id"), clientId: clientId, scopes: given)
            return .renewed(session, refreshToken: next)
        }
    }

    /// Thrown inside the transaction to roll back marking the token used.
    struct RefusedRefresh: Error {}
    struct ScopeNotGiven: Error {
        let scope: Scope
    }

    /// Ends the session a refresh token of `clientId` belongs to (any of its tokens, used or not);
    /// false when the token is unknown, another client's, or its session is over already.
    public static func revoke(_ token: String, clientId: String, now: Date, on connection: PostgresConnection) throws -> Bool {
        guard OpaqueSecret.isWellFormed(token) else { return false }
        return try connection.query(
            """
            UPDATE identity_sessions s SET ended_at = $3, end_reason = 'revoked'
            FROM identity_refresh_tokens t
            WHERE t.digest = $1 AND s.id = t.session_id AND s.client_id = $2 AND s.ended_at IS NULL
            RETURNING 1
            """, OpaqueSecret(text: token).digest, clientId, now
        ).count == 1
    }

    public static func end(sessionId: UUID, reason: String, now: Date, on connection: PostgresConnection) throws {
        _ = try connection.query(
            "UPDATE identity_sessions SET ended_at = $2, end_reason = $3 WHERE id = $1 AND ended_at IS NULL", sessionId, now, reason)
    }

    /// Ends every session of the person (a block, a new password); the number ended.
    @discardableResult
    public static func endAll(personId: String, reason: String, now: Date, on connection: PostgresConnection) throws -> Int {
        try connection.query(
            "UPDATE identity_sessions SET ended_at = $2, end_reason = $3 WHERE person_id = $1 AND ended_at IS NULL RETURNING 1", personId, now, reason
        ).count
    }

    /// Deletes sessions (and their tokens) that ended or expired before `before`.
    public static func purge(before: Date, on connection: PostgresConnection) throws {
        _ = try connection.query("DELETE FROM identity_sessions WHERE expires_at < $1 OR ended_at < $1", before)
    }
}

/// The step between a right password and its code (`identity_challenges`).
public struct Challenge: Sendable {
    public var personId: String
    public var clientId: String
    public var scopes: [Scope]
    /// Codes that may still be tried after this one.
    public var attemptsLeft: Int
}

public enum Challenges {
    public static func create(
        personId: String, clientId: String, scopes: [Scope], attempts: Int, lifetime: TimeInterval, now: Date, on connection: PostgresConnection
    ) throws -> OpaqueSecret {
        let challenge = OpaqueSecret.generate()
        _ = try connection.query(
            "INSERT INTO identity_challenges (digest, person_id, client_id, scopes, attempts_left, expires_at) VALUES ($1, $2, $3, $4, $5, $6)",
            challenge.digest, personId, clientId, ScopeList.text(scopes), attempts, now.addingTimeInterval(lifetime))
        return challenge
    }

    /// Takes one attempt of the challenge; nil when it is unknown, used, spent or expired.
    public static func attempt(_ challenge: String, now: Date, on connection: PostgresConnection) throws -> Challenge? {
        guard OpaqueSecret.isWellFormed(challenge) else { return nil }
        return try connection.query(
            """
            UPDATE identity_challenges SET attempts_left = attempts_left - 1
            WHERE digest = $1 AND expires_at > $2 AND attempts_left > 0
            RETURNING person_id, client_id, scopes, attempts_left
            """, OpaqueSecret(text: challenge).digest, now
        ).first.map { row in
            Challenge(
                personId: try row.decode(String.self, "person_id"), clientId: try row.decode(String.self, "client_id"),
                scopes: ScopeList.from(text: try row.decode(String.self, "scopes")), attemptsLeft: try row.decode(Int.self, "attempts_left"))
        }
    }

    /// Destroys the challenge; false when it was gone already (another request used it).
    @discardableResult
    public static func destroy(_ challenge: String, on connection: PostgresConnection) throws -> Bool {
        try connection.query("DELETE FROM identity_challenges WHERE digest = $1 RETURNING 1", OpaqueSecret(text: challenge).digest).count == 1
    }

    public static func purge(before: Date, on connection: PostgresConnection) throws {
        _ = try connection.query("DELETE FROM identity_challenges WHERE expires_at < $1", before)
    }
}

/// What Apple posted to `/oauth/apple/return`, its ID token verified, kept for the handoff.
public struct Handoff: Sendable, Hashable {
    public var claims: SocialClaims
    public var authorizationCode: String?
}

public enum Handoffs {
    public static func create(_ handoff: Handoff, lifetime: TimeInterval, now: Date, on connection: PostgresConnection) throws -> OpaqueSecret {
        let secret = OpaqueSecret.generate()
        let claims = handoff.claims
        _ = try connection.query(
            """
            INSERT INTO identity_handoffs (digest, subject, email, email_verified, nonce, audience, given_name, family_name, authorization_code, expires_at)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
            """, secret.digest, claims.subject, claims.email, claims.emailVerified, claims.nonce, claims.audience, claims.givenName,
            claims.familyName, handoff.authorizationCode, now.addingTimeInterval(lifetime))
        return secret
    }

    /// The handoff, used up: a second exchange of the same one finds nothing.
    public static func take(_ handoff: String, now: Date, on connection: PostgresConnection) throws -> Handoff? {
        guard OpaqueSecret.isWellFormed(handoff) else { return nil }
        return try connection.query(
            "DELETE FROM identity_handoffs WHERE digest = $1 RETURNING *, expires_at > $2 AS live", OpaqueSecret(text: handoff).digest, now
        ).first.flatMap { row -> Handoff? in
            guard try row.decode(Bool.self, "live") else { return nil }
            return Handoff(
                claims: SocialClaims(
                    provider: .apple, subject: try row.decode(String.self, "subject"), audience: try row.decode(String.self, "audience"),
                    email: try row.decode(String?.self, "email"), emailVerified: try row.decode(Bool.self, "email_verified"),
                    nonce: try row.decode(String?.self, "nonce"), givenName: try row.decode(String.self, "given_name"),
                    familyName: try row.decode(String.self, "family_name")),
                authorizationCode: try row.decode(String?.self, "authorization_code"))
        }
    }

    public static func purge(before: Date, on connection: PostgresConnection) throws {
        _ = try connection.query("DELETE FROM identity_handoffs WHERE expires_at < $1", before)
    }
}
