import Crypto
import Encodings
import Foundation
import HTTP2Client
import InboxAPI
import InboxDomain
import Lifecycle
import PostgresClient

/// Exchanges Apple's `authorization_code` for the refresh token Apple revokes when the account is
/// deleted (App Store Review Guideline 5.1.1(v)), after the sign-in has been answered: a code that
/// cannot be exchanged (expired, Apple unreachable, no key configured) is logged and never fails a
/// sign-in.
public final class AppleCodeExchanger: Sendable {
    let configuration: AppleCodeExchange
    let key: ES256PrivateKey
    let client: PostgresClient
    let log: Logger
    private let http: HTTP2Client

    public init(configuration: AppleCodeExchange, client: PostgresClient, caFile: String?, log: Logger) throws {
        self.configuration = configuration
        key = try ES256PrivateKey(pem: configuration.keyPEM)
        self.client = client
        self.log = log
        http = try HTTP2Client(configuration: .init(caFile: caFile, connectTimeout: .seconds(5), maxResponseBytes: 64 << 10, engine: .libcurl))
    }

    deinit { http.shutdown() }

    /// The client secret Apple asks for: an ES256 JWT by our team's key, valid five minutes.
    func clientSecret(clientId: String, now: Date) throws -> String {
        let issuedAt = Int64(now.timeIntervalSince1970)
        let header = Base64URL.encode(JSONAPI.bytes(.object(["alg": .string("ES256"), "kid": .string(configuration.keyId)])))
        let claims = Base64URL.encode(
            JSONAPI.bytes(
                .object([
                    "iss": .string(configuration.teamId), "iat": .integer(issuedAt), "exp": .integer(issuedAt + 300),
                    "aud": .string("https://appleid.apple.com"), "sub": .string(clientId),
                ])))
        let signature = try key.sign(Array("\(header).\(claims)".utf8))
        return "\(header).\(claims).\(Base64URL.encode(signature))"
    }

    /// Exchanges `code` (made for `clientId`, the token's audience) in the background and keeps
    /// the refresh token on the link of `subject`. `webFlow`: the code came through
    /// `/oauth/apple/return`, whose `redirect_uri` Apple wants again.
    public func exchangeLater(code: String, clientId: String, subject: String, webFlow: Bool) {
        Task { [self] in
            do {
                var fields = [
                    ("client_id", clientId), ("client_secret", try clientSecret(clientId: clientId, now: Date())), ("code", code),
                    ("grant_type", "authorization_code"),
                ]
                if webFlow, let redirect = configuration.redirectURI { fields.append(("redirect_uri", redirect)) }
                let response = try await http.send(
                    HTTP2Request(
                        method: "POST", url: configuration.tokenURL,
                        headers: [("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json")],
                        body: Array(FormBody.encode(fields).utf8), timeout: .seconds(15)))
                guard response.status == 200, let answer = try? JSONDecoder().decode(JSONValue.self, from: Data(response.body)),
                    let refreshToken = answer["refresh_token"]?.stringValue
                else {
                    log.warning("Apple did not exchange an authorization code", metadata: ["status": .int(response.status)])
                    return
                }
                try await client.withConnection { connection in
                    try Accounts.setAppleRefreshToken(subject: subject, token: refreshToken, clientId: clientId, on: connection)
                }
                log.info("exchanged an Apple authorization code")
            } catch {
                log.warning("an Apple authorization code could not be exchanged", metadata: ["error": "\(error)"])
            }
        }
    }
}

extension AppleCodeExchanger {
    /// What one round of `revokeDue` did.
    public struct Revocations: Sendable, Equatable {
        public var revoked = 0
        public var failed = 0
        public var abandoned = 0

        public init(revoked: Int = 0, failed: Int = 0, abandoned: Int = 0) {
            self.revoked = revoked
            self.failed = failed
            self.abandoned = abandoned
        }
    }

    /// The most tries of one token before it is given up (logged as an error): about a week of backoff.
    static let revocationAttempts = 30

