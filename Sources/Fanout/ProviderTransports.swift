import Encodings
import Foundation
import HTTP2Client
import InboxDomain
import Lifecycle
import PushProtocol
import Threads

/// Pushes to APNs over HTTP/2 with a provider token (ES256 JWT), many streams on few connections.
///
/// - The registration's `apnsEnvironment` picks the host; without one, the default host is tried.
///   A `BadDeviceToken` is probed once on the other host, and the host that answered is stored on
///   the registration (`PushResult.learnedEnvironment`); refused on both, the token is dead.
/// - The provider token is reused about 50 minutes and never renewed more often than every 20
///   (`ProviderTokenPolicy.APNs`). After `ExpiredProviderToken` a new one is made when the policy
///   allows, and the push is retried once; otherwise it goes back to the outbox to wait.
public final class APNsTransport: PushTransport {
    public struct Settings: Sendable {
        public var keyId: String
        public var teamId: String
        /// The `.p8` key's PEM text.
        public var p8: String
        public var productionURL: String = "https://api.push.apple.com"
        public var developmentURL: String = "https://api.sandbox.push.apple.com"
        public var defaultEnvironment: APNsEnvironment = .production
        /// The topic of a registration without `appId`.
        public var defaultTopic: String = "eu.wristler.app"
        public var timeToLive: Duration = APNsHeaders.defaultTimeToLive
        public var requestTimeout: Duration = .seconds(15)
        /// When the provider token is renewed (tests shorten the 20 minutes between renewals).
        public var tokenPolicy = ProviderTokenPolicy.APNs()

        public init(keyId: String, teamId: String, p8: String) {
            self.keyId = keyId
            self.teamId = teamId
            self.p8 = p8
        }
    }

    let settings: Settings
    let credentials: APNsCredentials
    let client: HTTP2Client
    var policy: ProviderTokenPolicy.APNs { settings.tokenPolicy }
    private let token = Locked<(value: String, issuedAt: Date)?>(nil)
    let logger: Logger

    public init(settings: Settings, client: HTTP2Client, logger: Logger) throws {
        self.settings = settings
        self.credentials = try APNsCredentials(keyId: settings.keyId, teamId: settings.teamId, p8: settings.p8)
        self.client = client
        self.logger = logger.with(["provider": "apns"])
    }

    public func providerTokenIssuedAt() -> [String: Date] {
        token.withLock { $0.map { ["apns": $0.issuedAt] } ?? [:] }
    }

    public func shutdown() { client.shutdown() }

    /// The token to send with now; `rejected` is the one APNs just called expired. Nil when a
    /// renewal is due but the policy refuses it yet (the push waits).
    func providerToken(now: Date, rejected: String? = nil) -> String? {
        token.withLock { current in
            let wasRejected = rejected != nil && current?.value == rejected
            switch policy.decide(issuedAt: current?.issuedAt, now: now, rejected: wasRejected) {
            case .reuse:
                return current?.value
            case .refused:
                return nil
            case .renew:
                do {
                    let value = try credentials.providerToken(issuedAt: now)
                    current = (value, now)
                    logger.info("made a new APNs provider token", metadata: ["keyId": .string(settings.keyId)])
                    return value
                } catch {
                    logger.error("cannot sign an APNs provider token", metadata: ["error": "\(error)"])
                    return nil
                }
            }
        }
    }

