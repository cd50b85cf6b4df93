import Foundation
import InboxDomain

/// The pure middle of `ThreadsProjection`: a batch's events and the rows they touch in, the rows
/// to write out (no connection, no clock).
///
/// - A message's number in its thread is its stream version; unread is `lastIncomingSeq >
///   readThroughSeq`, both only ever raised, so applying an event twice, or ahead of older ones,
///   ends in the same state.
/// - Any event about a conversation that was never started fails (the driver parks it), except an
///   order, which is nothing to threads then.
struct ThreadsFold {
    struct Conversation {
        var id: String
        var kind: String
        var buyerId: String
        var shopId: String?
        var watchId: String?
        var orderId: String?
        var startedAt: Date
        var lastMessageId: String?
        var lastMessageSeq: Int64 = 0
        var lastMessageAt: Date?
        var lastMessageSide: String?
        var lastMessageBody: String?
        /// Who wrote the last message, when this fold saw it (not stored: an erasure reads it).
        var lastMessageAuthorId: String?
        var messageCount: Int32 = 0
        var closedByBlock = false
        var noReplyNeeded = false
        var ledToOrder = false
    }

    struct Side {
        var conversationId: String
        var side: String
        var ownerId: String
        var lastActivityAt: Date
        var lastIncomingSeq: Int64 = 0
        var readThroughSeq: Int64 = 0
        var archived = false
        var unreadBefore = false
        /// Whether the row was in the table before this batch.
        var existed = false
        var unread: Bool { lastIncomingSeq > readThroughSeq }
    }

    struct SideKey: Hashable {
        let conversationId: String
        let side: String
    }

    /// Whose unread counter: a buyer's, or a shop's seller side.
    struct OwnerSide: Hashable {
        let ownerId: String
        let side: String
    }

    struct Message {
        var id: String
        var conversationId: String
        var seq: Int64
        var authorSide: String
        var authorId: String
        /// Nil when erased (its author's key is gone).
        var body: String?
        var attachmentHandles: [String]
        var offer: Money?
        var sentAt: Date
    }

    /// Where a stored message stands in its thread.
    struct MessagePlace {
        var conversationId: String
        var seq: Int64
    }

    struct Watch {
        var shopId: String
        var status: String
    }

    /// What a batch needs loaded: its conversations (with their sides), and the messages its
    /// messages and read marks name.
    struct Keys {
        var conversations: Set<String> = []
        var messages: Set<String> = []
    }

    private(set) var conversations: [String: Conversation]
    private(set) var sides: [SideKey: Side]
    private(set) var knownMessages: [String: MessagePlace]
    private(set) var newMessages: [Message] = []
    private(set) var watches: [String: Watch] = [:]
    /// The people erased in this batch (`person_erased`): their messages' bodies go.
    private(set) var erasedPeople: Set<String> = []
    /// What this batch changed, each as it stood before the batch first changed it (nil: not there),
    /// so that a failed batch can be taken back (`undoBatch`).
    private var conversationsBefore: [String: Conversation?] = [:]
    private var sidesBefore: [SideKey: Side?] = [:]

    init(conversations: [String: Conversation], sides: [SideKey: Side], messages: [String: MessagePlace]) {
        self.conversations = conversations
        self.sides = sides
        self.knownMessages = messages
    }

    /// What `events` need loaded.
    static func keys(of events: [ProjectedEvent]) -> Keys { rules.keys(of: events, from: Keys()) }

    /// What `events` make of the threads, given the rows they touch as stored.
    static func fold(
        _ events: [ProjectedEvent], conversations: [String: Conversation], sides: [SideKey: Side], messages: [String: MessagePlace]
    ) throws -> ThreadsFold {
        try rules.fold(events, from: ThreadsFold(conversations: conversations, sides: sides, messages: messages))
    }

    /// The conversation rows to write.
    var changedConversations: [Conversation] { conversationsBefore.keys.compactMap { conversations[$0] } }
    /// The side rows to write.
    var changedSides: [Side] { sidesBefore.keys.compactMap { sides[$0] } }

    /// Folds `events` into the rows held, which are all the rows there are (a replay's fold
    /// keeps them in memory between batches, rather than loading what each batch touches): what
    /// `fold` does to the rows a batch touches, here without copying them in and out. A batch
    /// that throws is taken back whole, so the rows are as they were before it.
    mutating func apply(_ events: [ProjectedEvent]) throws {
        newMessages.removeAll(keepingCapacity: true)
        watches.removeAll(keepingCapacity: true)
        erasedPeople.removeAll(keepingCapacity: true)
        conversationsBefore.removeAll(keepingCapacity: true)
        sidesBefore.removeAll(keepingCapacity: true)
        do {
            try Self.rules.apply(events, to: &self)
        } catch {
            undoBatch()
            throw error
        }
    }

    private mutating func undoBatch() {
        for (id, before) in conversationsBefore { conversations[id] = before }
        for (key, before) in sidesBefore { sides[key] = before }
        for message in newMessages { knownMessages[message.id] = nil }
        conversationsBefore.removeAll()
        sidesBefore.removeAll()
        newMessages.removeAll()
        watches.removeAll()
    }

