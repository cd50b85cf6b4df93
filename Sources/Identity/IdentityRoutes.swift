import Foundation
import HTTPServer
import InboxAPI
import InboxDomain

/// The identity role's routes, for an `APIServer` of its own (`inbox identity`) or beside the API's
/// (`inbox run`, one host as the app guide has it):
///
/// | route | access | |
/// | --- | --- | --- |
/// | `POST /oauth/token` | open | the token endpoint (OAuth 2.0, form-encoded) |
/// | `POST /oauth/apple/return` | open | Apple's `form_post` of its web flow: `303` to the app's link |
/// | `GET /.well-known/jwks.json` | open | the public keys access tokens are signed with |
/// | `POST /internal/v1/accounts` | service credential | the website's sign-up: a new account |
/// | `GET`, `PATCH /internal/v1/accounts/{personId}` | service credential | an account; its password, verification, block |
///
/// The OAuth routes answer in OAuth's shapes (RFC 6749), never JSON:API; the OpenAPI document
/// describes them with their form bodies and errors (`OAuthSchemas`), docs/identity.md in full.
public enum IdentityRoutes {
    public static let tokenPath = "/oauth/token"
    public static let appleReturnPath = "/oauth/apple/return"
    public static let keysPath = "/.well-known/jwks.json"
    public static let revokePath = "/oauth/revoke"

    public static func routes(endpoint: TokenEndpoint, keys: SigningKeys, administration: AccountAdministration) throws -> [Route] {
        let jwks = JSONAPI.bytes(try keys.jwks)
        return [
            Route(.post, tokenPath, describedAs: OAuthSchemas.token) { context in endpoint.token(context.request) },
            Route(.post, appleReturnPath, describedAs: OAuthSchemas.appleReturn) { context in endpoint.appleReturn(context.request) },
            Route(.post, revokePath, describedAs: OAuthSchemas.revoke) { context in endpoint.revoke(context.request) },
            Route(.get, keysPath, waits: false, describedAs: OAuthSchemas.keys) { _ in
                // Public and rarely changing: caches may keep it a few minutes (a new key is added
                // well before it signs, docs/tokens.md).
                HTTPResponse(status: 200, headers: [("Content-Type", "application/json"), ("Cache-Control", "public, max-age=300")], body: jwks)
            },
        ] + AccountRoutes.routes(administration)
    }

    /// The token endpoint's body limit, answered in OAuth's shape.
    public static let bodyLimits: [HTTPServer.BodyLimit] = [tokenPath, appleReturnPath, revokePath].map { path in
        HTTPServer.BodyLimit(
            method: .post, path: path, maximumBytes: TokenEndpoint.maximumBodyBytes,
            tooLarge: OAuthError.invalidRequest("The body is larger than \(TokenEndpoint.maximumBodyBytes) bytes.").response.withStatus(413))
    }
}

extension HTTPResponse {
    func withStatus(_ status: Int) -> HTTPResponse {
        var response = self
        response.status = status
        return response
    }
}

/// `/internal/v1/accounts`: how accounts come to exist besides Apple and Google (the website's
/// sign-up), and what the website changes of them. JSON:API documents of type `accounts`, for
/// other tiers with a service credential (`INBOX_SERVICE_CREDENTIALS`).
///
/// ```
/// POST /internal/v1/accounts
/// {"data": {"type": "accounts", "attributes": {"email": "anna@example.com", "password": "…", "givenName": "Anna"}}}
/// ```
enum AccountRoutes {
    static let type = "accounts"

