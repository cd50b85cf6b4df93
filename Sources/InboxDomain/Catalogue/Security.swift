/// Security events come from the identity tier. They are locked on for push: a person always hears
/// that somebody signed in to their account.
/// `device` and `location` are the account's personal data (sealed under its key in the log).
public struct SignedIn: CatalogueEvent, Hashable, HoldsPersonalData {
    public static let eventType = "signed_in"
    public var personId: String
    public var signInId: String
    /// `app:ios`, `app:android` or `web`: where the sign-in happened.
    public var platform: String
    /// A description people recognise ("iPhone", "Firefox on Windows").
    public var device: PersonalText?
    /// Approximate place, as the identity tier resolved it ("Amsterdam, NL").
    public var location: PersonalText?
    public var streamId: String { Streams.security(personId) }

    public init(personId: String, signInId: String, platform: String, device: String? = nil, location: String? = nil) {
        self.personId = personId
        self.signInId = signInId
        self.platform = platform
        self.device = device.map(PersonalText.text)
        self.location = location.map(PersonalText.text)
    }

    public var personalDataOwner: String { personId }
    public static let personalFields = ["device", "location"]
}

public struct PasswordChanged: CatalogueEvent, Hashable {
    public static let eventType = "password_changed"
    public var personId: String
    public var streamId: String { Streams.security(personId) }
    public init(personId: String) { self.personId = personId }
}

public struct SecondFactorEnabled: CatalogueEvent, Hashable {
    public static let eventType = "second_factor_enabled"
    public var personId: String
    public var streamId: String { Streams.security(personId) }
    public init(personId: String) { self.personId = personId }
}

public struct SecondFactorDisabled: CatalogueEvent, Hashable {
    public static let eventType = "second_factor_disabled"
    public var personId: String
    public var streamId: String { Streams.security(personId) }
    public init(personId: String) { self.personId = personId }
}

/// The person signed other sessions of their account out from the sign-in list (`DELETE
/// /v1/me/sessions`): their refresh tokens are refused from then on.
public struct SignedOut: CatalogueEvent, Hashable {
    public static let eventType = "signed_out"
    public var personId: String
    /// The sign-ins ended (each a `signed_in` event's `signInId`).
    public var signInIds: [String]
    public var streamId: String { Streams.security(personId) }
    public init(personId: String, signInIds: [String]) {
        self.personId = personId
        self.signInIds = signInIds
    }
}

/// The person linked a sign-in with Apple or Google to their account (`POST /v1/me/linked-sign-ins`).
public struct SignInLinked: CatalogueEvent, Hashable {
    public static let eventType = "sign_in_linked"
    public var personId: String
    /// `apple` or `google`.
    public var provider: String
    public var streamId: String { Streams.security(personId) }
    public init(personId: String, provider: String) {
        self.personId = personId
        self.provider = provider
    }
}

/// The person removed a linked sign-in with Apple or Google (`DELETE /v1/me/linked-sign-ins/{provider}`).
public struct SignInUnlinked: CatalogueEvent, Hashable {
    public static let eventType = "sign_in_unlinked"
    public var personId: String
    public var provider: String
    public var streamId: String { Streams.security(personId) }
    public init(personId: String, provider: String) {
        self.personId = personId
        self.provider = provider
    }
}

/// Wrong passwords were given for the account again and again (five within an hour; at most one
/// such event an hour): somebody may be guessing. It says nothing of the passwords tried.
public struct SignInAttemptsFailed: CatalogueEvent, Hashable {
    public static let eventType = "sign_in_attempts_failed"
    public var personId: String
    /// The wrong passwords counted since the hour began.
    public var attempts: Int
    public var streamId: String { Streams.security(personId) }
    public init(personId: String, attempts: Int) {
        self.personId = personId
        self.attempts = attempts
    }
}

/// A refresh token that had been used was presented again: it was copied, so its sign-in was
/// ended (the session of `signInId`); whoever holds it must sign in again.
public struct RefreshTokenReused: CatalogueEvent, Hashable {
    public static let eventType = "refresh_token_reused"
    public var personId: String
    /// The sign-in ended (a `signed_in` event's `signInId`).
    public var signInId: String
    public var streamId: String { Streams.security(personId) }
    public init(personId: String, signInId: String) {
        self.personId = personId
        self.signInId = signInId
    }
}

/// New recovery codes were issued (`POST /v1/me/recovery-codes`): the old ones no longer work.
public struct RecoveryCodesRenewed: CatalogueEvent, Hashable {
    public static let eventType = "recovery_codes_renewed"
    public var personId: String
    public var streamId: String { Streams.security(personId) }
    public init(personId: String) { self.personId = personId }
}

/// The account's e-mail address changed. The addresses themselves stay in the identity tier: the
/// log cannot forget, and an address is personal data.
public struct EmailChanged: CatalogueEvent, Hashable {
    public static let eventType = "email_changed"
    public var personId: String
    public var streamId: String { Streams.security(personId) }
    public init(personId: String) { self.personId = personId }
}

/// Wristler blocked the account: the person can no longer sign in, and shops are not reminded of
/// their waiting messages.
public struct AccountBlocked: CatalogueEvent, Hashable, HoldsPersonalData {
    public static let eventType = "account_blocked"
    public var personId: String
    /// Why, in Wristler's words about the person: their personal data.
    public var reason: PersonalText?
    public var streamId: String { Streams.security(personId) }

    public init(personId: String, reason: String? = nil) {
        self.personId = personId
        self.reason = reason.map(PersonalText.text)
    }

    public var personalDataOwner: String { personId }
    public static let personalFields = ["reason"]
}

/// The person closed their account (`DELETE /v1/me`): every session ended, their devices and mail
/// contact deleted. Tells the other tiers; it makes no notification (nobody is left to tell).
public struct AccountClosed: CatalogueEvent, Hashable {
    public static let eventType = "account_closed"
    public var personId: String
    public var streamId: String { Streams.security(personId) }

    public init(personId: String) {
        self.personId = personId
    }
}

/// The person's data key was deleted (`inbox erase`): every personal field of theirs in the log
/// reads as erased from now on, and the read models drop what they held of it (docs/event-log.md,
/// "Personal data"). Holds nothing of the person but the id.
public struct PersonErased: CatalogueEvent, Hashable {
    public static let eventType = "person_erased"
    public var personId: String
    public var streamId: String { Streams.security(personId) }

    public init(personId: String) {
        self.personId = personId
    }
}
