import Foundation
import InboxDomain

/// An example of the body of each operation that takes one, by `METHOD pattern`, put in the
/// OpenAPI document as the body schema's `examples`: what a client generator shows, and what
/// schemathesis sends first (its examples phase), so each must be a request the route takes (or
/// refuses only for what the schema cannot say, `scripts/fuzz.toml`). `make test` checks that no
/// body goes without one and that each is valid against its schema (scripts/check-answers.py).
enum OpenAPIExamples {
    static let requests: [String: String] = [
        "PATCH /v1/me/notifications/{id}": #"{"data":{"type":"notifications","id":"2b1c8f0e-5d1a-4c3e-9b7a-0f6e2d4c8a19","attributes":{"read":true}}}"#,
        "POST /v1/me/devices":
            #"{"data":{"type":"devices","attributes":{"platform":"ios","pushToken":"740f4707bebcf74f9b7c25d48e3358945f6aa01da5ddb387462c7eaf61bb78ad","appId":"com.wristler.app","appVersion":"2.4.0","name":"Anna's iPhone","locale":"nl-NL","apnsEnvironment":"production"}}}"#,
        "PATCH /v1/me/devices/{id}": #"{"data":{"type":"devices","id":"7d3f9c2a-1e4b-4f6a-8c5d-2b9e0a1f3c47","attributes":{"locale":"de-DE","appVersion":"2.5.0"}}}"#,
        "PATCH /v1/me/notification-preferences":
            #"{"data":{"type":"notification-preferences","attributes":{"categories":{"messages":{"push":false},"saved_watches":{"email":false}}}}}"#,
        "POST /v1/me/saved-searches":
            #"{"data":{"type":"saved-searches","attributes":{"name":"Daytona under 20k","query":{"brand":"Rolex","model":"Daytona","maxPrice":20000},"interval":"daily","push":true}}}"#,
        "PATCH /v1/me/saved-searches/{id}": #"{"data":{"type":"saved-searches","id":"5e8a2c1d-3f4b-4a6c-9d7e-1b0f2a3c4d5e","attributes":{"interval":"weekly"}}}"#,
        "POST /v1/conversations": #"{"data":{"type":"conversations","attributes":{"watchId":"w-48213","body":"Is it still available? Does it come with its papers?"}}}"#,
        "PATCH /v1/conversations/{id}": #"{"data":{"type":"conversations","id":"9f2e4c6a-8b1d-8e3f-a5c7-0d2b4f6a8c1e","attributes":{"unread":false}}}"#,
        "POST /v1/conversations/{id}/messages":
            #"{"data":{"type":"messages","attributes":{"body":"Would you take 9,500?","offer":{"amount":950000,"currency":"EUR"}}}}"#,
        "POST /v1/uploads": #"{"data":{"type":"uploads","attributes":{"sourceUrl":"https://images.example.com/watches/48213/dial.jpg"}}}"#,
        "POST /v1/sellers/{sellerId}/quick-replies": #"{"data":{"type":"quick-replies","attributes":{"body":"Thank you! It is still available; we ship insured within two days."}}}"#,
        "PATCH /v1/sellers/{sellerId}/quick-replies/{id}":
            #"{"data":{"type":"quick-replies","id":"4c2a1e3f-5b6d-4e7f-8a9b-0c1d2e3f4a5b","attributes":{"body":"Thank you! It is still available."}}}"#,
        "POST /v1/me/blocks": #"{"data":{"type":"blocks","relationships":{"blocked":{"data":{"type":"people","id":"p-20931"}}}}}"#,
        "PATCH /v1/me": #"{"data":{"type":"people","attributes":{"givenName":"Anna","familyName":"de Vries","language":"nl"}}}"#,
        "POST /v1/me/closure": #"{"data":{"type":"account-closures","attributes":{"password":"correct horse battery staple"}}}"#,
        "POST /v1/me/linked-sign-ins":
            #"{"data":{"type":"linked-sign-ins","attributes":{"provider":"apple","idToken":"eyJraWQiOiJXNldjT0tCIiwiYWxnIjoiUlMyNTYifQ.eyJpc3MiOiJodHRwczovL2FwcGxlaWQuYXBwbGUuY29tIn0.c2lnbmF0dXJl","nonce":"n-4f2a9c1e7b3d"}}}"#,
        "POST /v1/me/second-factor/confirmation": #"{"data":{"type":"second-factors","attributes":{"code":"492039"}}}"#,
        "POST /v1/me/second-factor/removal": #"{"data":{"type":"second-factors","attributes":{"code":"492039"}}}"#,
        "POST /v1/me/recovery-codes": #"{"data":{"type":"second-factors","attributes":{"code":"492039"}}}"#,
        "PUT /internal/v1/contacts/{personId}": #"{"data":{"type":"contacts","id":"p-20931","attributes":{"email":"anna@example.com","language":"nl"}}}"#,
        "POST /internal/v1/events":
            #"{"data":[{"type":"events","attributes":{"stream":"order-o-7781","eventType":"order_paid","payload":{"orderId":"o-7781","buyerId":"p-20931","shopId":"s-112","watchId":"w-48213","amount":{"amount":1250000,"currency":"EUR"}},"idempotencyKey":"orders:o-7781:paid","metadata":{"origin":"web","correlationId":"checkout-5521"}}}]}"#,
        "POST /internal/v1/accounts":
            #"{"data":{"type":"accounts","attributes":{"email":"anna@example.com","password":"correct horse battery staple","givenName":"Anna","familyName":"de Vries"}}}"#,
        "PATCH /internal/v1/accounts/{personId}": #"{"data":{"type":"accounts","id":"p-20931","attributes":{"emailVerified":true}}}"#,
        "POST /oauth/token":
            #"{"grant_type":"urn:wristler:native-login","client_id":"wristler-app","username":"anna@example.com","password":"correct horse battery staple","scope":"account:read account:write messages:read messages:write"}"#,
        "POST /oauth/revoke": #"{"token":"rt.5c1e9a7b3d2f4e6a8c0b","token_type_hint":"refresh_token","client_id":"wristler-app"}"#,
        "POST /oauth/apple/return": #"{"code":"c3f1a9e7b5d2","id_token":"eyJhbGciOiJSUzI1NiJ9.e30.c2ln","state":"s-81c2"}"#,
    ]

    /// The example of `key`'s body, parsed.
    static func request(_ key: String) -> JSONValue? {
        guard let text = requests[key] else { return nil }
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) else {
            preconditionFailure("the OpenAPI example of \(key) is not JSON")
        }
        return value
    }
}