    static func routes(_ administration: AccountAdministration) -> [Route] {
        // What a sign-up gives (its id too, for an account another tier already named), and what a change may.
        let creating: [String: JSONValue] = [
            "email": Schema.string(maximumLength: 254, pattern: Accounts.emailPattern), "password": Schema.string(maximumLength: 1024), "givenName": Schema.string(),
            "familyName": Schema.string(), "emailVerified": Schema.boolean,
        ]
        let changing: [String: JSONValue] = [
            "password": Schema.string(maximumLength: 1024), "emailVerified": Schema.boolean, "blocked": Schema.boolean,
            "blockedReason": Schema.string(maximumLength: 1000),
        ]
        return [
            Route(
                .post, "/internal/v1/accounts", access: .service,
                describedAs: RouteDescription(
                    "Makes an account (the website's sign-up; service credential): 201, or 409 when the address has one.",
                    body: Schema.resourceDocument(type: type, attributes: creating, required: ["email"], id: true),
                    responses: [201: .document(Schema.document)]).returning(Self.account)
            ) { context in
                let data = try context.resourceDocument()
                try requireType(data)
                let fields = try Fields(data, allowed: ["email", "password", "givenName", "familyName", "emailVerified"])
                guard let email = try fields.string("email") else {
                    throw APIError(status: 422, code: .missingField, detail: "email is required.", source: .pointer("/data/attributes/email"))
                }
                let origin = context.service.map { "service:\($0)" } ?? "api"
                let account = try run {
                    try administration.create(
                        email: email, password: try fields.string("password"), givenName: try fields.string("givenName") ?? "",
                        familyName: try fields.string("familyName") ?? "", emailVerified: try fields.bool("emailVerified") ?? false,
                        personId: data["id"]?.stringValue, origin: origin == "service:website" ? "web" : origin)
                }
                return JSONAPI.response(status: 201, .object(["data": resource(account)]))
                    .locating("/internal/v1/accounts/" + JSONAPI.pathSegment(account.personId))
            },
            Route(.get, "/internal/v1/accounts/{personId}", access: .service, describedAs: RouteDescription("An account (service credential).").returning(Self.account)) {
                context in
                let personId = context.parameters["personId"] ?? ""
                guard let account = try run({ try administration.find(personId: personId) }) else {
                    throw APIError(status: 404, code: .notFound, detail: "There is no account \(personId.prefix(200)).")
                }
                return JSONAPI.response(.object(["data": resource(account)]))
            },
            Route(
                .patch, "/internal/v1/accounts/{personId}", access: .service,
                describedAs: RouteDescription(
                    "Changes an account (service credential): a new password (every session ends), the address verified, a block.",
                    body: Schema.resourceDocument(type: type, attributes: changing, required: [], id: true)).returning(Self.account)
            ) { context in
                let personId = context.parameters["personId"] ?? ""
                let data = try context.resourceDocument()
                try requireType(data)
                if let id = data["id"]?.stringValue, id != personId {
                    throw APIError(status: 409, code: .idMismatch, detail: "The document's id is not the URL's.", source: .pointer("/data/id"))
                }
                let fields = try Fields(data, allowed: ["password", "emailVerified", "blocked", "blockedReason"])
                try run {
                    guard try administration.find(personId: personId) != nil else { throw AccountError.notFound }
                    if let password = try fields.string("password") { try administration.setPassword(personId: personId, password: password) }
                    if let verified = try fields.bool("emailVerified") { try administration.setEmailVerified(personId: personId, verified) }
                    switch try fields.bool("blocked") {
                    case true?: try administration.block(personId: personId, reason: try fields.string("blockedReason"))
                    case false?: try administration.unblock(personId: personId)
                    case nil: break
                    }
                }
                guard let account = try run({ try administration.find(personId: personId) }) else {
                    throw APIError(status: 404, code: .notFound, detail: "There is no account \(personId.prefix(200)).")
                }
                return JSONAPI.response(.object(["data": resource(account)]))
            },
        ]
    }

    static func resource(_ account: Account) -> JSONValue {
        .object([
            "type": .string(type), "id": .string(account.personId),
            "attributes": .object([
                "email": .string(account.email), "emailVerified": .bool(account.emailVerified), "givenName": .string(account.givenName),
                "familyName": .string(account.familyName), "blocked": .bool(account.isBlocked), "secondFactor": .bool(account.hasSecondFactor),
                "hasPassword": .bool(account.passwordHash != nil),
            ]),
        ])
    }

