import EventLog
import Foundation
import HTTPServer
import InboxAPI
import InboxDomain
import InboxTesting
import Mail
import MailTesting
import Projections
import Testing

@testable import Mailer

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// A gathered mail's one-click `List-Unsubscribe` POSTed to the API's `/mail/unsubscribe`, as a
/// mail client does: every category of the mail is off, and the next notifications are not mailed.
@Suite struct UnsubscribeEndToEndTests {
    static func mailer(_ folder: URL, _ clock: MovedClock) -> MailSender {
        MailSender(
            store: MailOutboxStore(), transport: FolderTransport(folder: folder.path), from: sender,
            links: MailRenderer.Links(signer: signer, publicURL: "https://inbox.example.com"), now: { clock.now })
    }

    /// The first mail's `List-Unsubscribe` (`<https://inbox.example.com/mail/unsubscribe?token=...>`)
    /// as a path, to send to the local server instead.
    static func oneClickPath(_ folder: URL) throws -> String {
        let header = try #require(try mails(in: folder).first?.listUnsubscribe).trimmingCharacters(in: .whitespaces)
        let found = try #require(header.range(of: "/mail/unsubscribe?token="))
        return String(header[found.lowerBound...].dropLast())
    }

    /// The unsubscribe route on a real socket.
    static func server(_ db: TestDatabase) throws -> HTTPServer {
        let api = APIServer(routes: UnsubscribeRoutes.routes(client: try InboxRoutes.requestPool(connection: db.configuration, size: 2), links: signer), gate: nil)
        return try HTTPServer(configuration: .init(port: 0, threads: 2), replying: { api.reply($0) })
    }

    @Test func theMailsOneClickLinkTurnsItsCategoriesOffAndNothingMoreIsMailed() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        // A cluster of its own, so that the change is projected inline at once (as UnsubscribeRoutesTests).
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        defer { db.client.close() }
        try await db.setContact("b-e2e", "eve@example.com", .en)
        try await db.appendAndProject([
            ConversationStarted(conversationId: "c-e2e", kind: .watch, buyerId: "b-e2e", shopId: "s-e2e", watchId: "w-e2e", orderId: nil),
            MessageSent(conversationId: "c-e2e", messageId: "m-1", authorSide: .seller, authorId: "seller-1", body: "Yes."),
            PasswordChanged(personId: "b-e2e"),
        ])
        let clock = MovedClock(start)
        let mailer = Self.mailer(folder, clock)
        #expect(try await db.round(mailer).outcomes == ["b-e2e": .sent])
        let path = try Self.oneClickPath(folder)
        let server = try Self.server(db)
        defer { server.shutdown() }
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(server.port)\(path)")!)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.httpBody = Data("List-Unsubscribe=One-Click".utf8)
        let (_, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let off = try await db.client.query(
            "SELECT category FROM notification_preferences WHERE person_id = 'b-e2e' AND channel = 'email' AND NOT enabled ORDER BY category"
        ) { try $0.decode(String.self, at: 0) }
        #expect(off == ["messages", "security"])

        try await db.appendAndProject([
            MessageSent(conversationId: "c-e2e", messageId: "m-2", authorSide: .seller, authorId: "seller-1", body: "Still here."),
            PasswordChanged(personId: "b-e2e"),
        ])
        clock.advance(2 * hour)
        let round = try await db.round(mailer)
        #expect(round.decided.entries == 2 && round.decided.queued == 0)
        #expect(round.outcomes.isEmpty)
        #expect(try mails(in: folder).count == 1)
    }

    @Test func aSearchMailsOneClickLinkStopsThatSearchsMailsAndKeepsItsPushes() async throws {
        let folder = try MailMocks.temporaryDirectory("mailer-folder")
        defer { try? FileManager.default.removeItem(at: folder) }
        let cluster = try await TestCluster.make()
        defer { cluster.tearDown() }
        let db = try await cluster.database()
        defer { db.client.close() }
        try await db.setContact("p-e2e", "pat@example.com", .de)
        try await db.appendAndProject([
            SavedSearchCreated(savedSearchId: "s-e2e", personId: "p-e2e", name: "Datejust", query: .object([:]), interval: .instant, push: true),
            SavedSearchCreated(savedSearchId: "s-other", personId: "p-e2e", name: "Submariner", query: .object([:]), interval: .instant, push: true),
            SavedSearchMatched(savedSearchId: "s-e2e", personId: "p-e2e", watchIds: ["w1"]),
        ])
        let clock = MovedClock(start)
        let mailer = Self.mailer(folder, clock)
        #expect(try await db.round(mailer).outcomes == ["p-e2e search:s-e2e": .sent])
        let path = try Self.oneClickPath(folder)
        let server = try Self.server(db)
        defer { server.shutdown() }
        // The page asks first, naming the search, and changes nothing.
        var ask = URLRequest(url: URL(string: "http://127.0.0.1:\(server.port)\(path)")!)
        ask.setValue("de", forHTTPHeaderField: "Accept-Language")
        let (page, asked) = try await URLSession.shared.data(for: ask)
        #expect((asked as? HTTPURLResponse)?.statusCode == 200)
        #expect(String(decoding: page, as: UTF8.self).contains("Keine E-Mails mehr zu „Datejust“?"))
        var request = URLRequest(url: URL(string: "http://127.0.0.1:\(server.port)\(path)")!)
        request.httpMethod = "POST"
        request.httpBody = Data("List-Unsubscribe=One-Click".utf8)
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        let (_, response) = try await URLSession.shared.data(for: request)
        #expect((response as? HTTPURLResponse)?.statusCode == 200)
        let searches = try await db.client.query("SELECT saved_search_id, interval, push FROM saved_searches ORDER BY saved_search_id") {
            "\(try $0.decode(String.self, at: 0)) \(try $0.decode(String.self, at: 1)) \(try $0.decode(Bool.self, at: 2))"
        }
        #expect(searches == ["s-e2e never true", "s-other instant true"])
        // Again is harmless: nothing more is appended.
        let events = try await db.client.query("SELECT count(*) FROM events") { try $0.decode(Int64.self, at: 0) }
        _ = try await URLSession.shared.data(for: request)
        #expect(try await db.client.query("SELECT count(*) FROM events") { try $0.decode(Int64.self, at: 0) } == events)

        try await db.appendAndProject([
            SavedSearchMatched(savedSearchId: "s-e2e", personId: "p-e2e", watchIds: ["w2"]),
            SavedSearchMatched(savedSearchId: "s-other", personId: "p-e2e", watchIds: ["w3"]),
        ])
        #expect(try await db.round(mailer).outcomes == ["p-e2e search:s-other": .sent])
    }
}
