import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import PostgresClient

/// The person's linked Apple and Google sign-ins (`account-security:write`), beside `/v1/me`:
///
/// - `GET /v1/me/linked-sign-ins`: each linked provider and when it was linked.
/// - `POST /v1/me/linked-sign-ins` with `provider`, `idToken`, `nonce`: the token is checked as
///   the social grant checks it (signature, audience, expiry, the nonce exactly as sent) and its
///   subject linked; `409` when that subject is another account's or the provider is linked already.
/// - `DELETE /v1/me/linked-sign-ins/{provider}`: unlinks, but never the last way the person can
///   sign in (no password and no other link: `409 last_sign_in_method`).
///
/// Linking and unlinking are `sign_in_linked` / `sign_in_unlinked` in the same transaction; both
/// count against the account's code limit, as a guesser would hammer them.
public enum LinkedSignInRoutes {
    static let type = "linked-sign-ins"

    public static func routes(
        client: PostgresClient, social: SocialTokenVerifier?, validator: EventValidator?,
        limit: AttemptLimit = IdentityConfiguration().signInPerAccount, now: @escaping @Sendable () -> Date = { Date() }
    ) -> [Route] {
        let limits = RateLimits()
        @Sendable func take(_ personId: String) throws {
            try limits.takeForAccount("link", personId, limit: limit, now: now(), client: client, tooMany: "Too many sign-ins linked or unlinked for this account")
        }
        let body = Schema.resourceDocument(
            type: type,
            attributes: [
                "provider": Schema.choice(["apple", "google"]), "idToken": Schema.string(maximumLength: 8192),
                "nonce": Schema.string(maximumLength: 512),
            ], required: ["provider", "idToken", "nonce"], id: false)
        return [
            Route(
                .get, "/v1/me/linked-sign-ins", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: RouteDescription("The Apple and Google sign-ins linked to the account.").returning(Schema.list(Self.link, links: false))
            ) { context in
                let personId = context.token?.subject ?? ""
                let links = try client.withConnectionBlocking(retryIfFoundDead: true) { connection in try Self.links(personId, on: connection) }
                return JSONAPI.response(.object(["data": .array(links.map(Self.resource))]))
            },
            Route(
                .post, "/v1/me/linked-sign-ins", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: RouteDescription(
                    "Links a sign-in with Apple or Google: its ID token and the nonce given to the SDK.", body: body,
                    responses: [201: .document(Schema.document)]).returning(Schema.single(Self.link))
            ) { context in
                let personId = context.token?.subject ?? ""
                let data = try context.resourceDocument()
                try AccountRoutes.requireType(data, type)
                let fields = try AccountRoutes.Fields(data, allowed: ["provider", "idToken", "nonce"])
                let claims = try Self.verifiedClaims(fields, social: social, now: now()) { try take(personId) }
                let provider = claims.provider
                let link = try client.withConnectionBlocking { connection in
                    try connection.transaction { connection -> Link in
                        guard try Accounts.find(personId: personId, on: connection) != nil else { throw MeRoutes.noAccount }
                        // The account's row, locked: two links of one person at once are taken one after the other.
                        _ = try connection.query("SELECT 1 FROM identity_accounts WHERE person_id = $1 FOR UPDATE", personId)
                        if let owner = try Accounts.linked(provider: provider, subject: claims.subject, on: connection) {
                            guard owner.personId != personId else {
                                throw APIError(status: 409, code: APIError.Code("already_linked"), detail: "This \(provider.rawValue) sign-in is linked to your account already.")
                            }
                            throw APIError(
                                status: 409, code: APIError.Code("linked_elsewhere"), detail: "This \(provider.rawValue) sign-in belongs to another account.",
                                source: .pointer("/data/attributes/idToken"))
                        }
                        if try Self.links(personId, on: connection).contains(where: { $0.provider == provider.rawValue }) {
                            throw APIError(
                                status: 409, code: APIError.Code("already_linked"),
                                detail: "Another \(provider.rawValue) sign-in is linked to your account: unlink it first.")
                        }
                        try Accounts.link(provider: provider, subject: claims.subject, personId: personId, now: now(), on: connection)
                        // Another account linking the same subject at the same moment wins the row: this link did nothing.
                        guard let link = try Self.links(personId, on: connection).first(where: { $0.provider == provider.rawValue }) else {
                            throw APIError(
                                status: 409, code: APIError.Code("linked_elsewhere"), detail: "This \(provider.rawValue) sign-in belongs to another account.",
                                source: .pointer("/data/attributes/idToken"))
                        }
                        try MeRoutes.append(SignInLinked(personId: personId, provider: provider.rawValue), by: personId, context, validator, on: connection)
                        return link
                    }
                }
                return JSONAPI.response(status: 201, .object(["data": Self.resource(link)]))
                    .locating("/v1/me/linked-sign-ins/" + JSONAPI.pathSegment(link.provider))
            },
            Route(
                .delete, "/v1/me/linked-sign-ins/{provider}", access: .signedIn(scope: .accountSecurityWrite),
                describedAs: .noContent("Unlinks a sign-in with Apple or Google, unless it is the last way to sign in.")
            ) { context in
                let personId = context.token?.subject ?? ""
                guard let provider = SocialProvider(rawValue: context.parameters["provider"] ?? "") else { throw Self.notLinked }
                try take(personId)
                try client.withConnectionBlocking { connection in
                    try connection.transaction { connection in
                        guard let account = try Accounts.find(personId: personId, on: connection) else { throw MeRoutes.noAccount }
                        // The account's row, locked: two unlinks at once cannot each leave the other one last.
                        _ = try connection.query("SELECT 1 FROM identity_accounts WHERE person_id = $1 FOR UPDATE", personId)
                        let links = try Self.links(personId, on: connection)
                        guard links.contains(where: { $0.provider == provider.rawValue }) else { throw Self.notLinked }
                        guard account.passwordHash != nil || links.count > 1 else {
                            throw APIError(
                                status: 409, code: APIError.Code("last_sign_in_method"),
                                detail: "This is the last way to sign in to the account: set a password or link another first.")
                        }
                        _ = try connection.query(
                            "DELETE FROM identity_social_links WHERE person_id = $1 AND provider = $2", personId, provider.rawValue)
                        try MeRoutes.append(SignInUnlinked(personId: personId, provider: provider.rawValue), by: personId, context, validator, on: connection)
                    }
                }
                return HTTPResponse(status: 204)
            },
        ]
    }

