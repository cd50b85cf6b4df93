import EventLog
import Foundation
import InboxDomain
import Projections

/// A deterministic stream of plausible marketplace events, for tests and benchmarks: buyers write
/// to shops about watches and read the answers, orders are paid and shipped, watches change price,
/// saved searches match, people sign in, change preferences and clear their bells.
///
/// Every event is valid for the catalogue and refers only to things that exist (a message is in a
/// started conversation, a read mark names a message of it). Bell marks name the entries the bell
/// projection will make, predicted from the positions the events will get, which holds when the
/// stream is appended in order, by one writer, starting at `firstPosition`.
public struct MarketplaceSimulation: Sendable {
    public struct Configuration: Sendable {
        public var people: Int
        public var shops: Int
        public var watches: Int
        public var seed: UInt64
        /// The log position the first event will get.
        public var firstPosition: Int64

        public init(people: Int = 1000, shops: Int = 50, watches: Int = 2000, seed: UInt64 = 42, firstPosition: Int64 = 1) {
            self.people = max(2, people)
            self.shops = max(1, shops)
            self.watches = max(1, watches)
            self.seed = seed
            self.firstPosition = firstPosition
        }
    }

    struct Conversation {
        var id: String
        var buyer: String
        var shop: String
        var watch: String
        var messages: [String] = []
        var closed = false
    }

    struct Watch {
        var id: String
        var shop: String
        var price: Int64
        var status: WatchStatus = .forSale
    }

