/// What a person chose for one saved search: how often it mails, and whether it pushes.
public struct SavedSearchSettings: Sendable, Hashable {
    public var interval: SavedSearchInterval
    public var push: Bool

    public init(interval: SavedSearchInterval, push: Bool) {
        self.interval = interval
        self.push = push
    }
}

/// The rules of the notification preferences, without storage: which switches exist, which are
/// locked on, and which channels a notification goes to given a person's choices.
///
/// - Every category is on, on every channel, unless the person turned it off.
/// - `security` and `orders` push are locked on: a stored "off" for them is ignored.
/// - `saved_searches` has no switches of its own: each search decides (`push`, and `interval` for
///   mail, `never` meaning no mail).
/// - `shop` reaches only people who work at the shop, and never the bell.
/// - The bell itself is not a channel: every notification about the person lands there.
public enum PreferenceRules {
    /// Whether the channel of the category cannot be turned off.
    public static func isLocked(_ category: NotificationCategory, _ channel: NotificationChannel) -> Bool {
        channel == .push && (category == .security || category == .orders)
    }

    /// Whether the category is governed per saved search rather than by a switch.
    public static func isManagedPerSearch(_ category: NotificationCategory) -> Bool {
        category == .savedSearches
    }

    /// Whether the person can change the switch at `/v1/me/notification-preferences`.
    public static func isSwitchable(_ category: NotificationCategory, _ channel: NotificationChannel) -> Bool {
        !isLocked(category, channel) && !isManagedPerSearch(category)
    }

    /// The state of a switch given what the person stored (nil: never touched).
    public static func isEnabled(_ category: NotificationCategory, _ channel: NotificationChannel, stored: Bool?) -> Bool {
        if isLocked(category, channel) { return true }
        return stored ?? true
    }

    /// The channels a notification of `category` goes to. `stored` is the person's switch for a
    /// channel (nil when never touched); `savedSearch` is the search a saved-search notification is
    /// about (nil when it is gone: nothing is sent for a deleted search).
    public static func channels(
        for category: NotificationCategory, stored: (NotificationChannel) -> Bool?, savedSearch: SavedSearchSettings? = nil
    ) -> Set<NotificationChannel> {
        if isManagedPerSearch(category) {
            guard let savedSearch else { return [] }
            var channels: Set<NotificationChannel> = []
            if savedSearch.push { channels.insert(.push) }
            if savedSearch.interval != .never { channels.insert(.email) }
            return channels
        }
        return Set(NotificationChannel.allCases.filter { isEnabled(category, $0, stored: stored($0)) })
    }
}

/// What the decision of one notification for one person reads: the facts about the person as they
/// stood at the notification's place in the log (`BellFold` folds them in log order).
public struct RecipientFacts: Sendable, Hashable {
    /// Wristler blocked the account: it is neither pushed nor mailed anything.
    public var isBlocked: Bool
    /// The switches the person changed (absent: never touched, so on).
    public var switches: [NotificationCategory: [NotificationChannel: Bool]]

    public init(isBlocked: Bool = false, switches: [NotificationCategory: [NotificationChannel: Bool]] = [:]) {
        self.isBlocked = isBlocked
        self.switches = switches
    }
}

/// Why a person gets a notification on a channel not at all. The counters of the fan-out and the
/// mailer are named after it (`skipped.<reason>`).
public enum SkipReason: String, Sendable, Hashable, CaseIterable {
    /// Wristler blocked the account.
    case blocked
    /// The person's switch (or their saved search's `push` or `interval`) is off.
    case preferenceOff = "preference_off"
    /// A shop's news for a shop nobody works at.
    case noMember = "no_member"
}

/// How one notification reaches one person besides the bell, decided once, as of its place in the
/// log: the push (nil: to every device the person has when it is sent) and the mail.
public struct NotificationDelivery: Sendable, Hashable {
    /// Why it is not pushed; nil: it is.
    public var pushSkipped: SkipReason?
    /// The mail it joins; nil when its kind is never mailed.
    public var mail: MailStream?
    /// Why it is not mailed (with `mail` set); nil: it is.
    public var mailSkipped: SkipReason?

