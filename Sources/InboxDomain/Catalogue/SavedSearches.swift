/// How often a saved search reports new matches by mail: at once, in a daily or weekly digest, or
/// never. Pushes follow the search's own `push` switch.
public enum SavedSearchInterval: String, Codable, Sendable, Hashable, CaseIterable {
    case instant
    case daily
    case weekly
    case never
}

/// `name` is the person's personal data (sealed under their key in the log).
public struct SavedSearchCreated: CatalogueEvent, Hashable, HoldsPersonalData {
    public static let eventType = "saved_search_created"
    public var savedSearchId: String
    public var personId: String
    public var name: PersonalText
    /// The search itself, as the catalogue tier understands it; stored as given.
    public var query: JSONValue
    public var interval: SavedSearchInterval
    public var push: Bool
    public var streamId: String { Streams.savedSearch(savedSearchId) }

    public init(savedSearchId: String, personId: String, name: String, query: JSONValue, interval: SavedSearchInterval, push: Bool) {
        self.savedSearchId = savedSearchId
        self.personId = personId
        self.name = .text(name)
        self.query = query
        self.interval = interval
        self.push = push
    }

    public var personalDataOwner: String { personId }
    public static let personalFields = ["name"]
}

/// Some of a saved search's settings changed; absent fields keep their value.
public struct SavedSearchChanged: CatalogueEvent, Hashable, HoldsPersonalData {
    public static let eventType = "saved_search_changed"
    public var savedSearchId: String
    public var personId: String
    public var name: PersonalText?
    public var query: JSONValue?
    public var interval: SavedSearchInterval?
    public var push: Bool?
    public var streamId: String { Streams.savedSearch(savedSearchId) }

    public init(
        savedSearchId: String, personId: String, name: String? = nil, query: JSONValue? = nil,
        interval: SavedSearchInterval? = nil, push: Bool? = nil
    ) {
        self.savedSearchId = savedSearchId
        self.personId = personId
        self.name = name.map(PersonalText.text)
        self.query = query
        self.interval = interval
        self.push = push
    }

    public var personalDataOwner: String { personId }
    public static let personalFields = ["name"]
}

public struct SavedSearchDeleted: CatalogueEvent, Hashable {
    public static let eventType = "saved_search_deleted"
    public var savedSearchId: String
    public var personId: String
    public var streamId: String { Streams.savedSearch(savedSearchId) }

    public init(savedSearchId: String, personId: String) {
        self.savedSearchId = savedSearchId
        self.personId = personId
    }
}

/// The catalogue tier found new watches for a saved search.
public struct SavedSearchMatched: CatalogueEvent, Hashable {
    public static let eventType = "saved_search_matched"
    public var savedSearchId: String
    public var personId: String
    public var watchIds: [String]
    public var streamId: String { Streams.savedSearch(savedSearchId) }

    public init(savedSearchId: String, personId: String, watchIds: [String]) {
        self.savedSearchId = savedSearchId
        self.personId = personId
        self.watchIds = watchIds
    }
}
