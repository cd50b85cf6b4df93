import Foundation
import InboxDomain
import Lifecycle
import PushProtocol
import Threads

/// The platform of a registration.
public typealias PushPlatform = DevicePlatform

/// One push, rendered, for one registration.
public struct OutgoingPush: Sendable {
    /// The push's own id, the same on every attempt (`apns-id`): derived from its notification in
    /// the outbox and the registration (`FanoutStore.Claimed.pushId`).
    public var id: UUID
    public var platform: PushPlatform
    public var token: String
    /// The registration's app (APNs topic); nil when the app did not say.
    public var appId: String?
    /// The APNs host the registration is known to belong to; nil: not known yet (probe).
    public var apnsEnvironment: APNsEnvironment?
    public var content: PushContent

    public init(
        id: UUID = UUID(), platform: PushPlatform, token: String, appId: String?, apnsEnvironment: APNsEnvironment?, content: PushContent
    ) {
        self.id = id
        self.platform = platform
        self.token = token
        self.appId = appId
        self.apnsEnvironment = apnsEnvironment
        self.content = content
    }
}

/// What became of one push.
public struct PushResult: Sendable, Hashable {
    public var outcome: PushOutcome
    /// The APNs host that accepted (or finally refused) a token whose host was not known, or that
    /// answered otherwise than the stored one: stored on the registration.
    public var learnedEnvironment: APNsEnvironment?
    /// Written to the log instead of sent (no credentials for the platform): counted as `logged`.
    public var logged: Bool
    /// From the start of the send to this answer (`PushLatency`); set by the fan-out.
    public var latency: Duration? = nil

    public init(_ outcome: PushOutcome, learnedEnvironment: APNsEnvironment? = nil, logged: Bool = false) {
        self.outcome = outcome
        self.learnedEnvironment = learnedEnvironment
        self.logged = logged
    }
}

/// Hands pushes to the platforms. `send` tells `answered` each push's result (by its index in
/// `pushes`) as soon as it is final, from any thread (so quickly), and returns once every push has
/// one. It never throws: a failure to reach a platform is a `.retry` result.
public protocol PushTransport: Sendable {
    func send(_ pushes: [OutgoingPush], answered: @escaping @Sendable (Int, PushResult) -> Void) async
    /// When each provider token in use was made (for status and metrics).
    func providerTokenIssuedAt() -> [String: Date]
    /// Ends connections and threads.
    func shutdown()
}

extension PushTransport {
    public func providerTokenIssuedAt() -> [String: Date] { [:] }
    public func shutdown() {}

    /// Sends `pushes` and answers their results at the end, in order.
    public func send(_ pushes: [OutgoingPush]) async -> [PushResult] {
        let results = Locked([PushResult?](repeating: nil, count: pushes.count))
        await send(pushes) { index, result in results.withLock { $0[index] = result } }
        return results.withLock { $0.map { $0 ?? PushResult(.retry(reason: "not_sent", after: nil)) } }
    }
}

/// The embedded default, without APNs or FCM credentials: logs what would be sent and counts it
/// `logged.<platform>`, so `make run` shows the whole way from an event to a push.
public struct LoggingTransport: PushTransport {
    let logger: Logger

    public init(logger: Logger) {
        self.logger = logger
    }

    public func send(_ pushes: [OutgoingPush], answered: @escaping @Sendable (Int, PushResult) -> Void) async {
        for (index, push) in pushes.enumerated() {
            var metadata: Logger.Metadata = [
                "platform": .string(push.platform.rawValue), "title": .string(push.content.title), "body": .string(push.content.body),
                "token": .string(String(push.token.prefix(8)) + "…"),
            ]
            for field in push.content.data { metadata["data." + field.key] = .string(field.value) }
            metadata["collapse"] = push.content.collapseId.map(Logger.Value.string)
            if let badge = push.content.badge { metadata["badge"] = .int(badge) }
            logger.info("push (no APNs/FCM credentials: logged, not sent)", metadata: metadata)
            answered(index, PushResult(.delivered, logged: true))
        }
    }
}

/// Routes each push to the transport of its platform (APNs for iOS, FCM for Android), so that one
/// platform can be configured and the other logged.
public struct PlatformTransport: PushTransport {
    let ios: any PushTransport
    let android: any PushTransport

    public init(ios: any PushTransport, android: any PushTransport) {
        self.ios = ios
        self.android = android
    }

    public func send(_ pushes: [OutgoingPush], answered: @escaping @Sendable (Int, PushResult) -> Void) async {
        var iosIndexes: [Int] = []
        var androidIndexes: [Int] = []
        for (index, push) in pushes.enumerated() {
            if push.platform == .ios { iosIndexes.append(index) } else { androidIndexes.append(index) }
        }
        await withTaskGroup(of: Void.self) { group in
            for (transport, indexes) in [(ios, iosIndexes), (android, androidIndexes)] where !indexes.isEmpty {
                group.addTask { await transport.send(indexes.map { pushes[$0] }) { answered(indexes[$0], $1) } }
            }
        }
    }

    public func providerTokenIssuedAt() -> [String: Date] {
        ios.providerTokenIssuedAt().merging(android.providerTokenIssuedAt()) { a, _ in a }
    }

    public func shutdown() {
        ios.shutdown()
        android.shutdown()
    }
}