    /// What this fold holds of `person`'s messages loses its body; the rows stored before are the
    /// projection's to change (`ThreadsProjection.erasure`).
    private mutating func erase(_ person: String) {
        erasedPeople.insert(person)
        for index in newMessages.indices where newMessages[index].authorId == person { newMessages[index].body = nil }
        for (id, thread) in conversations where thread.lastMessageAuthorId == person && thread.lastMessageBody != nil {
            touch(id)
            conversations[id]?.lastMessageBody = nil
        }
    }

    private mutating func touch(_ id: String) {
        if conversationsBefore[id] == nil { conversationsBefore[id] = .some(conversations[id]) }
    }

    private mutating func touch(_ key: SideKey) {
        if sidesBefore[key] == nil { sidesBefore[key] = .some(sides[key]) }
    }

    /// How each owner's count of conversations with unread messages moves. Every owner of a thread
    /// has an entry (perhaps 0) from the thread's start, whatever the batch nets out to, so the
    /// counter rows do not depend on where the log is cut into batches.
    var unreadDeltas: [OwnerSide: Int32] { Self.unreadDeltas(of: changedSides) }

    /// How the counters move by the change of `sides`.
    static func unreadDeltas(of sides: [Side]) -> [OwnerSide: Int32] {
        var deltas: [OwnerSide: Int32] = [:]
        for side in sides where side.unread != side.unreadBefore || !side.existed {
            deltas[OwnerSide(ownerId: side.ownerId, side: side.side), default: 0] += side.unread == side.unreadBefore ? 0 : side.unread ? 1 : -1
        }
        return deltas
    }
}

extension ThreadsFold {
    static let rules: FoldRules<Keys, ThreadsFold> = {
        var rules = FoldRules<Keys, ThreadsFold>(ignoring: [
            OrderShipped.self, OrderDelivered.self, OrderCancelled.self, OrderRefunded.self,
            WatchPriceChanged.self, FavouriteAdded.self, FavouriteRemoved.self,
            SavedSearchCreated.self, SavedSearchChanged.self, SavedSearchDeleted.self, SavedSearchMatched.self,
            SignedIn.self, PasswordChanged.self, SecondFactorEnabled.self, SecondFactorDisabled.self, EmailChanged.self, SignedOut.self, SignInLinked.self, SignInUnlinked.self, RecoveryCodesRenewed.self, SignInAttemptsFailed.self, RefreshTokenReused.self,
            AccountBlocked.self, AccountClosed.self, NotificationPreferenceChanged.self,
            NotificationRead.self, AllNotificationsRead.self, NotificationDeleted.self, AllNotificationsDeleted.self,
            LegacyNotificationImported.self,
            ShopMemberAdded.self, ShopMemberRemoved.self, PersonBlocked.self, PersonUnblocked.self, ShopBlocked.self, ShopUnblocked.self,
        ])
        rules.on(ConversationStarted.self, load: { keys, e, _ in keys.conversations.insert(e.conversationId) }) { $0.start($1, event: $2) }
        rules.on(MessageSent.self, load: { keys, e, _ in keys.add(e.conversationId, message: e.messageId) }) { try $0.send($1, event: $2) }
        rules.on(ConversationRead.self, load: { keys, e, _ in keys.add(e.conversationId, message: e.upToMessageId) }) {
            try $0.read($1, event: $2)
        }
        rules.on(ConversationArchived.self, load: { keys, e, _ in keys.conversations.insert(e.conversationId) }) {
            try $0.setArchived(true, conversation: $1.conversationId, side: $1.side, event: $2)
        }
        rules.on(ConversationUnarchived.self, load: { keys, e, _ in keys.conversations.insert(e.conversationId) }) {
            try $0.setArchived(false, conversation: $1.conversationId, side: $1.side, event: $2)
        }
        rules.on(ConversationMarkedNoReplyNeeded.self, load: { keys, e, _ in keys.conversations.insert(e.conversationId) }) {
            try $0.change($1.conversationId, event: $2) { $0.noReplyNeeded = true }
        }
        rules.on(ConversationClosedByBlock.self, load: { keys, e, _ in keys.conversations.insert(e.conversationId) }) {
            try $0.change($1.conversationId, event: $2) { $0.closedByBlock = true }
        }
        rules.on(ConversationReopened.self, load: { keys, e, _ in keys.conversations.insert(e.conversationId) }) {
            try $0.change($1.conversationId, event: $2) { $0.closedByBlock = false }
        }
        rules.on(OrderPaid.self, load: { keys, e, _ in if let id = e.conversationId { keys.conversations.insert(id) } }) {
            fold, e, _ in fold.markLedToOrder(e.conversationId)
        }
        rules.on(WatchStatusChanged.self) { fold, e, _ in fold.watches[e.watchId] = Watch(shopId: e.shopId, status: e.status.rawValue) }
        rules.on(PersonErased.self) { fold, e, _ in fold.erase(e.personId) }
        return rules
    }()