    static let notLinked = APIError(status: 404, code: .notFound, detail: "No sign-in with that provider is linked to your account.")

    struct Link {
        var provider: String
        var linkedAt: Date
    }

    /// The document's `provider`, `idToken` and `nonce`, the token checked as the social grant
    /// checks it (signature, issuer, audience, expiry, the nonce exactly as sent); `take` runs
    /// (an attempt of a limit) once the fields are well formed. Each refusal is a `422` at its field.
    static func verifiedClaims(
        _ fields: AccountRoutes.Fields, social: SocialTokenVerifier?, now: Date, take: () throws -> Void
    ) throws -> SocialClaims {
        func required(_ name: String) throws -> String {
            guard let value = try fields.string(name), !value.isEmpty else {
                throw APIError(status: 422, code: .missingField, detail: "\(name) is required.", source: .pointer("/data/attributes/\(name)"))
            }
            return value
        }
        guard let provider = SocialProvider(rawValue: try required("provider")) else {
            throw APIError(status: 422, code: .invalidField, detail: "provider is apple or google.", source: .pointer("/data/attributes/provider"))
        }
        let idToken = try required("idToken")
        let nonce = try required("nonce")
        for (name, value, limit) in [("idToken", idToken, 8192), ("nonce", nonce, 512)] where value.unicodeScalars.count > limit {
            throw APIError(status: 422, code: .invalidField, detail: "\(name) is at most \(limit) characters.", source: .pointer("/data/attributes/\(name)"))
        }
        guard let social, social.isConfigured(provider) else {
            throw APIError(
                status: 422, code: .invalidField, detail: "Sign in with \(provider.rawValue) is not configured on this server.",
                source: .pointer("/data/attributes/provider"))
        }
        try take()
        let verified = Result { () throws(OAuthError) -> SocialClaims in try social.verify(idToken, provider: provider, now: now) }
        guard case .success(let claims) = verified else {
            if case .failure(let error) = verified, error.status == 503 {
                throw APIError(
                    status: 503, code: APIError.Code("provider_unavailable"), detail: "The provider's keys cannot be had now; try again.",
                    headers: [("Retry-After", "5")])
            }
            let reason = if case .failure(let error) = verified { error.description } else { nil as String? }
            throw APIError(
                status: 422, code: .invalidField, detail: "The ID token is refused: \(reason ?? "not valid").",
                source: .pointer("/data/attributes/idToken"))
        }
        guard let tokenNonce = claims.nonce, tokenNonce.utf8.elementsEqual(nonce.utf8) else {
            throw APIError(status: 422, code: .invalidField, detail: "The token's nonce is not the one sent with it.", source: .pointer("/data/attributes/nonce"))
        }
        return claims
    }

    static func links(_ personId: String, on connection: PostgresConnection) throws -> [Link] {
        try connection.query(
            "SELECT provider, min(created_at) AS linked_at FROM identity_social_links WHERE person_id = $1 GROUP BY provider ORDER BY provider", personId
        ).map { Link(provider: try $0.decode(String.self, "provider"), linkedAt: try $0.decode(Date.self, "linked_at")) }
    }

    static func resource(_ link: Link) -> JSONValue {
        .object([
            "type": .string(type), "id": .string(link.provider),
            "attributes": .object(["provider": .string(link.provider), "linkedAt": .string(MeRoutes.timestamp(link.linkedAt))]),
        ])
    }
}

extension LinkedSignInRoutes {
    static let link = Schema.resource("LinkedSignIn", type: type, attributes: ["provider": Schema.choice(["apple", "google"]), "linkedAt": Schema.timestamp])
}
