/// Where a watch stands in the catalogue.
public enum WatchStatus: String, Codable, Sendable, Hashable, CaseIterable {
    case forSale = "for_sale"
    case sold
    case offline
    case deleted
}

/// The catalogue tier changed a watch's status.
public struct WatchStatusChanged: CatalogueEvent, Hashable {
    public static let eventType = "watch_status_changed"
    public var watchId: String
    public var shopId: String
    public var status: WatchStatus
    public var streamId: String { Streams.watch(watchId) }

    public init(watchId: String, shopId: String, status: WatchStatus) {
        self.watchId = watchId
        self.shopId = shopId
        self.status = status
    }
}

/// The shop changed a watch's asking price.
public struct WatchPriceChanged: CatalogueEvent, Hashable {
    public static let eventType = "watch_price_changed"
    public var watchId: String
    public var shopId: String
    public var price: Money
    public var previousPrice: Money?
    public var streamId: String { Streams.watch(watchId) }

    public init(watchId: String, shopId: String, price: Money, previousPrice: Money?) {
        self.watchId = watchId
        self.shopId = shopId
        self.price = price
        self.previousPrice = previousPrice
    }
}

/// A person saved a watch (a favourite); they hear when it drops in price or is sold.
public struct FavouriteAdded: CatalogueEvent, Hashable {
    public static let eventType = "favourite_added"
    public var personId: String
    public var watchId: String
    public var streamId: String { Streams.favourites(personId) }

    public init(personId: String, watchId: String) {
        self.personId = personId
        self.watchId = watchId
    }
}

public struct FavouriteRemoved: CatalogueEvent, Hashable {
    public static let eventType = "favourite_removed"
    public var personId: String
    public var watchId: String
    public var streamId: String { Streams.favourites(personId) }

    public init(personId: String, watchId: String) {
        self.personId = personId
        self.watchId = watchId
    }
}
