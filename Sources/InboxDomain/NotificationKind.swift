/// Every notification the tier makes: its word (`event` in the bell and the push), its category
/// (`type`, the preference switch that governs it) and whom it is for. The word tables of the
/// bell, the push and the mail switch over it, so a kind without words in one of them does not
/// compile.
public enum NotificationKind: Sendable, Hashable, CaseIterable {
    // About the person themselves: the bell, and push and mail as their preferences allow.
    case messageReceived
    case offerMade
    case orderPaid
    case orderShipped
    case orderDelivered
    case orderCancelled
    case orderRefunded
    case priceDropped
    case watchSold
    case savedSearchMatched
    case newSignIn
    case passwordChanged
    case secondFactorEnabled
    case secondFactorDisabled
    case emailChanged
    case signedOut
    case signInLinked
    case signInUnlinked
    case recoveryCodesRenewed
    case signInAttemptsFailed
    case refreshTokenReused
    // A shop's news, for each person who works at the shop: push and mail only, never the bell.
    case shopMessageReceived
    case shopOfferMade
    case shopOrderPaid
    case shopUnanswered
    // Retired: still on older bell entries (imported), never made or sent any more.
    case offerAccepted
    case offerReceived
    case offerRefused

    /// Whom a notification is about: the person themselves, or a shop somebody works at.
    public enum Audience: String, Sendable, Hashable {
        case person
        case shop
    }

    /// The word the bell and the push call it by (`event`).
    public var word: String {
        switch self {
        case .messageReceived, .shopMessageReceived: "message_received"
        case .offerMade, .shopOfferMade: "offer_made"
        case .orderPaid, .shopOrderPaid: "order_paid"
        case .orderShipped: "order_shipped"
        case .orderDelivered: "order_delivered"
        case .orderCancelled: "order_cancelled"
        case .orderRefunded: "order_refunded"
        case .priceDropped: "price_dropped"
        case .watchSold: "watch_sold"
        case .savedSearchMatched: "saved_search_matched"
        case .newSignIn: "new_sign_in"
        case .passwordChanged: "password_changed"
        case .secondFactorEnabled: "second_factor_enabled"
        case .secondFactorDisabled: "second_factor_disabled"
        case .emailChanged: "email_changed"
        case .signedOut: "signed_out"
        case .signInLinked: "sign_in_linked"
        case .signInUnlinked: "sign_in_unlinked"
        case .recoveryCodesRenewed: "recovery_codes_renewed"
        case .signInAttemptsFailed: "sign_in_attempts_failed"
        case .refreshTokenReused: "refresh_token_reused"
        case .shopUnanswered: "shop_unanswered"
        case .offerAccepted: "offer_accepted"
        case .offerReceived: "offer_received"
        case .offerRefused: "offer_refused"
        }
    }

    /// The preference switch that governs it (`type`).
    public var category: NotificationCategory {
        switch self {
        case .messageReceived, .offerMade, .offerAccepted, .offerReceived, .offerRefused: .messages
        case .orderPaid, .orderShipped, .orderDelivered, .orderCancelled, .orderRefunded: .orders
        case .priceDropped, .watchSold: .savedWatches
        case .savedSearchMatched: .savedSearches
        case .newSignIn, .passwordChanged, .secondFactorEnabled, .secondFactorDisabled, .emailChanged, .signedOut, .signInLinked, .signInUnlinked, .recoveryCodesRenewed,
            .signInAttemptsFailed, .refreshTokenReused: .security
        case .shopMessageReceived, .shopOfferMade, .shopOrderPaid, .shopUnanswered: .shop
        }
    }

    public var audience: Audience {
        category == .shop ? .shop : .person
    }

    /// False for the retired kinds, which only older bell entries carry.
    public var isSent: Bool {
        switch self {
        case .offerAccepted, .offerReceived, .offerRefused: false
        default: true
        }
    }

    /// The kind a stored word names for `audience`; nil for a word this release does not know
    /// (a legacy entry's own, or a newer release's).
    public init?(word: String, audience: Audience) {
        guard let kind = Self.byWord[audience]?[word] else { return nil }
        self = kind
    }

    private static let byWord: [Audience: [String: NotificationKind]] = {
        var table: [Audience: [String: NotificationKind]] = [:]
        for kind in allCases { table[kind.audience, default: [:]][kind.word] = kind }
        return table
    }()
}
