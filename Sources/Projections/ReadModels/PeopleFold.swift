import Foundation
import InboxDomain

/// The pure middle of `PeopleProjection`: a batch's events in, the rows to write out. No keys are
/// loaded: each pair ends the batch present or absent whatever it was before (the last event
/// decides), and a blocked account is written only if it is not there yet.
struct PeopleFold {
    struct Pair: Hashable {
        let first: String
        let second: String
    }

    /// Shop and person: present (true) or absent (false) after the batch.
    private(set) var members: [Pair: Bool] = [:]
    /// Blocker and blocked: present (true) or absent (false) after the batch.
    private(set) var blocks: [Pair: Bool] = [:]
    /// The first block of each account in the batch (a later one in the log changes nothing).
    private(set) var blockedAccounts: [String: (reason: String?, at: Date)] = [:]
    /// The people erased in the batch (`person_erased`): the reasons of their blocks go.
    private(set) var erasedPeople: Set<String> = []

    static let rules: FoldRules<Void, PeopleFold> = {
        var rules = FoldRules<Void, PeopleFold>(ignoring: [
            ConversationStarted.self, MessageSent.self, ConversationRead.self, ConversationArchived.self,
            ConversationUnarchived.self, ConversationMarkedNoReplyNeeded.self, ConversationClosedByBlock.self, ConversationReopened.self,
            AccountClosed.self, ShopBlocked.self, ShopUnblocked.self,
            OrderPaid.self, OrderShipped.self, OrderDelivered.self, OrderCancelled.self, OrderRefunded.self,
            WatchStatusChanged.self, WatchPriceChanged.self, FavouriteAdded.self, FavouriteRemoved.self,
            SavedSearchCreated.self, SavedSearchChanged.self, SavedSearchDeleted.self, SavedSearchMatched.self,
            SignedIn.self, PasswordChanged.self, SecondFactorEnabled.self, SecondFactorDisabled.self, EmailChanged.self, SignedOut.self, SignInLinked.self, SignInUnlinked.self, RecoveryCodesRenewed.self, SignInAttemptsFailed.self, RefreshTokenReused.self,
            NotificationPreferenceChanged.self,
            NotificationRead.self, AllNotificationsRead.self, NotificationDeleted.self, AllNotificationsDeleted.self,
            LegacyNotificationImported.self,
        ])
        rules.on(ShopMemberAdded.self) { fold, e, _ in fold.members[Pair(first: e.shopId, second: e.personId)] = true }
        rules.on(ShopMemberRemoved.self) { fold, e, _ in fold.members[Pair(first: e.shopId, second: e.personId)] = false }
        rules.on(PersonBlocked.self) { fold, e, _ in fold.blocks[Pair(first: e.blockerId, second: e.blockedId)] = true }
        rules.on(PersonUnblocked.self) { fold, e, _ in fold.blocks[Pair(first: e.blockerId, second: e.blockedId)] = false }
        rules.on(PersonErased.self) { fold, e, _ in
            fold.erasedPeople.insert(e.personId)
            if let blocked = fold.blockedAccounts[e.personId] { fold.blockedAccounts[e.personId] = (nil, blocked.at) }
        }
        rules.on(AccountBlocked.self) { fold, e, event in
            if fold.blockedAccounts[e.personId] == nil { fold.blockedAccounts[e.personId] = (e.reason?.text, event.record.recordedAt) }
        }
        return rules
    }()

    /// What `events` make of the people tables.
    static func fold(_ events: [ProjectedEvent]) throws -> PeopleFold {
        try rules.fold(events, from: PeopleFold())
    }
}
