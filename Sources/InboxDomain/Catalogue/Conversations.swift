/// What a conversation is about: a watch (buyer and shop), or Wristler's own aftercare thread with
/// a buyer after an order.
public enum ConversationKind: String, Codable, Sendable, Hashable, CaseIterable {
    case watch
    case aftercare
}

/// A buyer started a conversation with a shop about a watch, or Wristler opened an aftercare thread.
public struct ConversationStarted: CatalogueEvent, Hashable {
    public static let eventType = "conversation_started"
    public var conversationId: String
    public var kind: ConversationKind
    public var buyerId: String
    /// The shop on the seller side; for an aftercare thread, the shop of the order if there is one.
    public var shopId: String?
    public var watchId: String?
    /// The order an aftercare thread is about.
    public var orderId: String?
    public var streamId: String { Streams.conversation(conversationId) }

    public init(
        conversationId: String, kind: ConversationKind = .watch, buyerId: String, shopId: String?, watchId: String?,
        orderId: String? = nil
    ) {
        self.conversationId = conversationId
        self.kind = kind
        self.buyerId = buyerId
        self.shopId = shopId
        self.watchId = watchId
        self.orderId = orderId
    }

    /// `kind` may be left out: a conversation is about a watch unless it says otherwise.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        conversationId = try container.decode(String.self, forKey: .conversationId)
        kind = try container.decodeIfPresent(ConversationKind.self, forKey: .kind) ?? .watch
        buyerId = try container.decode(String.self, forKey: .buyerId)
        shopId = try container.decodeIfPresent(String.self, forKey: .shopId)
        watchId = try container.decodeIfPresent(String.self, forKey: .watchId)
        orderId = try container.decodeIfPresent(String.self, forKey: .orderId)
    }

    public var problem: (field: String, reason: String)? {
        if kind == .watch && (shopId == nil || watchId == nil) {
            return (shopId == nil ? "shopId" : "watchId", "is required for a conversation about a watch")
        }
        return nil
    }
}

/// A message in a conversation. `offer` is set when the message makes an offer. `body` is its
/// author's personal data (sealed under their key in the log).
public struct MessageSent: CatalogueEvent, Hashable, HoldsPersonalData {
    public static let eventType = "message_sent"
    public var conversationId: String
    public var messageId: String
    public var authorSide: AuthorSide
    /// The person who wrote it (for the seller side, the shop member; for Wristler, the agent).
    public var authorId: String
    public var body: PersonalText
    public var attachmentHandles: [String]
    public var offer: Money?
    public var streamId: String { Streams.conversation(conversationId) }

    public init(
        conversationId: String, messageId: String, authorSide: AuthorSide, authorId: String, body: String,
        attachmentHandles: [String] = [], offer: Money? = nil
    ) {
        self.conversationId = conversationId
        self.messageId = messageId
        self.authorSide = authorSide
        self.authorId = authorId
        self.body = .text(body)
        self.attachmentHandles = attachmentHandles
        self.offer = offer
    }

    public var personalDataOwner: String { authorId }
    public static let personalFields = ["body"]

    /// `attachmentHandles` may be left out for a message without attachments.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        conversationId = try container.decode(String.self, forKey: .conversationId)
        messageId = try container.decode(String.self, forKey: .messageId)
        authorSide = try container.decode(AuthorSide.self, forKey: .authorSide)
        authorId = try container.decode(String.self, forKey: .authorId)
        body = try container.decode(PersonalText.self, forKey: .body)
        attachmentHandles = try container.decodeIfPresent([String].self, forKey: .attachmentHandles) ?? []
        offer = try container.decodeIfPresent(Money.self, forKey: .offer)
    }

    public var problem: (field: String, reason: String)? {
        if body.text?.isEmpty == true && attachmentHandles.isEmpty { return ("body", "is empty and the message has no attachment") }
        if let offer, offer.amount <= 0 { return ("offer.amount", "must be more than 0") }
        return nil
    }
}

/// A side read the thread up to and including a message.
public struct ConversationRead: CatalogueEvent, Hashable {
    public static let eventType = "conversation_read"
    public var conversationId: String
    public var side: ConversationSide
    /// Who read it (on the seller side, the shop member).
    public var personId: String
    public var upToMessageId: String
    public var streamId: String { Streams.conversation(conversationId) }

    public init(conversationId: String, side: ConversationSide, personId: String, upToMessageId: String) {
        self.conversationId = conversationId
        self.side = side
        self.personId = personId
        self.upToMessageId = upToMessageId
    }
}

/// A side archived the thread (it leaves the inbox list until unarchived or written to again).
public struct ConversationArchived: CatalogueEvent, Hashable {
    public static let eventType = "conversation_archived"
    public var conversationId: String
    public var side: ConversationSide
    public var personId: String
    public var streamId: String { Streams.conversation(conversationId) }

    public init(conversationId: String, side: ConversationSide, personId: String) {
        self.conversationId = conversationId
        self.side = side
        self.personId = personId
    }
}

public struct ConversationUnarchived: CatalogueEvent, Hashable {
    public static let eventType = "conversation_unarchived"
    public var conversationId: String
    public var side: ConversationSide
    public var personId: String
    public var streamId: String { Streams.conversation(conversationId) }

    public init(conversationId: String, side: ConversationSide, personId: String) {
        self.conversationId = conversationId
        self.side = side
        self.personId = personId
    }
}

/// The shop marked the thread "no reply needed"; the next message from the buyer clears it.
public struct ConversationMarkedNoReplyNeeded: CatalogueEvent, Hashable {
    public static let eventType = "conversation_marked_no_reply_needed"
    public var conversationId: String
    public var personId: String
    public var streamId: String { Streams.conversation(conversationId) }

    public init(conversationId: String, personId: String) {
        self.conversationId = conversationId
        self.personId = personId
    }
}

/// A block between the two sides closed the thread: nobody can write in it any more.
public struct ConversationClosedByBlock: CatalogueEvent, Hashable {
    public static let eventType = "conversation_closed_by_block"
    public var conversationId: String
    public var blockerId: String
    public var blockedId: String
    public var streamId: String { Streams.conversation(conversationId) }

    public init(conversationId: String, blockerId: String, blockedId: String) {
        self.conversationId = conversationId
        self.blockerId = blockerId
        self.blockedId = blockedId
    }
}

/// The last block that closed the conversation was lifted (`DELETE /v1/me/blocks/{id}`): both sides
/// can write again, and its messages notify again. `personId` lifted it.
public struct ConversationReopened: CatalogueEvent, Hashable {
    public static let eventType = "conversation_reopened"
    public var conversationId: String
    public var personId: String
    public var streamId: String { Streams.conversation(conversationId) }

    public init(conversationId: String, personId: String) {
        self.conversationId = conversationId
        self.personId = personId
    }
}
