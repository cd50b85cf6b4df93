/// The facts every order event carries: who bought which watch from which shop, and the
/// conversation it came from, if any.
public protocol OrderEvent: CatalogueEvent {
    var orderId: String { get }
    var buyerId: String { get }
    var shopId: String { get }
    var watchId: String { get }
    var conversationId: String? { get }
}

extension OrderEvent {
    public var streamId: String { Streams.order(orderId) }
}

/// The buyer paid for an order (the orders tier reports it once the payment has cleared).
public struct OrderPaid: OrderEvent, Hashable {
    public static let eventType = "order_paid"
    public var orderId: String
    public var buyerId: String
    public var shopId: String
    public var watchId: String
    public var conversationId: String?
    public var amount: Money

    public init(orderId: String, buyerId: String, shopId: String, watchId: String, conversationId: String? = nil, amount: Money) {
        self.orderId = orderId
        self.buyerId = buyerId
        self.shopId = shopId
        self.watchId = watchId
        self.conversationId = conversationId
        self.amount = amount
    }
}

public struct OrderShipped: OrderEvent, Hashable {
    public static let eventType = "order_shipped"
    public var orderId: String
    public var buyerId: String
    public var shopId: String
    public var watchId: String
    public var conversationId: String?
    public var trackingUrl: String?

    public init(orderId: String, buyerId: String, shopId: String, watchId: String, conversationId: String? = nil, trackingUrl: String? = nil) {
        self.orderId = orderId
        self.buyerId = buyerId
        self.shopId = shopId
        self.watchId = watchId
        self.conversationId = conversationId
        self.trackingUrl = trackingUrl
    }
}

public struct OrderDelivered: OrderEvent, Hashable {
    public static let eventType = "order_delivered"
    public var orderId: String
    public var buyerId: String
    public var shopId: String
    public var watchId: String
    public var conversationId: String?

    public init(orderId: String, buyerId: String, shopId: String, watchId: String, conversationId: String? = nil) {
        self.orderId = orderId
        self.buyerId = buyerId
        self.shopId = shopId
        self.watchId = watchId
        self.conversationId = conversationId
    }
}

public struct OrderCancelled: OrderEvent, Hashable {
    public static let eventType = "order_cancelled"
    public var orderId: String
    public var buyerId: String
    public var shopId: String
    public var watchId: String
    public var conversationId: String?
    public var reason: String?

    public init(orderId: String, buyerId: String, shopId: String, watchId: String, conversationId: String? = nil, reason: String? = nil) {
        self.orderId = orderId
        self.buyerId = buyerId
        self.shopId = shopId
        self.watchId = watchId
        self.conversationId = conversationId
        self.reason = reason
    }
}

public struct OrderRefunded: OrderEvent, Hashable {
    public static let eventType = "order_refunded"
    public var orderId: String
    public var buyerId: String
    public var shopId: String
    public var watchId: String
    public var conversationId: String?
    public var amount: Money

    public init(orderId: String, buyerId: String, shopId: String, watchId: String, conversationId: String? = nil, amount: Money) {
        self.orderId = orderId
        self.buyerId = buyerId
        self.shopId = shopId
        self.watchId = watchId
        self.conversationId = conversationId
        self.amount = amount
    }
}