    public let configuration: Configuration
    private var random: SplitMix64
    private var position: Int64
    private var pending: [NewEvent] = []
    private var conversations: [Conversation] = []
    private var conversationIndex: [String: Int] = [:]
    private var watches: [Watch] = []
    private var members: [String: [String]] = [:]
    private var favourites: [String: Set<String>] = [:]
    private var searches: [String: (person: String, deleted: Bool)] = [:]
    private var searchIds: [String] = []
    private var bell: [String: [String]] = [:]
    /// The people with a bell, in the order they got one (a dictionary's order changes between runs).
    private var bellPeople: [String] = []
    private var counter = 0
    public let metadata = EventMetadata(origin: .api, service: "simulation")

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        random = SplitMix64(seed: configuration.seed)
        position = configuration.firstPosition
        for index in 0..<configuration.watches {
            let shop = "s\(index % configuration.shops)"
            watches.append(Watch(id: "w\(index)", shop: shop, price: Int64(100_000 + (index * 7919) % 900_000)))
        }
        // Every shop is run by one or two people.
        for shop in 0..<configuration.shops {
            for offset in 0...(shop % 2) {
                let person = "p\((shop * 7 + offset) % configuration.people)"
                members["s\(shop)", default: []].append(person)
                pending.append(Self.event(ShopMemberAdded(shopId: "s\(shop)", personId: person), metadata))
            }
        }
    }

    /// The next `count` events.
    public mutating func events(_ count: Int) -> [NewEvent] {
        var result: [NewEvent] = []
        result.reserveCapacity(count)
        while result.count < count { result.append(next()) }
        return result
    }

    public mutating func next() -> NewEvent {
        while pending.isEmpty { generate() }
        let event = pending.removeFirst()
        position += 1
        return event
    }

    /// The people the stream is about.
    public var people: [String] { (0..<configuration.people).map { "p\($0)" } }

    // MARK: Generation

    private mutating func person() -> String { "p\(Int.random(in: 0..<configuration.people, using: &random))" }

    private mutating func uniqueId(_ prefix: String) -> String {
        counter += 1
        return "\(prefix)\(counter)"
    }

    private static func event<E: CatalogueEvent>(_ event: E, _ metadata: EventMetadata) -> NewEvent {
        // The catalogue's types always encode.
        try! NewEvent(event, metadata: metadata)
    }

    /// Appends one event to `pending`, at the position it will get, and records what it does.
    private mutating func emit<E: CatalogueEvent>(_ event: E) {
        let at = position + Int64(pending.count)
        var facts = NotificationPlanner.Facts()
        switch event {
        case let message as MessageSent:
            if let index = conversationIndex[message.conversationId] {
                let c = conversations[index]
                facts.conversation = .init(buyerId: c.buyer, shopId: c.shop, watchId: c.watch, kind: .watch, isClosed: c.closed)
            }
        case let change as WatchPriceChanged: facts.favouriters = Array(favourites[change.watchId] ?? [])
        case let change as WatchStatusChanged: facts.favouriters = Array(favourites[change.watchId] ?? [])
        case let match as SavedSearchMatched:
            facts.savedSearchExists = searches[match.savedSearchId].map { !$0.deleted && $0.person == match.personId } ?? false
        default: break
        }
        for notification in NotificationPlanner.notifications(for: event, facts: facts) where notification.isInBell {
            if case .person(let person) = notification.audience {
                if bell[person] == nil { bellPeople.append(person) }
                bell[person, default: []].append(BellProjection.notificationId(position: at, recipient: person))
            }
        }
        pending.append(Self.event(event, metadata))
    }

    private mutating func generate() {
        let roll = Int.random(in: 0..<1000, using: &random)
        if conversations.count < 10 { return startConversation() }
        switch roll {
        case 0..<60: startConversation()
        case 60..<440: sendMessage()
        case 440..<620: readConversation()
        case 620..<640: archive()
        case 640..<650: markNoReplyNeeded()
        case 650..<700: order()
        case 700..<740: favourite()
        case 740..<770: changeWatch()
        case 770..<830: savedSearch()
        case 830..<860: security()
        case 860..<880: preference()
        case 880..<990: bellOperation()
        default: blockOrMembership()
        }
    }

    private mutating func startConversation() {
        let watch = watches[Int.random(in: 0..<watches.count, using: &random)]
        let conversation = Conversation(id: uniqueId("c"), buyer: person(), shop: watch.shop, watch: watch.id)
        conversationIndex[conversation.id] = conversations.count
        conversations.append(conversation)
        emit(ConversationStarted(conversationId: conversation.id, buyerId: conversation.buyer, shopId: watch.shop, watchId: watch.id))
        sendMessage(in: conversations.count - 1, side: .buyer)
    }

    private mutating func someConversation() -> Int? {
        guard !conversations.isEmpty else { return nil }
        // Recent threads are busier than old ones.
        let recent = min(conversations.count, 200)
        if Bool.random(using: &random) { return conversations.count - 1 - Int.random(in: 0..<recent, using: &random) }
        return Int.random(in: 0..<conversations.count, using: &random)
    }

    private mutating func sendMessage(in chosen: Int? = nil, side: AuthorSide? = nil) {
        guard let index = chosen ?? someConversation(), !conversations[index].closed else { return startConversation() }
        let c = conversations[index]
        let author = side ?? (Int.random(in: 0..<20, using: &random) == 0 ? .wristler : Bool.random(using: &random) ? .buyer : .seller)
        let authorId = author == .buyer ? c.buyer : author == .seller ? (members[c.shop]?.first ?? c.shop) : "wristler-agent"
        let id = uniqueId("m")
        let offer = Int.random(in: 0..<10, using: &random) == 0 ? Money(amount: Int64.random(in: 50_000...900_000, using: &random), currency: "EUR") : nil
        let handles = Int.random(in: 0..<15, using: &random) == 0 ? ["upload-\(id)"] : []
        emit(
            MessageSent(
                conversationId: c.id, messageId: id, authorSide: author, authorId: authorId,
                body: "Message \(id) about \(c.watch): is the bracelet original?", attachmentHandles: handles, offer: offer))
        conversations[index].messages.append(id)
    }

    private mutating func readConversation() {
        guard let index = someConversation(), let last = conversations[index].messages.last else { return sendMessage() }
        let c = conversations[index]
        let side: ConversationSide = Bool.random(using: &random) ? .buyer : .seller
        let upTo = Int.random(in: 0..<4, using: &random) == 0 ? c.messages[Int.random(in: 0..<c.messages.count, using: &random)] : last
        emit(
            ConversationRead(
                conversationId: c.id, side: side, personId: side == .buyer ? c.buyer : (members[c.shop]?.first ?? c.shop), upToMessageId: upTo))
    }

    private mutating func archive() {
        guard let index = someConversation() else { return startConversation() }
        let c = conversations[index]
        let side: ConversationSide = Bool.random(using: &random) ? .buyer : .seller
        let who = side == .buyer ? c.buyer : (members[c.shop]?.first ?? c.shop)
        if Int.random(in: 0..<4, using: &random) == 0 {
            emit(ConversationUnarchived(conversationId: c.id, side: side, personId: who))
        } else {
            emit(ConversationArchived(conversationId: c.id, side: side, personId: who))
        }
    }

    private mutating func markNoReplyNeeded() {
        guard let index = someConversation() else { return startConversation() }
        let c = conversations[index]
        emit(ConversationMarkedNoReplyNeeded(conversationId: c.id, personId: members[c.shop]?.first ?? c.shop))
    }

    private mutating func order() {
        let order = uniqueId("o")
        let watch = watches[Int.random(in: 0..<watches.count, using: &random)]
        let buyer = person()
        let conversation = Bool.random(using: &random) ? someConversation().map { conversations[$0].id } : nil
        let amount = Money(amount: watch.price, currency: "EUR")
        emit(OrderPaid(orderId: order, buyerId: buyer, shopId: watch.shop, watchId: watch.id, conversationId: conversation, amount: amount))
        emit(OrderShipped(orderId: order, buyerId: buyer, shopId: watch.shop, watchId: watch.id, conversationId: conversation))
        switch Int.random(in: 0..<10, using: &random) {
        case 0: emit(OrderCancelled(orderId: order, buyerId: buyer, shopId: watch.shop, watchId: watch.id, conversationId: conversation))
        case 1: emit(OrderRefunded(orderId: order, buyerId: buyer, shopId: watch.shop, watchId: watch.id, conversationId: conversation, amount: amount))
        default: emit(OrderDelivered(orderId: order, buyerId: buyer, shopId: watch.shop, watchId: watch.id, conversationId: conversation))
        }
    }

    private mutating func favourite() {
        let who = person()
        let watch = watches[Int.random(in: 0..<watches.count, using: &random)].id
        if favourites[watch]?.contains(who) == true, Int.random(in: 0..<3, using: &random) == 0 {
            favourites[watch]?.remove(who)
            emit(FavouriteRemoved(personId: who, watchId: watch))
        } else {
            favourites[watch, default: []].insert(who)
            emit(FavouriteAdded(personId: who, watchId: watch))
        }
    }

    private mutating func changeWatch() {
        let index = Int.random(in: 0..<watches.count, using: &random)
        let watch = watches[index]
        if Int.random(in: 0..<4, using: &random) == 0 {
            let status = WatchStatus.allCases[Int.random(in: 0..<WatchStatus.allCases.count, using: &random)]
            watches[index].status = status
            emit(WatchStatusChanged(watchId: watch.id, shopId: watch.shop, status: status))
        } else {
            let price = max(1000, watch.price + Int64.random(in: -50_000...20_000, using: &random))
            watches[index].price = price
            emit(
                WatchPriceChanged(
                    watchId: watch.id, shopId: watch.shop, price: Money(amount: price, currency: "EUR"),
                    previousPrice: Money(amount: watch.price, currency: "EUR")))
        }
    }

    private mutating func savedSearch() {
        let roll = Int.random(in: 0..<10, using: &random)
        if searchIds.isEmpty || roll < 2 {
            let id = uniqueId("ss")
            let who = person()
            searches[id] = (who, false)
            searchIds.append(id)
            let interval = SavedSearchInterval.allCases[Int.random(in: 0..<4, using: &random)]
            emit(
                SavedSearchCreated(
                    savedSearchId: id, personId: who, name: "Search \(id)",
                    query: .object(["brand": .string("Rolex"), "maxPrice": .integer(Int64.random(in: 5_000...50_000, using: &random))]),
                    interval: interval, push: Bool.random(using: &random)))
            return
        }
        let id = searchIds[Int.random(in: 0..<searchIds.count, using: &random)]
        guard let search = searches[id] else { return }
        switch roll {
        case 2:
            emit(SavedSearchChanged(savedSearchId: id, personId: search.person, interval: .daily, push: Bool.random(using: &random)))
        case 3 where !search.deleted:
            searches[id] = (search.person, true)
            emit(SavedSearchDeleted(savedSearchId: id, personId: search.person))
        default:
            let count = Int.random(in: 1...3, using: &random)
            let found = (0..<count).map { _ in watches[Int.random(in: 0..<watches.count, using: &random)].id }
            emit(SavedSearchMatched(savedSearchId: id, personId: search.person, watchIds: found))
        }
    }

    private mutating func security() {
        let who = person()
        switch Int.random(in: 0..<6, using: &random) {
        case 0, 1, 2: emit(SignedIn(personId: who, signInId: uniqueId("si"), platform: "app:ios", device: "iPhone"))
        case 3: emit(PasswordChanged(personId: who))
        case 4:
            if Bool.random(using: &random) { emit(SecondFactorEnabled(personId: who)) } else { emit(SecondFactorDisabled(personId: who)) }
        default: emit(EmailChanged(personId: who))
        }
    }

    private mutating func preference() {
        let category = NotificationCategory.allCases[Int.random(in: 0..<NotificationCategory.allCases.count, using: &random)]
        let channel = NotificationChannel.allCases[Int.random(in: 0..<2, using: &random)]
        guard PreferenceRules.isSwitchable(category, channel) else { return preference() }
        emit(NotificationPreferenceChanged(personId: person(), category: category, channel: channel, enabled: Bool.random(using: &random)))
    }

    private mutating func bellOperation() {
        // Somebody whose bell has entries, most of the time.
        guard let someone = bellPeople.randomElement(using: &random) else { return security() }
        let who = Int.random(in: 0..<5, using: &random) == 0 ? person() : someone
        let entries = bell[who] ?? []
        let roll = Int.random(in: 0..<100, using: &random)
        if roll < 70, let id = entries.randomElement(using: &random) {
            emit(NotificationRead(personId: who, notificationId: id))
        } else if roll < 85, let id = entries.randomElement(using: &random) {
            bell[who]?.removeAll { $0 == id }
            emit(NotificationDeleted(personId: who, notificationId: id))
        } else if roll < 97 {
            emit(AllNotificationsRead(personId: who))
        } else {
            bell[who] = []
            emit(AllNotificationsDeleted(personId: who))
        }
    }

    private mutating func blockOrMembership() {
        switch Int.random(in: 0..<4, using: &random) {
        case 3:
            emit(AccountBlocked(personId: person(), reason: "fraud"))
        case 0:
            guard let index = someConversation(), !conversations[index].closed else { return }
            let c = conversations[index]
            conversations[index].closed = true
            emit(PersonBlocked(blockerId: c.buyer, blockedId: members[c.shop]?.first ?? c.shop))
            emit(ConversationClosedByBlock(conversationId: c.id, blockerId: c.buyer, blockedId: members[c.shop]?.first ?? c.shop))
        case 1:
            let shop = "s\(Int.random(in: 0..<configuration.shops, using: &random))"
            let who = person()
            if members[shop]?.contains(who) == true {
                members[shop]?.removeAll { $0 == who }
                emit(ShopMemberRemoved(shopId: shop, personId: who))
            } else {
                members[shop, default: []].append(who)
                emit(ShopMemberAdded(shopId: shop, personId: who))
            }
        default:
            emit(
                LegacyNotificationImported(
                    personId: person(), notificationId: uniqueId("legacy-"), category: .messages,
                    event: ["offer_accepted", "offer_received", "offer_refused"][Int.random(in: 0..<3, using: &random)],
                    ids: ["conversationId": conversations.first?.id ?? "c0"], createdAt: "2024-05-01T10:00:00Z", read: Bool.random(using: &random)))
        }
    }
}

/// A small, fast, seedable generator (SplitMix64), so a seed always gives the same stream.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64

    public init(seed: UInt64) { state = seed }

    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