    /// The first start of a conversation counts; its buyer side, and for a watch with a shop its
    /// seller side, exist from then on.
    private mutating func start(_ e: ConversationStarted, event: ProjectedEvent) {
        guard conversations[e.conversationId] == nil else { return }
        let at = event.record.recordedAt
        touch(e.conversationId)
        conversations[e.conversationId] = Conversation(
            id: e.conversationId, kind: e.kind.rawValue, buyerId: e.buyerId, shopId: e.shopId, watchId: e.watchId, orderId: e.orderId,
            startedAt: at)
        let buyer = SideKey(conversationId: e.conversationId, side: ConversationSide.buyer.rawValue)
        touch(buyer)
        sides[buyer] = Side(conversationId: e.conversationId, side: buyer.side, ownerId: e.buyerId, lastActivityAt: at)
        if e.kind == .watch, let shopId = e.shopId {
            let seller = SideKey(conversationId: e.conversationId, side: ConversationSide.seller.rawValue)
            touch(seller)
            sides[seller] = Side(conversationId: e.conversationId, side: seller.side, ownerId: shopId, lastActivityAt: at)
        }
    }

    /// A message raises its own side's read mark and the other side's incoming mark (a Wristler
    /// message: both sides'), brings the thread back on the other side, and from the buyer clears
    /// "no reply needed".
    private mutating func send(_ e: MessageSent, event: ProjectedEvent) throws {
        var thread = try conversation(e.conversationId, for: event)
        let seq = event.record.streamVersion
        let at = event.record.recordedAt
        // A message applied before (inline, ahead of this projector) is not stored or counted
        // again, but what it does to the thread is: an event applied since may have undone it.
        if knownMessages[e.messageId] == nil {
            knownMessages[e.messageId] = MessagePlace(conversationId: e.conversationId, seq: seq)
            newMessages.append(
                Message(
                    id: e.messageId, conversationId: e.conversationId, seq: seq, authorSide: e.authorSide.rawValue, authorId: e.authorId,
                    body: e.body.text, attachmentHandles: e.attachmentHandles, offer: e.offer, sentAt: at))
            thread.messageCount += 1
        }
        if seq > thread.lastMessageSeq {
            thread.lastMessageSeq = seq
            thread.lastMessageId = e.messageId
            thread.lastMessageAt = at
            thread.lastMessageSide = e.authorSide.rawValue
            thread.lastMessageBody = e.body.text
            thread.lastMessageAuthorId = e.authorId
        }
        if e.authorSide == .buyer { thread.noReplyNeeded = false }
        touch(e.conversationId)
        conversations[e.conversationId] = thread
        for side in ConversationSide.allCases {
            let own = side.rawValue == e.authorSide.rawValue
            update(SideKey(conversationId: e.conversationId, side: side.rawValue)) { row in
                row.lastActivityAt = max(row.lastActivityAt, at)
                if own {
                    row.readThroughSeq = max(row.readThroughSeq, seq)
                } else {
                    row.lastIncomingSeq = max(row.lastIncomingSeq, seq)
                    row.archived = false
                }
            }
        }
    }

    /// A side read up to a message of the thread. A mark for a message this projection has not seen
    /// (yet: an inline apply ahead of the async projector) or of another thread changes nothing.
    private mutating func read(_ e: ConversationRead, event: ProjectedEvent) throws {
        _ = try conversation(e.conversationId, for: event)
        guard let message = knownMessages[e.upToMessageId], message.conversationId == e.conversationId else { return }
        update(SideKey(conversationId: e.conversationId, side: e.side.rawValue)) { row in
            row.readThroughSeq = max(row.readThroughSeq, message.seq)
        }
    }

    private mutating func setArchived(_ archived: Bool, conversation id: String, side: ConversationSide, event: ProjectedEvent) throws {
        _ = try conversation(id, for: event)
        update(SideKey(conversationId: id, side: side.rawValue)) { $0.archived = archived }
    }

    private mutating func change(_ id: String, event: ProjectedEvent, _ change: (inout Conversation) -> Void) throws {
        var thread = try conversation(id, for: event)
        change(&thread)
        touch(id)
        conversations[id] = thread
    }

    /// An order about a thread this projection does not know is nothing to threads.
    private mutating func markLedToOrder(_ id: String?) {
        guard let id, var thread = conversations[id] else { return }
        thread.ledToOrder = true
        touch(id)
        conversations[id] = thread
    }

    private func conversation(_ id: String, for event: ProjectedEvent) throws -> Conversation {
        guard let found = conversations[id] else {
            throw ProjectionError("\(event.record.type) at position \(event.record.position): conversation \(id) was never started")
        }
        return found
    }

    /// Changes a side that exists; a side a thread does not have (the seller side of an aftercare
    /// thread) stays absent.
    private mutating func update(_ key: SideKey, _ change: (inout Side) -> Void) {
        guard var side = sides[key] else { return }
        change(&side)
        touch(key)
        sides[key] = side
    }
}

extension ThreadsFold.Keys {
    fileprivate mutating func add(_ conversation: String, message: String) {
        conversations.insert(conversation)
        messages.insert(message)
    }
}
