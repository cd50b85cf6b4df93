import EventLog
import Foundation
import HTTPServer
import InboxDomain
import Projections
import Testing

@testable import InboxAPI

/// Conversations and messages are written straight into their bytes (`DocumentWriter`); these
/// check that the bytes are what `JSONAPI.bytes` makes of the same document (members in the order
/// of their names, compact) and say what each side must see.
@Suite struct DocumentWriterTests {
    static let sent = Date(timeIntervalSince1970: 1_764_547_200.123456)

    static func thread(kind: String = "watch", lastMessage: Bool = true) -> ThreadSummary {
        ThreadSummary(
            conversationId: "c-1", kind: kind, buyerId: "p-buyer", shopId: "shop-9", watchId: "w-\"quoted\"\n", lastActivityAt: sent,
            lastMessageId: lastMessage ? "m-1" : nil, lastMessageBody: lastMessage ? "Größe? \u{1}" : nil, lastMessageSide: lastMessage ? "buyer" : nil,
            lastMessageAt: lastMessage ? sent : nil, unread: true, archived: false, noReplyNeeded: true, closed: false)
    }

    static func document(_ response: HTTPResponse) throws -> (bytes: [UInt8], value: JSONValue) {
        (response.body, try JSONDecoder().decode(JSONValue.self, from: Data(response.body)))
    }

    /// The bytes are the canonical encoding of what they say.
    static func expectCanonical(_ bytes: [UInt8], _ value: JSONValue) {
        #expect(JSONAPI.bytes(value) == bytes, "\(String(decoding: bytes, as: UTF8.self))")
    }

    static func attributes(_ value: JSONValue, _ path: String...) -> JSONValue? {
        var current: JSONValue? = value
        for key in path {
            guard case .object(let members)? = current else { return nil }
            current = members[key]
        }
        return current
    }

    @Test(arguments: [ConversationSide.buyer, .seller], [true, false])
    func aConversationIsTheCanonicalDocument(side: ConversationSide, lastMessage: Bool) throws {
        let (bytes, value) = try Self.document(ConversationRoutes.response(Self.thread(lastMessage: lastMessage), side: side))
        Self.expectCanonical(bytes, value)
        #expect(Self.attributes(value, "jsonapi", "version") == .string("1.0"))
        #expect(Self.attributes(value, "data", "type") == .string("conversations"))
        #expect(Self.attributes(value, "data", "relationships", "watch", "data", "id") == .string("w-\"quoted\"\n"))
        #expect(Self.attributes(value, "data", "relationships", "shop", "data") == .object(["type": .string("shops"), "id": .string("shop-9")]))
        #expect(Self.attributes(value, "data", "relationships", "messages", "links", "related") == .string("/v1/conversations/c-1/messages"))
        #expect(Self.attributes(value, "data", "attributes", "watchId") == .string("w-\"quoted\"\n"), "kept: /v1 never removes a field")
        #expect(Self.attributes(value, "data", "attributes", "lastActivityAt") == .string(Documents.timestampText(Self.sent)))
        if lastMessage {
            #expect(Self.attributes(value, "data", "attributes", "lastMessage", "body") == .string("Größe? \u{1}"))
        } else {
            #expect(Self.attributes(value, "data", "attributes", "lastMessage") == .null)
        }
        switch side {
        case .buyer:
            #expect(Self.attributes(value, "data", "attributes", "otherParty") == .object(["type": .string("shops"), "id": .string("shop-9")]))
            #expect(Self.attributes(value, "data", "attributes", "noReplyNeeded") == nil)
        case .seller:
            #expect(Self.attributes(value, "data", "attributes", "otherParty") == .object(["type": .string("people"), "id": .string("p-buyer")]))
            #expect(Self.attributes(value, "data", "attributes", "noReplyNeeded") == .bool(true))
        }
    }

    @Test func wristlersAftercareThreadIsWithWristler() throws {
        let (bytes, value) = try Self.document(ConversationRoutes.response(Self.thread(kind: "aftercare"), side: .buyer))
        Self.expectCanonical(bytes, value)
        #expect(Self.attributes(value, "data", "attributes", "otherParty") == .object(["type": .string("wristler"), "id": .null]))
    }

    @Test func aStartIncludesItsMessageAndAMessageSaysWhoseItIs() throws {
        let message = ThreadMessage(
            id: "m-2", seq: 2, authorSide: "seller", authorId: "shop-9-staff", body: "Yes", attachmentHandles: ["h1", "h2"],
            offer: Money(amount: 900_000, currency: "EUR"), sentAt: Self.sent)
        let (bytes, value) = try Self.document(
            ConversationRoutes.response(status: 201, Self.thread(), side: .buyer, including: (message, viewer: "p-buyer")))
        Self.expectCanonical(bytes, value)
        guard case .array(let included)? = Self.attributes(value, "included"), let first = included.first else {
            Issue.record("no included message")
            return
        }
        #expect(Self.attributes(first, "attributes", "mine") == .bool(false))
        // The buyer does not learn who at the shop wrote.
        #expect(Self.attributes(first, "attributes", "authorId") == nil)
        #expect(Self.attributes(first, "attributes", "offer") == .object(["amount": .integer(900_000), "currency": .string("EUR")]))
        #expect(Self.attributes(first, "attributes", "attachmentHandles") == .array([.string("h1"), .string("h2")]))
        var writer = DocumentWriter()
        writer.member("data", each: [message]) { ConversationRoutes.messageResource($0, in: "c-1", viewer: "shop-9-staff", side: .seller, to: &$1) }
        let (ownBytes, own) = try Self.document(writer.response())
        Self.expectCanonical(ownBytes, own)
        guard case .array(let data)? = Self.attributes(own, "data"), let mine = data.first else {
            Issue.record("no message")
            return
        }
        #expect(Self.attributes(mine, "attributes", "mine") == .bool(true))
        #expect(Self.attributes(mine, "attributes", "authorId") == .string("shop-9-staff"))
    }
}