    public func send(_ pushes: [OutgoingPush], answered: @escaping @Sendable (Int, PushResult) -> Void) async {
        var environments = pushes.map { $0.apnsEnvironment ?? settings.defaultEnvironment }
        // First try every push; then at most once more for the ones refused with an expired token
        // or a device token the host does not know (on the other host). Every other answer is
        // final and told at once, while the rest are still on their way.
        // An APNs device token is hex. Anything else (a registration made with a bad token, or one
        // with `/`, `?` or spaces that would change the request's path) is never sent: Apple would
        // call it a BadDeviceToken on either host, so the registration is deleted as one.
        var pending: [Int] = []
        for (index, push) in pushes.enumerated() {
            if Self.isDeviceToken(push.token) { pending.append(index) } else { answered(index, PushResult(.badDeviceToken)) }
        }
        var probed = Set<Int>()
        var renewed = false
        for round in 0..<3 where !pending.isEmpty {
            let now = Date()
            guard let providerToken = providerToken(now: now) else {
                for index in pending { answered(index, PushResult(.retry(reason: "ExpiredProviderToken", after: .seconds(60)))) }
                return
            }
            let tried = pending, hosts = environments, alreadyProbed = probed, mayRenew = !renewed && round < 2, mayProbe = round < 2
            // The answers to try again (a probe of the other host, a renewed token), by index.
            let retried = Locked<[(index: Int, outcome: PushOutcome)]>([])
            let logger = logger, hostURLs = hosts.map { url($0) }
            _ = await client.send(tried.map { request(pushes[$0], environment: environments[$0], token: providerToken, now: now) }) { slot, answer in
                let index = tried[slot]
                let outcome = pushOutcome(answer, classify: APNsAnswer.classify) { error in
                    logger.warning("APNs unreachable", metadata: ["error": .string(error.description), "host": .string(hostURLs[index])])
                }
                switch outcome {
                case .badDeviceToken where mayProbe && !alreadyProbed.contains(index), .expiredProviderToken where mayRenew:
                    retried.withLock { $0.append((index, outcome)) }
                case .delivered:
                    answered(index, PushResult(.delivered, learnedEnvironment: pushes[index].apnsEnvironment != hosts[index] ? hosts[index] : nil))
                default:
                    answered(index, PushResult(outcome))
                }
            }
            var again: [Int] = []
            var expired = false
            for (index, outcome) in retried.withLock({ $0 }).sorted(by: { $0.index < $1.index }) {
                if outcome == .expiredProviderToken {
                    expired = true
                } else {
                    probed.insert(index)
                    environments[index] = environments[index].other
                }
                again.append(index)
            }
            if expired {
                renewed = true
                _ = self.providerToken(now: Date(), rejected: providerToken)
            }
            pending = again
        }
        for index in pending { answered(index, PushResult(.retry(reason: "ExpiredProviderToken", after: nil))) }
    }

    /// Hex digits only, and some (Apple's tokens are 64 of them today; the length may change).
    static func isDeviceToken(_ token: String) -> Bool {
        !token.isEmpty && token.utf8.allSatisfy { ($0 >= 48 && $0 <= 57) || ($0 | 0x20 >= 97 && $0 | 0x20 <= 102) }
    }

    func url(_ environment: APNsEnvironment) -> String {
        environment == .production ? settings.productionURL : settings.developmentURL
    }

    func request(_ push: OutgoingPush, environment: APNsEnvironment, token: String, now: Date) -> HTTP2Request {
        let body: [UInt8]
        do {
            body = try APNsPayload.encode(push.content)
        } catch {
            // The routing data alone is too big: APNs answers PayloadTooLarge, which is permanent.
            body = Array(repeating: UInt8(ascii: " "), count: APNsPayload.maximumBytes + 1)
        }
        let headers = APNsHeaders(topic: push.appId ?? settings.defaultTopic, content: push.content, now: now, timeToLive: settings.timeToLive)
        var fields: [(name: String, value: String)] = [
            ("authorization", "bearer " + token), ("content-type", "application/json"),
            ("apns-id", withUnsafeBytes(of: push.id.uuid) { Hex.uuidString($0) }),
        ]
        for field in headers.fields { fields.append((field.key, field.value)) }
        return HTTP2Request(
            method: "POST", url: url(environment) + APNsHeaders.path(deviceToken: push.token), headers: fields, body: body,
            timeout: settings.requestTimeout)
    }
}

/// Pushes to FCM (HTTP v1) with an OAuth2 access token bought with the service account's RS256
/// JWT grant, kept until shortly before it expires and fetched again after `UNAUTHENTICATED` (then
/// the push is retried once).
public final class FCMTransport: PushTransport {
    public struct Settings: Sendable {
        public var serviceAccount: FCMServiceAccount
        public var baseURL: String = "https://fcm.googleapis.com"
        public var timeToLive: Duration = APNsHeaders.defaultTimeToLive
        public var requestTimeout: Duration = .seconds(15)

        public init(serviceAccount: FCMServiceAccount) {
            self.serviceAccount = serviceAccount
        }
    }

    let settings: Settings
    let client: HTTP2Client
    let policy = ProviderTokenPolicy.FCM()
    private let token = Locked<(value: FCMAccessToken, obtainedAt: Date)?>(nil)
    /// One token request at a time: the others wait for its answer rather than asking too.
    private let refreshing = AsyncSerial()
    let logger: Logger

    public init(settings: Settings, client: HTTP2Client, logger: Logger) {
        self.settings = settings
        self.client = client
        self.logger = logger.with(["provider": "fcm"])
    }

    public func providerTokenIssuedAt() -> [String: Date] {
        token.withLock { $0.map { ["fcm": $0.obtainedAt] } ?? [:] }
    }

