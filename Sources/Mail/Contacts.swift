import Foundation
import InboxDomain
import PostgresClient

/// Where one person's mail goes and in which language: state of the `contacts` table
/// (sql/013_contacts.sql), set and deleted by other tiers through the internal API, never in the
/// event log.
public struct Contact: Sendable, Hashable {
    public var personId: String
    public var address: MailAddress
    public var language: Language
    public var updatedAt: Date

    public init(personId: String, address: MailAddress, language: Language, updatedAt: Date = Date()) {
        self.personId = personId
        self.address = address
        self.language = language
        self.updatedAt = updatedAt
    }
}

/// Reading and writing `contacts`.
public enum Contacts {
    /// Sets `personId`'s contact; true when it is new.
    @discardableResult
    public static func set(personId: String, address: MailAddress, language: Language, on connection: PostgresConnection) throws -> (contact: Contact, created: Bool) {
        let row = try connection.query(
            """
            INSERT INTO contacts AS c (person_id, address, language) VALUES ($1, $2, $3)
            ON CONFLICT (person_id) DO UPDATE SET address = excluded.address, language = excluded.language, updated_at = clock_timestamp()
            RETURNING updated_at, (xmax = 0) AS created
            """, personId, address.address, language.rawValue
        ).first
        guard let row else { throw PostgresError(.clientFailure, "Setting a contact returned no row.") }
        let contact = Contact(personId: personId, address: address, language: language, updatedAt: try row.decode(Date.self, "updated_at"))
        return (contact, try row.decode(Bool.self, "created"))
    }

    /// `personId`'s contact, or nil. A stored address that no longer parses (it cannot be
    /// written so, but a table can be edited by hand) reads as no contact.
    public static func get(personId: String, on connection: PostgresConnection) throws -> Contact? {
        try contacts(for: [personId], on: connection)[personId]
    }

    /// The contacts of `people` that have one, by person.
    public static func contacts(for people: [String], on connection: PostgresConnection) throws -> [String: Contact] {
        if people.isEmpty { return [:] }
        var found: [String: Contact] = [:]
        for row in try connection.query("SELECT person_id, address, language, updated_at FROM contacts WHERE person_id = ANY($1)", people) {
            let person = try row.decode(String.self, "person_id")
            guard let address = try? MailAddress(try row.decode(String.self, "address")),
                let language = Language(rawValue: try row.decode(String.self, "language"))
            else { continue }
            found[person] = Contact(personId: person, address: address, language: language, updatedAt: try row.decode(Date.self, "updated_at"))
        }
        return found
    }

    /// Deletes `personId`'s contact; true when there was one.
    @discardableResult
    public static func delete(personId: String, on connection: PostgresConnection) throws -> Bool {
        (try connection.query("DELETE FROM contacts WHERE person_id = $1", personId).affectedRows ?? 0) > 0
    }
}
