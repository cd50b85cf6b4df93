import EventLog
import Foundation
import InboxDomain
import InboxTesting
import Mail
import Mailer
import PostgresClient
import MailTesting
import Projections

/// The time the tests' mailers see: set by the test, moved forward, never waited for.
final class MovedClock: @unchecked Sendable {
    private let lock = NSLock()
    private var current: Date

    init(_ start: Date) { current = start }

    var now: Date { lock.withLock { current } }

    func set(_ date: Date) { lock.withLock { current = date } }

    func advance(_ seconds: TimeInterval) { lock.withLock { current = current.addingTimeInterval(seconds) } }
}

/// A whole second, so that intervals from it are exact in `Date` and in PostgreSQL's microseconds.
let start = Date(timeIntervalSince1970: (Date().timeIntervalSince1970 + 86_400).rounded(.down))
let hour: TimeInterval = 3600

let signer = try! UnsubscribeLink(keys: [try! UnsubscribeLink.Key(version: 1, secret: [UInt8](repeating: 5, count: 32))], current: 1)
let sender = try! MailAddress("notifications@wristler.example", displayName: "Wristler")

extension TestDatabase {
    /// Appends `events` in order and waits until every projection has applied them.
    func appendAndProject(_ events: [any CatalogueEvent]) async throws {
        _ = try await store.append(try events.map { try NewEvent(catalogueEvent: $0) })
        try await withProjectors { try await self.waitUntilProjected() }
    }

    func setContact(_ person: String, _ address: String, _ language: Language) async throws {
        try await client.withConnection { connection in
            _ = try Contacts.set(personId: person, address: try MailAddress(address), language: language, on: connection)
        }
    }

    /// One round of `mailer` on a pooled connection.
    @discardableResult
    func round(_ mailer: MailSender, limit: Int = 100) async throws -> MailSender.Round {
        try await client.withConnection { connection in try mailer.round(limit: limit, on: connection) }
    }

    func mailCounters() async throws -> [String: Int64] {
        try await client.withConnection { try MailOutboxStore.counters(on: $0) }
    }

    func queued(_ person: String) async throws -> [String] {
        try await client.withConnection { connection in
            try connection.query("SELECT event FROM mail_queue WHERE person_id = $1 ORDER BY outbox_id", person).map { try $0.decode(String.self, at: 0) }
        }
    }
}

/// The `.eml` files a folder transport wrote, oldest first, as Python reads them.
func mails(in folder: URL) throws -> [ParsedMail] {
    // Not the hidden `.tmp-…` name a mail is written under before its rename.
    let names = ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).filter { $0.hasSuffix(".eml") && !$0.hasPrefix(".") }.sorted()
    return try names.map { try ParsedMail.parse(file: folder.appendingPathComponent($0).path) }
}

extension ParsedMail {
    var text: String { parts.first { $0.contentType == "text/plain" }?.content ?? "" }
    var html: String { parts.first { $0.contentType == "text/html" }?.content ?? "" }
}

/// A transport that takes its time, so that two mailers' rounds overlap.
struct SlowTransport: MailTransport {
    let inner: any MailTransport
    func send(_ message: MailMessage) -> MailOutcome {
        usleep(20_000)
        return inner.send(message)
    }
}
