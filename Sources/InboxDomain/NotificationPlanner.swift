/// A notification an event causes: for a person (the bell, and push or mail as their preferences
/// allow) or for the people who work at a shop (push and mail only, never the bell).
public struct PlannedNotification: Sendable, Hashable {
    public enum Audience: Sendable, Hashable {
        case person(String)
        case shop(String)
    }

    public var audience: Audience
    public var kind: NotificationKind
    /// The ids its screen needs, all strings, only those the event has.
    public var ids: [String: String]

    public init(audience: Audience, kind: NotificationKind, ids: [String: String]) {
        self.audience = audience
        self.kind = kind
        self.ids = ids
    }

    /// The category (`type`): the preference switch that governs it.
    public var category: NotificationCategory { kind.category }
    /// What happened (`event`), the word the bell and the push share.
    public var event: String { kind.word }

    /// Whether it lands in the bell: everything about the person themselves, never a shop's news.
    public var isInBell: Bool {
        if case .person = audience { return true }
        return false
    }
}

/// Which event makes which notification for whom (the table in docs/events.md). Pure: the facts an
/// event alone does not carry (who the buyer of a conversation is, who saved a watch) are passed in.
public enum NotificationPlanner {
    /// What a conversation's notifications need to know about it.
    public struct ConversationFacts: Sendable, Hashable {
        public var buyerId: String
        public var shopId: String?
        public var watchId: String?
        public var kind: ConversationKind
        public var isClosed: Bool

        public init(buyerId: String, shopId: String?, watchId: String?, kind: ConversationKind, isClosed: Bool) {
            self.buyerId = buyerId
            self.shopId = shopId
            self.watchId = watchId
            self.kind = kind
            self.isClosed = isClosed
        }
    }

    public struct Facts: Sendable {
        public var conversation: ConversationFacts?
        /// The people who have the watch of a watch event as a favourite.
        public var favouriters: [String]
        /// Whether the saved search of a match still exists.
        public var savedSearchExists: Bool

        public init(conversation: ConversationFacts? = nil, favouriters: [String] = [], savedSearchExists: Bool = true) {
            self.conversation = conversation
            self.favouriters = favouriters
            self.savedSearchExists = savedSearchExists
        }
    }

    public static func notifications(for event: any CatalogueEvent, facts: Facts) -> [PlannedNotification] {
        switch event {
        case let message as MessageSent:
            guard let conversation = facts.conversation, !conversation.isClosed else { return [] }
            var ids = ["conversationId": message.conversationId, "messageId": message.messageId]
            if let watchId = conversation.watchId { ids["watchId"] = watchId }
            let isOffer = message.offer != nil
            switch message.authorSide {
            case .seller, .wristler:
                return [PlannedNotification(audience: .person(conversation.buyerId), kind: isOffer ? .offerMade : .messageReceived, ids: ids)]
            case .buyer:
                guard let shopId = conversation.shopId, conversation.kind == .watch else { return [] }
                ids["sellerId"] = shopId
                return [PlannedNotification(audience: .shop(shopId), kind: isOffer ? .shopOfferMade : .shopMessageReceived, ids: ids)]
            }
        case let order as any OrderEvent:
            var ids = ["orderId": order.orderId, "watchId": order.watchId]
            if let conversationId = order.conversationId { ids["conversationId"] = conversationId }
            let kind: NotificationKind =
                switch order {
                case is OrderPaid: .orderPaid
                case is OrderShipped: .orderShipped
                case is OrderDelivered: .orderDelivered
                case is OrderCancelled: .orderCancelled
                default: .orderRefunded
                }
            var planned = [PlannedNotification(audience: .person(order.buyerId), kind: kind, ids: ids)]
            if kind == .orderPaid {
                planned.append(
                    PlannedNotification(
                        audience: .shop(order.shopId), kind: .shopOrderPaid,
                        ids: ["orderId": order.orderId, "watchId": order.watchId, "sellerId": order.shopId]))
            }
            return planned
        case let change as WatchPriceChanged:
            guard let previous = change.previousPrice, previous.currency == change.price.currency,
                change.price.amount < previous.amount
            else { return [] }
            return facts.favouriters.sorted().map {
                PlannedNotification(audience: .person($0), kind: .priceDropped, ids: ["watchId": change.watchId])
            }
        case let change as WatchStatusChanged:
            guard change.status == .sold else { return [] }
            return facts.favouriters.sorted().map {
                PlannedNotification(audience: .person($0), kind: .watchSold, ids: ["watchId": change.watchId])
            }
        case let match as SavedSearchMatched:
            guard facts.savedSearchExists, !match.watchIds.isEmpty else { return [] }
            var ids = ["savedSearchId": match.savedSearchId]
            if match.watchIds.count == 1 { ids["watchId"] = match.watchIds[0] }
            return [PlannedNotification(audience: .person(match.personId), kind: .savedSearchMatched, ids: ids)]
        case let signIn as SignedIn:
            return [PlannedNotification(audience: .person(signIn.personId), kind: .newSignIn, ids: ["signInId": signIn.signInId])]
        case let event as PasswordChanged:
            return [security(event.personId, .passwordChanged)]
        case let event as SecondFactorEnabled:
            return [security(event.personId, .secondFactorEnabled)]
        case let event as SecondFactorDisabled:
            return [security(event.personId, .secondFactorDisabled)]
        case let event as EmailChanged:
            return [security(event.personId, .emailChanged)]
        case let event as SignedOut:
            return [security(event.personId, .signedOut)]
        case let event as SignInLinked:
            return [security(event.personId, .signInLinked)]
        case let event as SignInUnlinked:
            return [security(event.personId, .signInUnlinked)]
        case let event as RecoveryCodesRenewed:
            return [security(event.personId, .recoveryCodesRenewed)]
        case let event as SignInAttemptsFailed:
            return [security(event.personId, .signInAttemptsFailed)]
        case let event as RefreshTokenReused:
            return [PlannedNotification(audience: .person(event.personId), kind: .refreshTokenReused, ids: ["signInId": event.signInId])]
        default:
            return []
        }
    }

    private static func security(_ personId: String, _ kind: NotificationKind) -> PlannedNotification {
        PlannedNotification(audience: .person(personId), kind: kind, ids: [:])
    }
}
