import Foundation
import InboxTesting
import PostgresClient
import Testing

@Suite struct DecodingTests {
    struct Watch: Codable, Sendable, Equatable {
        var reference: String
        var priceCents: Int
        var tags: [String]
    }

    @Test func scalarsRoundTripThroughParameters() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let id = UUID()
        let date = Date(timeIntervalSince1970: 1_780_000_000.123456)
        let values = try await db.client.withConnection { connection in
            let row = try #require(
                try connection.query(
                    "SELECT $1::bigint AS i, $2::int AS j, $3::text AS t, $4::bool AS b, $5::uuid AS u, $6::timestamptz AS d, $7::float8 AS f",
                    Int64.max, Int32.min, "Oyster Perpetual — 36 mm", true, id, date, 2.5
                ).first)
            return (
                try row.decode(Int64.self, "i"), try row.decode(Int32.self, "j"), try row.decode(String.self, "t"),
                try row.decode(Bool.self, "b"), try row.decode(UUID.self, "u"), try row.decode(Date.self, "d"),
                try row.decode(Double.self, "f")
            )
        }
        #expect(values.0 == Int64.max)
        #expect(values.1 == Int32.min)
        #expect(values.2 == "Oyster Perpetual — 36 mm")
        #expect(values.3 == true)
        #expect(values.4 == id)
        #expect(abs(values.5.timeIntervalSince1970 - date.timeIntervalSince1970) < 0.000_001)
        #expect(values.6 == 2.5)
    }

    /// UUIDs are read digit by digit: what is not PostgreSQL's `8-4-4-4-12` text is refused.
    @Test func uuidTextIsReadOnlyInItsOneShape() throws {
        let id = UUID(uuidString: "9F2C4E1A-07B3-4D5E-8A6F-112233445566")!
        #expect(try UUID.decode(postgresText: "9f2c4e1a-07b3-4d5e-8a6f-112233445566", type: .uuid) == id)
        #expect(try UUID.decode(postgresText: "9F2C4E1A-07B3-4D5E-8A6F-112233445566", type: .uuid) == id)
        #expect(id.postgresText == "9f2c4e1a-07b3-4d5e-8a6f-112233445566")
        for malformed in [
            "", "9f2c4e1a07b34d5e8a6f112233445566", "9f2c4e1a-07b3-4d5e-8a6f-11223344556", "9f2c4e1a-07b3-4d5e-8a6f-1122334455667",
            "9f2c4e1a_07b3-4d5e-8a6f-112233445566", "9f2c4e1a-07b3-4d5e-8a6f-11223344556g", "{9f2c4e1a-07b3-4d5e-8a6f-1122334455}",
        ] {
            #expect(throws: (any Error).self, "\(malformed)") { try UUID.decode(postgresText: malformed, type: .uuid) }
        }
    }

    @Test func timestampsFromTheServerDecodeInUTC() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let date = try await db.client.withConnection { connection in
            try connection.query("SELECT '2026-11-29 11:23:03.5+02'::timestamptz").scalar(Date.self)
        }
        #expect(date.timeIntervalSince1970 == 1_795_944_183.5)  // 2026-11-29 09:23:03.5 UTC
    }

    @Test func jsonbRoundTripsCodableValues() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let watch = Watch(reference: "126610LN", priceCents: 1_250_000, tags: ["steel", "\"quoted\""])
        let back = try await db.client.withConnection { connection in
            try connection.query("SELECT $1::jsonb AS doc", PostgresJSON(watch)).scalar(PostgresJSON<Watch>.self).value
        }
        #expect(back == watch)
    }

    @Test func arraysRoundTripWithQuotesCommasAndNulls() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let texts = ["plain", "with, comma", "with \"quote\"", "back\\slash", "NULL", "{braces}", ""]
        let (textsBack, numbers, optionals) = try await db.client.withConnection { connection in
            (
                try connection.query("SELECT $1::text[]", texts).scalar([String].self),
                try connection.query("SELECT ARRAY[1, 2, 3]::bigint[]").scalar([Int64].self),
                try connection.query("SELECT ARRAY['a', NULL]::text[]").scalar([String?].self)
            )
        }
        #expect(textsBack == texts)
        #expect(numbers == [1, 2, 3])
        #expect(optionals == ["a", nil])
    }

    @Test func byteaRoundTrips() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let bytes = Data((0...255).map { UInt8($0) })
        let back = try await db.client.withConnection { connection in try connection.query("SELECT $1::bytea", bytes).scalar(Data.self) }
        #expect(back == bytes)
    }

    @Test func aTypeMismatchNamesTheColumn() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let error = await #expect(throws: PostgresError.self) {
            try await db.client.withConnection { connection in
                try connection.query("SELECT 42::bigint AS unread_count").first?.decode(Bool.self, "unread_count")
            }
        }
        #expect(error?.code == .typeMismatch)
        #expect(error?.message.contains("unread_count") == true)
    }

    @Test func nullIntoANonOptionalNamesTheColumnAndOptionalsTakeIt() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let error = await #expect(throws: PostgresError.self) {
            try await db.client.withConnection { connection in
                try connection.query("SELECT NULL::text AS body").first?.decode(String.self, "body")
            }
        }
        #expect(error?.code == .unexpectedNull)
        #expect(error?.message.contains("body") == true)
        let optional = try await db.client.withConnection { connection in
            try connection.query("SELECT NULL::text AS body").first?.decode(String?.self, "body")
        }
        #expect(optional == .some(nil))
    }

    @Test func anUnknownColumnIsAnErrorNamingIt() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let error = await #expect(throws: PostgresError.self) {
            try await db.client.withConnection { connection in try connection.query("SELECT 1 AS a").first?.decode(Int.self, "b") }
        }
        #expect(error?.code == .columnNotFound)
        #expect(error?.message.contains("\"b\"") == true)
    }

    @Test func valuesNeverTravelInsideTheSQLText() async throws {
        let db = try await TestDatabase.make(migrated: false)
        defer { Task { await db.drop() } }
        let hostile = "'); DROP TABLE pg_class; --"
        let back = try await db.client.withConnection { connection in try connection.query("SELECT $1::text", hostile).scalar(String.self) }
        #expect(back == hostile)
    }

    @Test func aURLWithAnotherSchemeIsRefusedWithASentence() {
        #expect(throws: PostgresError.self) { try PostgresConfiguration(url: "mysql://localhost/inbox") }
        let redacted = try? PostgresConfiguration(url: "postgres://inbox:secret@db:5432/inbox").redactedDescription
        #expect(redacted == "postgres://inbox:***@db:5432/inbox")
    }
}
