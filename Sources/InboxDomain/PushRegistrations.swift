/// The platform a push registration is on: Apple's (APNs) or Google's (FCM).
public enum DevicePlatform: String, Sendable, Hashable, CaseIterable {
    case ios
    case android
}

/// Which APNs a registration's token belongs to: tokens of a development-signed build (and of the
/// simulator) are the sandbox's, everything signed for distribution (TestFlight, Ad Hoc, the App
/// Store) production's.
public enum APNsEnvironment: String, Sendable, Hashable, CaseIterable {
    case production
    case development

    /// The other host: the one probe after a `BadDeviceToken` when the registration did not say.
    public var other: APNsEnvironment { self == .production ? .development : .production }
}
