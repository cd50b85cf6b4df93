import Crypto
import EventLog
import Foundation
import InboxDomain
import InboxSimulation

/// A buyer's message in a conversation: most of what the inbox appends.
struct MessageSent: EventPayload {
    static let eventType = "message_sent"
    var conversationId: String
    var authorId: String
    var side: String
    var body: String
    var attachmentHandles: [String]
}

/// A participant read a conversation up to an event: the other, smaller event of the mix.
struct ConversationRead: EventPayload {
    static let eventType = "conversation_read"
    var conversationId: String
    var readerId: String
    var side: String
    var readUpTo: Int64
}

/// The first event of each conversation, written once before the measured rounds.
struct ConversationStarted: EventPayload {
    static let eventType = "conversation_started"
    var conversationId: String
    var buyerId: String
    var sellerId: String
    var listingId: String
}


/// Builds realistic events the way the API does: typed payloads encoded by `NewEvent(streamId:payload:...)`
/// (JSONEncoder), app metadata, a fresh idempotency key per event and one correlation id per request (batch).
///
/// The mix: 19 of 20 events are `message_sent` (about 200 bytes of payload; one in ten carries an
/// attachment handle), 1 of 20 is `conversation_read`; each goes to a random one of the
/// `conversation-N` streams this appender owns.
struct EventFactory: Sendable {
    static let conversationCount = 10_000

    /// Message bodies of 80 to 110 bytes; the server-side rows use the same list.
    static let bodies = [
        "Hi! Is the bike still available? I could pick it up on Saturday morning if that works for you.",
        "Would you take 120 for it? I can pay by bank transfer today and collect it whenever suits you best.",
        "Does the jacket run small? I usually wear a medium but the photos make it look a bit short in the arms.",
        "Thanks, just paid. Could you send it with tracking please? My address is in the order details.",
        "Is the charger included? And are there any scratches on the screen that don't show in the pictures?",
        "Bonjour ! Est-ce que la lampe fonctionne toujours ? Je peux passer la chercher demain après 18 h.",
        "Got it today, it looks great.\nOne of the buttons is a little loose though, is that how it was?",
        "Could you measure the table for me? I need to know if it fits through an 80 cm door before I buy it.",
    ]

    private var random: SplitMix64
    private let appender: Int
    private let appenders: Int
    private var counter = 0

    /// `appender` of `appenders` owns the conversations whose number is `appender` modulo `appenders`,
    /// so concurrent appenders never race for the same stream version.
    init(seed: UInt64, appender: Int = 0, appenders: Int = 1) {
        random = SplitMix64(seed: seed)
        self.appender = appender
        self.appenders = max(1, appenders)
    }

    /// One request's worth of events.
    mutating func batch(size: Int) throws -> [NewEvent] {
        let correlationId = RandomUUID.string()
        var events: [NewEvent] = []
        events.reserveCapacity(size)
        for _ in 0..<size { events.append(try next(correlationId: correlationId)) }
        return events
    }

    mutating func next(correlationId: String) throws -> NewEvent {
        counter += 1
        let slots = max(1, Self.conversationCount / appenders)
        let conversation = "conversation-\(appender + appenders * Int.random(in: 0..<slots, using: &random))"
        let user = "user-\(Int.random(in: 100_000..<1_000_000, using: &random))"
        let metadata = EventMetadata(origin: .appIOS, appVersion: "2.4.0", actor: user, correlationId: correlationId, service: "inbox")
        let key = RandomUUID.string()
        if counter % 20 == 0 {
            let read = ConversationRead(conversationId: conversation, readerId: user, side: "seller", readUpTo: Int64(counter))
            return try NewEvent(streamId: conversation, payload: read, metadata: metadata, idempotencyKey: key)
        }
        let body = Self.bodies[Int.random(in: 0..<Self.bodies.count, using: &random)]
        let attachments = counter % 10 == 3 ? [attachmentHandle()] : []
        let message = MessageSent(conversationId: conversation, authorId: user, side: "buyer", body: body, attachmentHandles: attachments)
        return try NewEvent(streamId: conversation, payload: message, metadata: metadata, idempotencyKey: key)
    }

    /// `att_` and 22 hex digits, like the attachment service's handles.
    private mutating func attachmentHandle() -> String {
        let high = String(random.next(), radix: 16)
        let low = String(random.next() & 0xFF_FFFF, radix: 16)
        return "att_" + String((high + low + "0000000000000000000000").prefix(22))
    }

    /// One `conversation_started` for each of the conversations, to be appended before measuring.
    static func seedEvents(batch: Range<Int>) throws -> [NewEvent] {
        let correlationId = RandomUUID.string()
        return try batch.map { number in
            let conversation = "conversation-\(number)"
            let started = ConversationStarted(
                conversationId: conversation, buyerId: "user-\(100_000 + number)", sellerId: "user-\(900_000 - number)",
                listingId: "listing-\(number * 7)")
            return try NewEvent(
                streamId: conversation, payload: started,
                metadata: EventMetadata(origin: .appIOS, appVersion: "2.4.0", actor: "user-\(100_000 + number)", correlationId: correlationId, service: "inbox"),
                idempotencyKey: RandomUUID.string())
        }
    }
}