    public func shutdown() { client.shutdown() }

    /// A valid access token, fetched when there is none, it is about to expire, or `rejected` is
    /// the current one. Nil when the token endpoint cannot be reached or refuses.
    func accessToken(rejected: String? = nil) async -> String? {
        await refreshing.run { [self] in
            let now = Date()
            let current = token.withLock { $0 }
            let wasRejected = rejected != nil && current?.value.accessToken == rejected
            if let current, !policy.needsRefresh(current.value, obtainedAt: current.obtainedAt, now: now, rejected: wasRejected) {
                return current.value.accessToken
            }
            do {
                let assertion = try settings.serviceAccount.assertion(issuedAt: now)
                let response = try await client.send(
                    HTTP2Request(
                        method: "POST", url: settings.serviceAccount.tokenURI,
                        headers: [("content-type", FCMTokenExchange.contentType), ("accept", "application/json")],
                        body: FCMTokenExchange.requestBody(assertion: assertion), timeout: settings.requestTimeout))
                let fresh = try FCMTokenExchange.parseAnswer(response.body)
                token.withLock { $0 = (fresh, now) }
                logger.info("got a new FCM access token", metadata: ["expiresIn": "\(fresh.expiresIn)"])
                return fresh.accessToken
            } catch {
                logger.error("cannot get an FCM access token", metadata: ["error": "\(error)", "tokenURI": .string(settings.serviceAccount.tokenURI)])
                return nil
            }
        }
    }

    public func send(_ pushes: [OutgoingPush], answered: @escaping @Sendable (Int, PushResult) -> Void) async {
        var pending = Array(pushes.indices)
        var rejected: String?
        for round in 0..<2 where !pending.isEmpty {
            guard let accessToken = await accessToken(rejected: rejected) else {
                for index in pending { answered(index, PushResult(.retry(reason: "no_access_token", after: .seconds(30)))) }
                return
            }
            // Every answer but an expired token on the first round is final, and told at once.
            let tried = pending, logger = logger
            let expired = Locked<[Int]>([])
            _ = await client.send(tried.map { request(pushes[$0], accessToken: accessToken) }) { slot, answer in
                let outcome = pushOutcome(answer, classify: FCMAnswer.classify) { error in
                    logger.warning("FCM unreachable", metadata: ["error": .string(error.description)])
                }
                if outcome == .expiredProviderToken && round == 0 {
                    expired.withLock { $0.append(tried[slot]) }
                    return
                }
                answered(tried[slot], PushResult(outcome))
            }
            pending = expired.withLock { $0 }.sorted()
            if !pending.isEmpty { rejected = accessToken }
        }
        for index in pending { answered(index, PushResult(.retry(reason: "UNAUTHENTICATED", after: nil))) }
    }

    func request(_ push: OutgoingPush, accessToken: String) -> HTTP2Request {
        let body = (try? FCMPayload.encode(push.content, token: push.token, ttl: settings.timeToLive)) ?? Array("{}".utf8)
        return HTTP2Request(
            method: "POST", url: settings.baseURL + FCMPayload.path(projectId: settings.serviceAccount.projectId),
            headers: [("authorization", "Bearer " + accessToken), ("content-type", "application/json")], body: body,
            timeout: settings.requestTimeout)
    }
}

/// What an answer (or the failure to get one) means for a push: the platform's classification of
/// the answer, or a retry when the platform could not be reached (`unreachable` is told why).
func pushOutcome(
    _ answer: Result<HTTP2Response, HTTP2ClientError>, classify: (Int, [UInt8], String?, Date) -> PushOutcome,
    unreachable: (HTTP2ClientError) -> Void
) -> PushOutcome {
    switch answer {
    case .success(let response):
        return classify(response.status, response.body, response.header("retry-after"), Date())
    case .failure(let error):
        unreachable(error)
        return .retry(reason: "transport:curl\(error.curlCode)", after: nil)
    }
}

/// Runs async bodies one at a time, in order of arrival.
final class AsyncSerial: Sendable {
    private let tail = Locked<Task<Void, Never>?>(nil)

    func run<T: Sendable>(_ body: @escaping @Sendable () async -> T) async -> T {
        let (task, previous): (Task<T, Never>, Task<Void, Never>?) = tail.withLock { tail in
            let previous = tail
            let task = Task<T, Never> {
                await previous?.value
                return await body()
            }
            tail = Task { _ = await task.value }
            return (task, previous)
        }
        _ = previous
        return await task.value
    }
}
