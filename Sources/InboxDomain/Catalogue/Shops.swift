/// A person starts working at a shop: they see its inbox (the seller side) and hear its news.
public struct ShopMemberAdded: CatalogueEvent, Hashable {
    public static let eventType = "shop_member_added"
    public var shopId: String
    public var personId: String
    public var streamId: String { Streams.shop(shopId) }

    public init(shopId: String, personId: String) {
        self.shopId = shopId
        self.personId = personId
    }
}

public struct ShopMemberRemoved: CatalogueEvent, Hashable {
    public static let eventType = "shop_member_removed"
    public var shopId: String
    public var personId: String
    public var streamId: String { Streams.shop(shopId) }

    public init(shopId: String, personId: String) {
        self.shopId = shopId
        self.personId = personId
    }
}

/// One person blocked another. The tier that records the block also closes their conversations
/// (`conversation_closed_by_block`), which is what stops notifications between them.
public struct PersonBlocked: CatalogueEvent, Hashable {
    public static let eventType = "person_blocked"
    public var blockerId: String
    public var blockedId: String
    public var streamId: String { Streams.blocks(blockerId) }

    public init(blockerId: String, blockedId: String) {
        self.blockerId = blockerId
        self.blockedId = blockedId
    }
}

public struct PersonUnblocked: CatalogueEvent, Hashable {
    public static let eventType = "person_unblocked"
    public var blockerId: String
    public var blockedId: String
    public var streamId: String { Streams.blocks(blockerId) }

    public init(blockerId: String, blockedId: String) {
        self.blockerId = blockerId
        self.blockedId = blockedId
    }
}

/// A person blocked a shop (as a buyer: nobody who works there can write to them). The tier that
/// records it closes their conversations with the shop (`conversation_closed_by_block`).
public struct ShopBlocked: CatalogueEvent, Hashable {
    public static let eventType = "shop_blocked"
    public var blockerId: String
    public var shopId: String
    public var streamId: String { Streams.blocks(blockerId) }

    public init(blockerId: String, shopId: String) {
        self.blockerId = blockerId
        self.shopId = shopId
    }
}

public struct ShopUnblocked: CatalogueEvent, Hashable {
    public static let eventType = "shop_unblocked"
    public var blockerId: String
    public var shopId: String
    public var streamId: String { Streams.blocks(blockerId) }

    public init(blockerId: String, shopId: String) {
        self.blockerId = blockerId
        self.shopId = shopId
    }
}