    public init(pushSkipped: SkipReason?, mail: MailStream?, mailSkipped: SkipReason?) {
        self.pushSkipped = pushSkipped
        self.mail = mail
        self.mailSkipped = mailSkipped
    }

    /// Whether it is mailed.
    public var isMailed: Bool { mail != nil && mailSkipped == nil }

    /// The decision for `person` of a notification of `kind` with `ids`: `PreferenceRules` on the
    /// person's facts. `savedSearch` is the search a match is about, when it exists and is the
    /// person's (nil otherwise: nothing is sent for it).
    public static func decide(
        _ kind: NotificationKind, ids: [String: String], facts: RecipientFacts, savedSearch: SavedSearchSettings? = nil
    ) -> NotificationDelivery {
        let mail = MailStream.of(kind, ids: ids)
        if facts.isBlocked { return NotificationDelivery(pushSkipped: .blocked, mail: mail, mailSkipped: mail.map { _ in .blocked }) }
        // `PreferenceRules.channels`, without building its set: this runs for every person of every
        // notification a projection enqueues.
        let category = kind.category
        let pushes: Bool, mails: Bool
        if PreferenceRules.isManagedPerSearch(category) {
            pushes = savedSearch?.push ?? false
            mails = savedSearch.map { $0.interval != .never } ?? false
        } else {
            let stored = facts.switches[category]
            pushes = PreferenceRules.isEnabled(category, .push, stored: stored?[.push])
            mails = PreferenceRules.isEnabled(category, .email, stored: stored?[.email])
        }
        return NotificationDelivery(
            pushSkipped: pushes ? nil : .preferenceOff, mail: mail, mailSkipped: mail == nil || mails ? nil : .preferenceOff)
    }

    /// A shop's news for a shop nobody works at: counted on every channel, sent on none.
    public static func nobody(_ kind: NotificationKind, ids: [String: String]) -> NotificationDelivery {
        let mail = MailStream.of(kind, ids: ids)
        return NotificationDelivery(pushSkipped: .noMember, mail: mail, mailSkipped: mail.map { _ in .noMember })
    }
}

/// The facts the decision of a notification reads about its people, as they stood at one place
/// in the log: who works at which shop, the switches people changed, the accounts Wristler blocked,
/// and the saved searches.
public struct AudienceFacts: Sendable {
    /// A saved search as its notifications need it.
    public struct Search: Sendable, Hashable {
        public var personId: String
        public var deleted: Bool
        public var settings: SavedSearchSettings

        public init(personId: String, deleted: Bool, settings: SavedSearchSettings) {
            self.personId = personId
            self.deleted = deleted
            self.settings = settings
        }
    }

    /// Who works at each shop.
    public var members: [String: Set<String>] = [:]
    /// The switches people changed (absent: never touched, so on).
    public var switches: [String: [NotificationCategory: [NotificationChannel: Bool]]] = [:]
    /// Accounts Wristler blocked.
    public var blocked: Set<String> = []
    public var searches: [String: Search] = [:]

    public init() {}

    /// Whether the search was created for `person` and is not deleted.
    public func searchExists(_ id: String, of person: String) -> Bool {
        searches[id].map { !$0.deleted && $0.personId == person } ?? false
    }

    /// Everybody who works at `shop`, in order.
    public func members(of shop: String) -> [String] {
        guard let people = members[shop] else { return [] }
        return people.count == 1 ? Array(people) : people.sorted()
    }

    /// How a notification of `kind` with `ids` reaches `person`, by these facts.
    public func delivery(_ kind: NotificationKind, ids: [String: String], for person: String) -> NotificationDelivery {
        var savedSearch: SavedSearchSettings?
        if kind == .savedSearchMatched, let id = ids["savedSearchId"], searchExists(id, of: person) { savedSearch = searches[id]?.settings }
        return NotificationDelivery.decide(
            kind, ids: ids, facts: RecipientFacts(isBlocked: blocked.contains(person), switches: switches[person] ?? [:]), savedSearch: savedSearch)
    }
}
