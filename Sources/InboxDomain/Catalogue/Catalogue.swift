/// An event of the tier's catalogue (docs/events.md): a typed payload that knows its stream.
public protocol CatalogueEvent: EventPayload {
    /// The stream the event belongs to; events of one stream are ordered by their stream version.
    var streamId: String { get }
    /// What is wrong with a payload that has the right shape but breaks a rule of the catalogue
    /// (a locked switch turned off, a date that is not one): the field and why. Nil when valid.
    var problem: (field: String, reason: String)? { get }
}

extension CatalogueEvent {
    public var problem: (field: String, reason: String)? { nil }
}

/// Which side of a conversation somebody is on. The same person is the buyer in one thread and
/// the seller (working at the shop) in the next.
public enum ConversationSide: String, Codable, Sendable, Hashable, CaseIterable {
    case buyer
    case seller
}

/// Who wrote a message: the buyer, the shop, or Wristler itself (aftercare, moderation).
public enum AuthorSide: String, Codable, Sendable, Hashable, CaseIterable {
    case buyer
    case seller
    case wristler
}

/// An amount of money in minor units (cents), with its ISO 4217 currency.
public struct Money: Codable, Sendable, Hashable {
    public var amount: Int64
    public var currency: String

    public init(amount: Int64, currency: String) {
        self.amount = amount
        self.currency = currency
    }
}

/// Every event type the tier records, with the streams they belong to. The registry decodes and
/// validates payloads; appends of known types are checked against it (see `CatalogueValidator`).
public enum InboxCatalogue {
    public static let eventTypes: [any CatalogueEvent.Type] = [
        // conversations
        ConversationStarted.self, MessageSent.self, ConversationRead.self, ConversationArchived.self,
        ConversationUnarchived.self, ConversationMarkedNoReplyNeeded.self, ConversationClosedByBlock.self, ConversationReopened.self,
        // orders
        OrderPaid.self, OrderShipped.self, OrderDelivered.self, OrderCancelled.self, OrderRefunded.self,
        // watches and favourites
        WatchStatusChanged.self, WatchPriceChanged.self, FavouriteAdded.self, FavouriteRemoved.self,
        // saved searches
        SavedSearchCreated.self, SavedSearchChanged.self, SavedSearchDeleted.self, SavedSearchMatched.self,
        // security
        SignedIn.self, PasswordChanged.self, SecondFactorEnabled.self, SecondFactorDisabled.self, EmailChanged.self, SignedOut.self, SignInLinked.self, SignInUnlinked.self,
        RecoveryCodesRenewed.self, SignInAttemptsFailed.self, RefreshTokenReused.self, AccountBlocked.self, AccountClosed.self, PersonErased.self,
        // preferences
        NotificationPreferenceChanged.self,
        // the bell
        NotificationRead.self, AllNotificationsRead.self, NotificationDeleted.self, AllNotificationsDeleted.self,
        LegacyNotificationImported.self,
        // shops and blocks
        ShopMemberAdded.self, ShopMemberRemoved.self, PersonBlocked.self, PersonUnblocked.self, ShopBlocked.self, ShopUnblocked.self,
    ]

    /// A registry that knows every type of the catalogue (and the upcasters of their old shapes).
    public static let registry: EventTypeRegistry = {
        var registry = EventTypeRegistry()
        for type in eventTypes { registry.register(type) }
        return registry
    }()

    public static func isKnown(_ type: String) -> Bool { registry.isKnown(type) }
}

/// Stream names, in one place so producers and tests agree.
public enum Streams {
    public static func conversation(_ id: String) -> String { "conversation-\(id)" }
    public static func order(_ id: String) -> String { "order-\(id)" }
    public static func watch(_ id: String) -> String { "watch-\(id)" }
    public static func favourites(_ personId: String) -> String { "person-\(personId)-favourites" }
    public static func savedSearch(_ id: String) -> String { "saved-search-\(id)" }
    public static func security(_ personId: String) -> String { "person-\(personId)-security" }
    public static func preferences(_ personId: String) -> String { "person-\(personId)-preferences" }
    public static func bell(_ personId: String) -> String { "person-\(personId)-bell" }
    public static func shop(_ id: String) -> String { "shop-\(id)" }
    public static func blocks(_ personId: String) -> String { "person-\(personId)-blocks" }
}
