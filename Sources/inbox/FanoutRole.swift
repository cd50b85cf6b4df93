import Fanout
import Foundation
import HTTP2Client
import Lifecycle
import PostgresClient
import PushProtocol

extension Roles {
    /// The push fan-out: APNs for iOS and FCM for Android where their credentials are set, a
    /// transport that logs what would be sent where they are not (the embedded default).
    static func fanout(database: Database, configuration: InboxConfiguration, log: Logger) throws -> ServiceGroup.Member {
        let log = log.with(["role": "fanout"])
        let ios: any PushTransport
        if let keyFile = configuration.apnsKeyFile {
            guard let keyId = configuration.apnsKeyId, let teamId = configuration.apnsTeamId else {
                throw UsageError(description: "INBOX_APNS_KEY_FILE needs INBOX_APNS_KEY_ID and INBOX_APNS_TEAM_ID too.")
            }
            let p8: String
            do {
                p8 = try String(contentsOfFile: keyFile, encoding: .utf8)
            } catch {
                throw UsageError(description: "INBOX_APNS_KEY_FILE (--apns-key-file): cannot read \(keyFile) (\(error.localizedDescription)).")
            }
            var settings = APNsTransport.Settings(keyId: keyId, teamId: teamId, p8: p8)
            settings.productionURL = configuration.apnsProductionURL
            settings.developmentURL = configuration.apnsDevelopmentURL
            settings.defaultTopic = configuration.pushEnvironment.appId
            do {
                ios = try APNsTransport(settings: settings, client: try pushClient(configuration), logger: log)
            } catch let error as UsageError {
                throw error
            } catch {
                throw UsageError(description: "INBOX_APNS_KEY_FILE (--apns-key-file): \(keyFile) is not a .p8 key APNs can use (\(error)).")
            }
            log.info("iOS pushes go to APNs", metadata: ["production": .string(settings.productionURL), "development": .string(settings.developmentURL), "keyId": .string(keyId)])
        } else {
            ios = LoggingTransport(logger: log)
            log.notice("no INBOX_APNS_KEY_FILE: iOS pushes are logged, not sent")
        }
        let android: any PushTransport
        if let accountFile = configuration.fcmServiceAccountFile {
            let account: FCMServiceAccount
            do {
                account = try FCMServiceAccount(json: Array(try Data(contentsOf: URL(fileURLWithPath: accountFile))))
            } catch {
                throw UsageError(description: "INBOX_FCM_SERVICE_ACCOUNT (--fcm-service-account): \(accountFile): \(error).")
            }
            var settings = FCMTransport.Settings(serviceAccount: account)
            settings.baseURL = configuration.fcmURL
            android = FCMTransport(settings: settings, client: try pushClient(configuration), logger: log)
            log.info("Android pushes go to FCM", metadata: ["url": .string(settings.baseURL), "project": .string(account.projectId)])
        } else {
            android = LoggingTransport(logger: log)
            log.notice("no INBOX_FCM_SERVICE_ACCOUNT: Android pushes are logged, not sent")
        }
        let environment = configuration.pushEnvironment
        let store = FanoutStore(
            settings: FanoutStore.Settings(
                policy: AppPolicy(isProduction: environment == .production, ownAppId: environment.appId),
                deadline: .seconds(configuration.pushDeadlineSeconds), claimFor: .seconds(configuration.pushClaimSeconds),
                node: ProcessInfo.processInfo.hostName))
        let sender = FanoutSender(
            configuration: database.client.configuration.connection, store: store, transport: PlatformTransport(ios: ios, android: android),
            options: FanoutSender.Options(
                batchSize: configuration.fanoutBatch, workers: configuration.fanoutWorkers,
                pollInterval: .milliseconds(configuration.pollIntervalMilliseconds)),
            logger: log)
        return ServiceGroup.Member("the push fan-out", sender, shutdownDeadline: .seconds(20))
    }

    /// One HTTP/2 client per platform: each has a thread of its own driving its connections.
    private static func pushClient(_ configuration: InboxConfiguration) throws -> HTTP2Client {
        if let caFile = configuration.pushCAFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw UsageError(description: "INBOX_PUSH_CA_FILE (--push-ca-file): cannot read \(caFile).")
        }
        // Apple's and Google's answers are a few hundred bytes (an error's JSON at most): 64 KiB a
        // stream keeps up to 2 connections x 1,000 streams of a misbehaving endpoint within 128 MiB.
        return try HTTP2Client(configuration: HTTP2Client.Configuration(caFile: configuration.pushCAFile, maxResponseBytes: 64 << 10))
    }

    /// `inbox status`'s lines about the fan-out.
    static func fanoutStatus(database: Database) async throws -> [String] {
        let status = try await database.client.withConnection { try FanoutStore.status(on: $0) }
        var lines = [
            "push outbox: \(status.undecided) to decide (oldest \(Int(status.oldestUndecidedSeconds)) s), "
                + "\(status.sending) being sent (\(status.abandoned) left by a stopped fan-out), "
                + "\(status.pending) to try again (oldest \(Int(status.oldestPendingSeconds)) s)"
        ]
        for counter in status.counters where !PushLatency.isLatency(counter.name) { lines.append("push \(counter.name): \(counter.count)") }
        for token in status.providerTokens {
            lines.append("push provider token \(token.provider) of \(token.node): \(Int(token.ageSeconds)) s old")
        }
        return lines
    }
}
