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
                    log.warning("Apple did not exchange an authorization code", metadata: ["status": String(response.status)])
                    return
                }
                try await client.withConnection { connection in
                    try Accounts.setAppleRefreshToken(subject: subject, token: refreshToken, on: connection)
                }
                log.info("exchanged an Apple authorization code")
            } catch {
                log.warning("an Apple authorization code could not be exchanged", metadata: ["error": "\(error)"])
            }
        }
    }
}
