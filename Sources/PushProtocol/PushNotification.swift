import InboxDomain

/// One notification as a push carries it, before it is put into words: what the fan-out reads from
/// the outbox. The same value goes to every device of its person; only the language and the badge
/// differ per device.
public struct PushNotification: Sendable, Hashable {
    public var kind: NotificationKind
    /// The ids its screen needs, all strings, only those the event has. A shop's news holds its
    /// `sellerId` here (the planner puts it there).
    public var ids: [String: String]
    /// The notification's id in the outbox: the bell entry's for a notification about the person
    /// (`data.notificationId`), the shop news' own otherwise (never shown: it has no bell entry).
    /// A push without a collapse key of its own collapses on it, so that a copy sent again after a
    /// crash replaces the first on the lock screen.
    public var notificationId: String

    public init(kind: NotificationKind, ids: [String: String], notificationId: String) {
        self.kind = kind
        self.ids = ids
        self.notificationId = notificationId
    }

    /// The category (`data.type`): the preference switch that governs it.
    public var category: NotificationCategory { kind.category }
    /// What happened (`data.event`), the word the bell uses too.
    public var event: String { kind.word }

    /// Whether it is a shop's news: about the shop somebody works at, not about them, so its words
    /// are the seller's side and the app switches into the shop (`side: "seller"`, `sellerId`).
    public var isShopNews: Bool { kind.audience == .shop }

    /// The shop a shop's news is about; nil for everything else.
    public var sellerId: String? { isShopNews ? ids["sellerId"] : nil }
}

extension Language {
    /// The language of a registration's `locale` (`nl`, `nl-NL`, `nl_BE`, `de-CH`, `FR`): its
    /// primary subtag when it is one of ours, English for anything else and for no locale.
    /// Byte by byte, because it runs once per device per push.
    public init(locale: String?) {
        guard let locale else {
            self = .en
            return
        }
        var utf8 = locale.utf8.makeIterator()
        // Two ASCII letters, then the end or a separator: a three-letter subtag ("nds") is not "nl".
        guard let first = utf8.next(), let second = utf8.next() else {
            self = .en
            return
        }
        if let third = utf8.next(), third != UInt8(ascii: "-"), third != UInt8(ascii: "_") {
            self = .en
            return
        }
        switch (first | 0x20, second | 0x20) {
        case (UInt8(ascii: "n"), UInt8(ascii: "l")): self = .nl
        case (UInt8(ascii: "d"), UInt8(ascii: "e")): self = .de
        case (UInt8(ascii: "f"), UInt8(ascii: "r")): self = .fr
        default: self = .en
        }
    }
}