    /// Revokes the refresh tokens of closed accounts that are due (`identity_apple_revocations`),
    /// at most `limit` of them: each is leased for a minute first (so several nodes never present
    /// one token at once), then presented to Apple's revoke endpoint; `200` deletes it, anything
    /// else tries again after a backoff (30 s doubling, at most 6 h).
    public func revokeDue(limit: Int = 20, now: Date = Date()) async throws -> Revocations {
        let due = try await client.withConnection { connection in
            try connection.query(
                """
                UPDATE identity_apple_revocations r SET attempts = attempts + 1, next_attempt_at = $1::timestamptz + interval '1 minute'
                FROM (SELECT id FROM identity_apple_revocations WHERE next_attempt_at <= $1 ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED) d
                WHERE r.id = d.id RETURNING r.id, r.client_id, r.token, r.attempts
                """, now, limit
            ).map { (try $0.decode(Int64.self, "id"), try $0.decode(String.self, "client_id"), try $0.decode(String.self, "token"), try $0.decode(Int.self, "attempts")) }
        }
        var outcome = Revocations()
        for (id, clientId, token, attempts) in due {
            var failure: String?
            do {
                let response = try await http.send(
                    HTTP2Request(
                        method: "POST", url: configuration.revokeURL,
                        headers: [("Content-Type", "application/x-www-form-urlencoded")],
                        body: Array(
                            FormBody.encode([
                                ("client_id", clientId), ("client_secret", try clientSecret(clientId: clientId, now: now)), ("token", token),
                                ("token_type_hint", "refresh_token"),
                            ]).utf8), timeout: .seconds(15)))
                if response.status != 200 { failure = "Apple answered \(response.status): \(String(decoding: response.body.prefix(200), as: UTF8.self))" }
            } catch {
                failure = "\(error)"
            }
            let failed = failure
            try await client.withConnection { connection in
                if let failure = failed, attempts < Self.revocationAttempts {
                    let backoff = min(30 * pow(2, Double(attempts - 1)), 6 * 3600)
                    _ = try connection.query(
                        "UPDATE identity_apple_revocations SET next_attempt_at = $2, last_error = $3 WHERE id = $1", id, now.addingTimeInterval(backoff),
                        String(failure.prefix(500)))
                } else {
                    _ = try connection.query("DELETE FROM identity_apple_revocations WHERE id = $1", id)
                }
            }
            switch (failure, attempts < Self.revocationAttempts) {
            case (nil, _):
                outcome.revoked += 1
                log.info("revoked a closed account's Apple refresh token")
            case (let failure?, true):
                outcome.failed += 1
                log.warning("Apple did not revoke a closed account's refresh token; trying again later", metadata: ["error": "\(failure)", "attempts": .int(attempts)])
            case (let failure?, false):
                outcome.abandoned += 1
                log.error("gave up revoking a closed account's Apple refresh token", metadata: ["error": "\(failure)", "attempts": .int(attempts)])
            }
        }
        return outcome
    }
}

/// Revokes closed accounts' Apple refresh tokens every `interval` (`AppleCodeExchanger.revokeDue`),
/// on every identity node that has the Sign in with Apple key.
public struct AppleRevocations: Service {
    let exchanger: AppleCodeExchanger
    let interval: Duration
    let log: Logger

    public init(exchanger: AppleCodeExchanger, interval: Duration = .seconds(30), log: Logger) {
        self.exchanger = exchanger
        self.interval = interval
        self.log = log
    }

    /// One round, as `run` does every `interval`.
    public func revokeDue(now: Date = Date()) async throws -> AppleCodeExchanger.Revocations {
        try await exchanger.revokeDue(now: now)
    }

    public func run() async throws {
        while !Task.isCancelled {
            do {
                while try await exchanger.revokeDue().revoked == 20 {}
            } catch is CancellationError {
                return
            } catch {
                log.warning("revoking Apple refresh tokens failed; it runs again later", metadata: ["error": "\(error)"])
            }
            do {
                try await Task.sleep(for: interval)
            } catch {
                return
            }
        }
    }
}