    /// An account as `resource` writes it.
    static let account = Schema.single(
        Schema.resource(
            "Account", type: type,
            attributes: [
                "email": Schema.text, "emailVerified": Schema.boolean, "givenName": Schema.text, "familyName": Schema.text, "blocked": Schema.boolean,
                "secondFactor": Schema.boolean, "hasPassword": Schema.boolean,
            ]))

    /// `data.type` is `expected` (the accounts' by default), else `409` at `/data/type`.
    static func requireType(_ data: [String: JSONValue], _ expected: String = type) throws(APIError) {
        guard data["type"]?.stringValue == expected else {
            throw APIError(status: 409, code: .typeMismatch, detail: "The resource's type must be \(expected).", source: .pointer("/data/type"))
        }
    }

    /// An account operation's failures as JSON:API answers.
    static func run<T>(_ body: () throws -> T) throws(APIError) -> T {
        do {
            return try body()
        } catch let error as APIError {
            throw error
        } catch AccountError.emailTaken {
            throw APIError(status: 409, code: APIError.Code("email_taken"), detail: "An account with this e-mail address exists.", source: .pointer("/data/attributes/email"))
        } catch AccountError.personIdTaken {
            throw APIError(status: 409, code: APIError.Code("person_id_taken"), detail: "An account with this person id exists.", source: .pointer("/data/id"))
        } catch AccountError.notFound {
            throw APIError(status: 404, code: .notFound, detail: "There is no such account.")
        } catch AccountError.invalid(let reason) {
            throw APIError(status: 422, code: .invalidField, detail: reason, source: .pointer("/data/attributes"))
        } catch {
            throw APIError(status: 500, code: .internalError, detail: "The request failed on our side; it can be retried.", cause: "\(error)")
        }
    }

    /// The attributes of a document: only the named ones, each of its type.
    struct Fields {
        let values: [String: JSONValue]

        init(_ data: [String: JSONValue], allowed: Set<String>) throws(APIError) {
            guard case .object(let attributes)? = data["attributes"] ?? .object([:]) else {
                throw APIError(status: 400, code: .invalidDocument, detail: "attributes must be an object.", source: .pointer("/data/attributes"))
            }
            if let unknown = attributes.keys.sorted().first(where: { !allowed.contains($0) }) {
                throw APIError(
                    status: 422, code: .unknownField, detail: "\(APIError.echoed(unknown)) is not an attribute this route takes.",
                    source: .member(unknown, of: "/data/attributes"))
            }
            values = attributes
        }

        func string(_ name: String) throws(APIError) -> String? {
            switch values[name] {
            case nil, .null?: return nil
            case .string(let text)?: return text
            default:
                throw APIError(status: 422, code: .invalidField, detail: "\(name) must be a string.", source: .pointer("/data/attributes/\(name)"))
            }
        }

        func bool(_ name: String) throws(APIError) -> Bool? {
            switch values[name] {
            case nil, .null?: return nil
            case .bool(let value)?: return value
            default:
                throw APIError(status: 422, code: .invalidField, detail: "\(name) must be true or false.", source: .pointer("/data/attributes/\(name)"))
            }
        }
    }
}

/// How the OpenAPI document describes the OAuth routes: form-encoded bodies (RFC 6749 §4.3, the
/// app guide's grants), OAuth's JSON answers and errors (§5.1, §5.2), Apple's `form_post`.
enum OAuthSchemas {
    static let string = JSONValue.object(["type": .string("string"), "maxLength": .integer(1024)])
    static let idToken = JSONValue.object(["type": .string("string"), "maxLength": .integer(Int64(SocialTokenVerifier.maximumTokenBytes))])

