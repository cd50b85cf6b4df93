/// Which of a person's mails a queued notification waits for (`mail_people.stream`,
/// sql/015_mail_streams.sql). Each stream has its own queue, timing, claim and Message-ID, so a
/// daily saved-search mail never holds back the hourly notifications, nor the other way round.
public enum MailStream: Sendable, Hashable, CustomStringConvertible {
    /// Every category whose `email` switch is on, gathered: the first mail at once, then at most
    /// one per `MailOutboxStore.Settings.gather`.
    case notifications
    /// A saved search's new matches, at the search's interval.
    case search(savedSearchId: String)
    /// For somebody who works at the shop: the digest of what buyers wrote to it.
    case shopDigest(shopId: String)
    /// For somebody who works at a shop: "your watch was sold" (an order was paid), at once.
    case sold

    /// The key stored in `mail_people.stream` and `mail_queue.stream`.
    public var key: String {
        switch self {
        case .notifications: "notifications"
        case .search(let id): "search:" + id
        case .shopDigest(let id): "shop:" + id
        case .sold: "sold"
        }
    }

    public init?(key: String) {
        switch key {
        case "notifications": self = .notifications
        case "sold": self = .sold
        default:
            if key.hasPrefix("search:"), key.count > 7 {
                self = .search(savedSearchId: String(key.dropFirst(7)))
            } else if key.hasPrefix("shop:"), key.count > 5 {
                self = .shopDigest(shopId: String(key.dropFirst(5)))
            } else {
                return nil
            }
        }
    }

    public var description: String { key }

    /// Which mail a notification of `kind` goes to, if any: a person's own notifications are
    /// gathered (saved searches go per search), a shop's go to the people who work there as its
    /// digest (messages and offers) or as the sold mail (a paid order). The shop's reminder and the
    /// retired kinds are never mailed.
    public static func of(_ kind: NotificationKind, ids: [String: String]) -> MailStream? {
        switch kind {
        case .savedSearchMatched:
            ids["savedSearchId"].map { .search(savedSearchId: $0) }
        case .shopMessageReceived, .shopOfferMade:
            ids["sellerId"].map { .shopDigest(shopId: $0) }
        case .shopOrderPaid:
            .sold
        case .shopUnanswered, .offerAccepted, .offerReceived, .offerRefused:
            nil
        case .messageReceived, .offerMade, .orderPaid, .orderShipped, .orderDelivered, .orderCancelled, .orderRefunded, .priceDropped,
            .watchSold, .newSignIn, .passwordChanged, .secondFactorEnabled, .secondFactorDisabled, .emailChanged, .signedOut, .signInLinked, .signInUnlinked,
            .recoveryCodesRenewed, .signInAttemptsFailed, .refreshTokenReused:
            .notifications
        }
    }

    /// The saved search interval's window: how long the first match waits for others to join it
    /// in one mail. Nil for `never`, which mails nothing.
    public static func window(of interval: SavedSearchInterval) -> Duration? {
        switch interval {
        case .instant: .zero
        case .daily: .seconds(86_400)
        case .weekly: .seconds(604_800)
        case .never: nil
        }
    }
}
