import Foundation
import HTTPServer
import InboxDomain
import Mail
import PostgresClient

/// `/internal/v1/contacts/{personId}`: where a person's mail goes and in which language, set and
/// deleted by the tiers that own accounts (service credential). Addresses are personal data and
/// never enter the event log; they are the `contacts` table's alone (docs/mail.md, "Contacts").
///
/// ```
/// PUT /internal/v1/contacts/p1
/// {"data": {"type": "contacts", "id": "p1", "attributes": {"email": "anna@example.com", "language": "nl"}}}
/// ```
public enum ContactRoutes {
    static let path = "/internal/v1/contacts/{personId}"
    static let type = "contacts"

    public static func routes(client: PostgresClient) -> [Route] {
        [
            Route(
                .put, path, access: .service,
                describedAs: RouteDescription(
                    "Sets a person's mail address and mail language (service credential); 201 when the person had none.",
                    body: Schema.resourceDocument(
                        type: type,
                        attributes: ["email": Schema.string(maximumLength: 254, pattern: Self.addressPattern), "language": Schema.choice(Language.allCases.map(\.rawValue))],
                        required: ["email", "language"], id: true),
                    responses: [200: .document(Schema.document), 201: .document(Schema.document)]).returning(Self.contact)
            ) { context in
                let person = try Self.person(context)
                let data = try context.resourceDocument()
                try Documents.requireType(data, type, id: person)
                let attributes = try Attributes(data, allowed: ["email", "language"])
                let email = try attributes.string("email", required: true, maximumLength: 254)!
                let address: MailAddress
                do {
                    address = try MailAddress(email)
                } catch {
                    throw APIError(
                        status: 422, code: .invalidField, detail: "email must be an address of the form name@example.com (ASCII, at most 254 characters).",
                        source: Attributes.pointer("email"))
                }
                let language = Language(rawValue: try attributes.choice("language", Language.allCases.map(\.rawValue), required: true)!)!
                let (contact, created) = try client.withConnectionBlocking { connection in
                    try Contacts.set(personId: person, address: address, language: language, on: connection)
                }
                let answer = Documents.response(status: created ? 201 : 200, ["data": resource(contact)])
                return created ? answer.locating("/internal/v1/contacts/" + Documents.pathSegment(person)) : answer
            },
            Route(.get, path, access: .service, describedAs: RouteDescription("A person's mail address and language (service credential).").returning(Self.contact)) { context in
                let person = try Self.person(context)
                guard let contact = try client.withConnectionBlocking(retryIfFoundDead: true, { try Contacts.get(personId: person, on: $0) }) else {
                    throw APIError(status: 404, code: .notFound, detail: "\(person) has no contact.")
                }
                return Documents.response(["data": resource(contact)])
            },
            Route(
                .delete, path, access: .service,
                describedAs: RouteDescription(
                    "Deletes a person's contact on the spot (an account closed, an address withdrawn): no mail is addressed to them afterwards, queued or not (service credential). 204 whether or not there was one.",
                    responses: [204: .noContent])
            ) { context in
                let person = try Self.person(context)
                try client.withConnectionBlocking { connection in _ = try Contacts.delete(personId: person, on: connection) }
                return Documents.noContent
            },
        ]
    }

    /// The person of the URL: 1 to 200 characters, no control characters (else 404: no such contact).
    static func person(_ context: RequestContext) throws(APIError) -> String {
        let person = context.parameters["personId"] ?? ""
        guard !person.isEmpty, person.utf8.count <= 200, !person.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) else {
            throw APIError(status: 404, code: .notFound, detail: "There is no such person.")
        }
        return person
    }

    static func resource(_ contact: Contact) -> JSONValue {
        .object([
            "type": .string(type), "id": .string(contact.personId),
            "attributes": .object([
                "email": .string(contact.address.address), "language": .string(contact.language.rawValue),
                "updatedAt": Documents.timestamp(contact.updatedAt),
            ]),
        ])
    }
}

extension ContactRoutes {
    /// `MailAddress.isValid` as a pattern: dot-separated atoms of RFC 5322's atext, at most 64
    /// before the `@`, then DNS labels of letters, digits and inner hyphens.
    static let addressPattern =
        "^(?=[^@]{1,64}@)[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"

    static let contact = Schema.single(
        Schema.resource("Contact", type: type, attributes: ["email": Schema.text, "language": Schema.text, "updatedAt": Schema.timestamp]))
}