    /// `{error, error_description}` and the members the app guide adds to some.
    static let error = JSONValue.object([
        "type": .string("object"), "required": .array([.string("error")]),
        "properties": .object([
            "error": Schema.text, "error_description": Schema.text,
            "challenge": Schema.text, "challenge_expires_in": Schema.wholeNumber,
            "attempts_remaining": Schema.wholeNumber, "contact_url": Schema.text,
        ]),
    ])

    static let token = RouteDescription(
        "The sign-in (OAuth 2.0 token endpoint): a password and its second factor, Apple or Google, a guest, a refresh (docs/identity.md).",
        headers: [QueryParameter.appIdentity],
        formBody: .object([
            "type": .string("object"), "required": .array([.string("grant_type"), .string("client_id")]),
            "properties": .object([
                "grant_type": Schema.choice([TokenEndpoint.grantPassword, TokenEndpoint.grantSocial, TokenEndpoint.grantGuest, TokenEndpoint.grantRefresh]),
                "client_id": string, "scope": string, "username": string, "password": string, "challenge": string, "otp": string,
                "provider": Schema.choice(["apple", "google"]), "id_token": idToken,
                "nonce": string, "handoff": string, "authorization_code": .object(["type": .string("string"), "maxLength": .integer(2048)]),
                "given_name": string, "family_name": string, "refresh_token": string, "device": string,
                // The app installation's own id, so an owner keeps a sign-in budget of their own (docs/identity.md, "Rate limits").
                "installation_id": .object([
                    "type": .string("string"), "minLength": .integer(8), "maxLength": .integer(128), "pattern": .string("^[A-Za-z0-9._:-]+$"),
                ]),
            ]),
        ]),
        responses: [
            200: .other(
                mediaType: "application/json",
                schema: .object([
                    "type": .string("object"), "required": .array(["access_token", "token_type", "expires_in", "scope"].map(JSONValue.string)),
                    "additionalProperties": .bool(false),
                    "properties": .object([
                        "access_token": Schema.text, "token_type": .object(["type": .string("string"), "const": .string("Bearer")]),
                        "expires_in": Schema.wholeNumber, "scope": Schema.text,
                        "refresh_token": Schema.text,
                    ]),
                ]))
        ],
        errors: .json(error))

    static let appleReturn = RouteDescription(
        "The end of Sign in with Apple's web flow (its form_post): 303 to the app's link with a one-time handoff and state, or error.",
        formBody: .object([
            "type": .string("object"),
            "properties": .object([
                "id_token": idToken,
                "code": string, "state": string, "user": .object(["type": .string("string"), "maxLength": .integer(2048)]), "error": string,
            ]),
        ]),
        responses: [303: .redirect("To the app's link, with handoff and state, or error.")], errors: .json(error))

    static let revoke = RouteDescription(
        "Revokes a refresh token and its session (RFC 7009): 200 whether or not it was known.", headers: [QueryParameter.appIdentity],
        formBody: .object([
            "type": .string("object"), "required": .array([.string("token"), .string("client_id")]),
            "properties": .object(["token": string, "token_type_hint": Schema.choice(["refresh_token", "access_token"]), "client_id": string]),
        ]),
        responses: [200: .noContent], errors: .json(error))

    static let keys = RouteDescription(
        "The public keys access tokens are signed with (a JSON Web Key Set, RFC 7517).",
        responses: [
            200: .other(
                mediaType: "application/json",
                schema: .object([
                    "type": .string("object"), "required": .array([.string("keys")]),
                    "properties": .object([
                        "keys": .object([
                            "type": .string("array"),
                            "items": .object([
                                "type": .string("object"), "required": .array(["kty", "kid"].map(JSONValue.string)),
                                "properties": .object([
                                    "kty": Schema.text, "kid": Schema.text,
                                    "use": Schema.text, "alg": Schema.text,
                                ]),
                            ]),
                        ])
                    ]),
                ]))
        ])
}
