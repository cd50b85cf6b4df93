import Foundation
import Lifecycle
import Identity
import InboxAPI
import Uploads
import Mail

/// Everything `inbox` can be told, from the environment with flags overriding it. A bad value is
/// refused at start with a sentence naming the variable or flag.
struct InboxConfiguration: Sendable {
    enum LogFormat: String, Sendable, CaseIterable {
        case auto, json, text
    }

    /// `DATABASE_URL`: the server to use. When nil, an embedded PostgreSQL is started in `dataDirectory`.
    var databaseURL: String?
    /// `INBOX_DATA_DIR`: where the embedded PostgreSQL lives (`<dir>/postgres`).
    var dataDirectory: String = ".inbox"
    /// `INBOX_DB_POOL_SIZE`: connections per process.
    var poolSize: Int = 10
    /// `INBOX_MIGRATIONS_DIR`: the folder of `NNN_name.sql` files; found automatically when nil.
    var migrationsDirectory: String?
    /// `INBOX_POLL_INTERVAL_MS`: the longest a subscriber waits between reads without a notification.
    var pollIntervalMilliseconds: Int = 1000
    /// `INBOX_PROJECTOR_READ_INTERVAL_MS`: the least time between a projector's read of the log that
    /// found events and its next read (`Projector.Options.readInterval`).
    var projectorReadIntervalMilliseconds: Int = 20
    /// `INBOX_LOG_FORMAT`: `json` when not on a terminal under `auto`.
    var logFormat: LogFormat = .auto
    /// `INBOX_LOG_LEVEL`: the least severe line written.
    var logLevel: Logger.Level = .info
    /// `INBOX_HTTP_HOST`, `INBOX_HTTP_PORT`: where `serve` listens (loopback by default).
    var httpHost: String = "127.0.0.1"
    var httpPort: UInt16 = 8080
    /// `INBOX_HTTP_THREADS`: the threads that run requests waiting on the database (the event
    /// loops that read and write the connections are one per core).
    var httpThreads: Int = 64
    /// `INBOX_HTTP_MAX_BODY_BYTES`: the largest request body accepted (larger: 413).
    var httpMaximumBodyBytes: Int = 1 << 20
    /// `INBOX_HTTP_CONNECTIONS_PER_ADDRESS`: connections one client address may hold; 0: no limit.
    var httpConnectionsPerAddress: Int = 64
    /// `INBOX_HTTP_REQUEST_DEADLINE_SECONDS`: the longest a whole request may take to arrive.
    var httpRequestDeadlineSeconds: Int = 10
    /// `INBOX_OPS_PORT`: the operations listener (`/healthz`, `/readyz`, `/metrics` on a port of
    /// their own, answered while the API's connections are all taken); nil: none.
    var opsPort: UInt16?
    /// `INBOX_UPLOADS_DIR`: the folder uploaded files are stored in; nil: `<dataDirectory>/uploads`.
    var uploadsDirectory: String?
    /// `INBOX_PERSONAL_DATA_KEY_FILE`: the key-encryption key of the people's data keys (docs/event-log.md,
    /// "Personal data"); nil: `<dataDirectory>/personal-data.key` for the embedded PostgreSQL, nothing
    /// sealed with `DATABASE_URL`.
    var personalDataKeyFile: String?
    /// `INBOX_PERSONAL_DATA_PREVIOUS_KEY_FILE`: the key-encryption key being replaced, during a rotation.
    var personalDataPreviousKeyFile: String?
    /// `INBOX_UPLOADS_ALLOW_PRIVATE_SOURCES`: whether a `sourceUrl` may lead to loopback, private
    /// or link-local addresses (tests, a closed network); never in production.
    var uploadsAllowPrivateSources = false
    /// `INBOX_UPLOADS_S3_URL` and its companions: the S3-compatible bucket every node keeps
    /// uploads in; nil: the folder alone.
    var uploadsS3URL: String?
    var uploadsS3Region = "us-east-1"
    var uploadsS3AccessKeyId: String?
    var uploadsS3SecretAccessKey: String?
    var uploadsS3CAFile: String?
    /// The bucket of `INBOX_UPLOADS_S3_URL`, or nil; throws a sentence when its keys are missing.
    func uploadsBucket() throws -> S3Bucket? {
        guard let url = uploadsS3URL else { return nil }
        guard let id = uploadsS3AccessKeyId, let secret = uploadsS3SecretAccessKey else {
            throw Invalid(description: "INBOX_UPLOADS_S3_URL needs INBOX_UPLOADS_S3_ACCESS_KEY_ID and INBOX_UPLOADS_S3_SECRET_ACCESS_KEY (or its _FILE).")
        }
        return S3Bucket(settings: .init(url: url, region: uploadsS3Region, accessKeyId: id, secretAccessKey: secret, caFile: uploadsS3CAFile))
    }

    /// The uploads folder in use.
    var uploadsFolder: String { uploadsDirectory ?? (dataDirectory as NSString).appendingPathComponent("uploads") }
    /// `INBOX_API_PERSON_LIMIT`: a person's token's requests to this node, `N/SECONDS`: N at once,
    /// refilled N per SECONDS.
    var apiPersonLimit = AttemptLimit(100, per: 5)
    /// `INBOX_API_GUEST_LIMIT`: a guest token's, the same way.
    var apiGuestLimit = AttemptLimit(20, per: 10)
    /// `INBOX_BELL_CACHE_MB`: memory for bell pages kept between their changes; 0: none.
    var bellCacheMegabytes: Int = 64
    /// `INBOX_CONVERSATION_CACHE_MB`: memory for conversation list and thread message pages kept between their changes; 0: none.
    var conversationCacheMegabytes: Int = 64
    /// `INBOX_TOKEN_KEYS`: the identity tier's public keys (a JWKS file, a PEM file or a folder of
    /// them); nil: the development key.
    var tokenKeysPath: String?
    /// `INBOX_TOKEN_AUDIENCE`: the `aud` the identity role writes and the API requires.
    var tokenAudience = TokenExpectations.defaultAudience
    /// `INBOX_TOKEN_ISSUER`: the `iss` the API requires; nil: `INBOX_PUBLIC_URL` (what the identity
    /// role writes), or none when that is unset too.
    var tokenIssuer: String?
    /// What the API requires of an access token's `aud`, `iss` and `client_id` (docs/tokens.md).
    func tokenExpectations() throws -> TokenExpectations {
        TokenExpectations(
            audience: tokenAudience, issuer: tokenIssuer ?? publicURL, clients: Set(try identityConfiguration().clients.clients.keys))
    }
    /// `INBOX_SERVICE_CREDENTIALS`: `name=secret,...` of the tiers that may post events.
    var serviceCredentials: String?
    /// `INBOX_UNSUBSCRIBE_KEYS`: `version:secret,...` signing mails' one-click unsubscribe links.
    var unsubscribeKeys: String?
    /// `INBOX_PUSH_ENVIRONMENT`: production pushes to every registration; staging and development
    /// only to their own app's.
    var pushEnvironment: PushEnvironment = .production
    /// `INBOX_APNS_KEY_FILE`, `INBOX_APNS_KEY_ID`, `INBOX_APNS_TEAM_ID`: the APNs provider key;
    /// without them iOS pushes are logged, not sent.
    var apnsKeyFile: String?
    var apnsKeyId: String?
    var apnsTeamId: String?
    /// `INBOX_APNS_PRODUCTION_URL`, `INBOX_APNS_DEVELOPMENT_URL`: Apple's hosts (tests point them elsewhere).
    var apnsProductionURL = "https://api.push.apple.com"
    var apnsDevelopmentURL = "https://api.sandbox.push.apple.com"
    /// `INBOX_FCM_SERVICE_ACCOUNT`: the service-account JSON; without it Android pushes are logged.
    var fcmServiceAccountFile: String?
    /// `INBOX_FCM_URL`: Google's FCM host.
    var fcmURL = "https://fcm.googleapis.com"
    /// `INBOX_PUSH_CA_FILE`: certificates trusted besides the system's (tests' own servers).
    var pushCAFile: String?
    /// `INBOX_PUSH_DEADLINE_SECONDS`: how long a push is tried before it is given up.
    var pushDeadlineSeconds: Int = 86_400
    /// `INBOX_PUSH_CLAIM_SECONDS`: how long a fan-out's claim on a push lasts (a dead node's
    /// pushes go to the others after this).
    var pushClaimSeconds: Int = 60
    /// `INBOX_FANOUT_WORKERS`, `INBOX_FANOUT_BATCH`: sending loops per process, pushes per step.
    var fanoutWorkers: Int = 4
    var fanoutBatch: Int = 500
    /// `INBOX_SCHEDULE_INTERVAL_SECONDS`: the wait between two checks of the schedule.
    var scheduleIntervalSeconds: Int = 900
    /// `INBOX_SHOP_REMINDER_GAP_SECONDS`: the least time between two reminders of one shop.
    var shopReminderGapSeconds: Int = 7200
    /// `INBOX_SHOP_REMINDER_WINDOW_DAYS`: how old a buyer's message may be and still be reminded of.
    var shopReminderWindowDays: Int = 14
    /// `INBOX_MAIL_GATHER_SECONDS`: at most one mail per person per this many seconds.
    var mailGatherSeconds: Int = 3600
    /// `INBOX_SHOP_DIGEST_SECONDS`: how long a buyer's message waits for the others before the
    /// shop's digest goes.
    var shopDigestSeconds: Int = 3600
    /// `INBOX_MAIL_ATTEMPTS`: temporary failures of one mail before it is dropped.
    var mailAttempts: Int = 10
    /// `INBOX_MAIL_CLAIM_SECONDS`: how long a mailer's claim on a person's mail lasts (a mailer
    /// that died leaves it to the others after this); more than twice the SMTP timeout.
    var mailClaimSeconds: Int = 150
    /// `INBOX_MAIL_STALE_SECONDS`: news older than this when the mailer decides it is not mailed.
    var mailStaleSeconds: Int = 604_800
    /// `INBOX_MAIL_BATCH`, `INBOX_MAIL_POLL_SECONDS`: entries decided and mails claimed per
    /// step; the wait between two looks when nothing woke the mailer.
    var mailBatch: Int = 100
    /// `INBOX_MAIL_WORKERS`: mailing loops per process, each its own session and relay connection.
    var mailWorkers: Int = 4
    /// `INBOX_REPLAY_MEMORY_EVENTS`: the events of the log whose state a replay folds in memory
    /// at a time; a longer log is folded in slices of people (`Replayer`); and what a projector
    /// from empty tables folds in memory before its first commit (`Projector.Options`). 0: through SQL.
    var replayMemoryEvents: Int = 2_000_000
    /// `INBOX_REPLAY_SPILL_DIR`: where a replay in slices keeps the later slices' events; nil:
    /// the system's temporary folder.
    var replaySpillDirectory: String?
    var mailPollSeconds: Int = 5
    /// `INBOX_PUBLIC_URL`: where the API is reached from the internet (mails' unsubscribe links
    /// point at `<url>/mail/unsubscribe`); nil: mails carry no unsubscribe link.
    var publicURL: String?
    /// The Mail module's settings (`INBOX_SMTP_*`, `INBOX_MAIL_FROM`, `INBOX_MAIL_FOLDER`) as
    /// given, read together by `mailConfiguration()` (they are checked against each other).
    var mailSettings: [String: String] = [:]
    /// The identity role's settings (`InboxConfiguration+Identity.swift`), each checked as it is
    /// read and kept as given; `identityConfiguration()` makes them one value.
    var identityValues: [String: String] = [:]

    /// How mail is sent: `MailConfiguration` of the mail settings, the data folder and the
    /// unsubscribe keys. Throws a sentence naming the setting that is wrong.
    func mailConfiguration() throws -> MailConfiguration {
        var environment = mailSettings
        environment["INBOX_DATA_DIR"] = dataDirectory
        environment["INBOX_UNSUBSCRIBE_KEYS"] = unsubscribeKeys
        return try MailConfiguration.from(environment: environment)
    }

    enum PushEnvironment: String, Sendable, CaseIterable {
        case production, staging, development

        /// The app id of this environment's builds.
        var appId: String {
            switch self {
            case .production: "eu.wristler.app"
            case .staging: "eu.wristler.app.staging"
            case .development: "eu.wristler.app.dev"
            }
        }
    }

    struct Invalid: Error, CustomStringConvertible {
        var description: String
    }

    /// One row of the settings table (README and `inbox help`), with how its value is read.
    struct Setting: Sendable {
        let variable: String
        let flag: String
        let defaultValue: String
        let meaning: String
        /// Reads `value` into the configuration, or throws a sentence about what it must be.
        let apply: @Sendable (inout InboxConfiguration, String) throws -> Void
    }

    static let settings: [Setting] = [
        Setting(variable: "DATABASE_URL", flag: "--database-url", defaultValue: "(unset: embedded PostgreSQL)",
                meaning: "postgres://user:pass@host:port/db?sslmode=... of the server to use") { configuration, url in
            guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else {
                throw Invalid(description: "DATABASE_URL (--database-url) must start with postgres:// or postgresql://.")
            }
            configuration.databaseURL = url
        },
        Setting(variable: "INBOX_DATA_DIR", flag: "--data-dir", defaultValue: ".inbox",
                meaning: "folder of the embedded PostgreSQL (<dir>/postgres)") { $0.dataDirectory = $1 },
        wholeNumber("INBOX_DB_POOL_SIZE", "--pool-size", 1...500, default: 10, meaning: "database connections per process (1-500)") {
            $0.poolSize = $1
        },
        Setting(variable: "INBOX_MIGRATIONS_DIR", flag: "--migrations-dir", defaultValue: "(found: ./sql, beside the binary, /usr/share/inbox/sql)",
                meaning: "folder of the NNN_name.sql migrations") { $0.migrationsDirectory = $1 },
        wholeNumber(
            "INBOX_POLL_INTERVAL_MS", "--poll-interval-ms", 10...60_000, default: 1000, unit: "a whole number of milliseconds",
            meaning: "longest wait between two reads of the log without a NOTIFY (10-60000)") { $0.pollIntervalMilliseconds = $1 },
        wholeNumber(
            "INBOX_PROJECTOR_READ_INTERVAL_MS", "--projector-read-interval-ms", 0...1_000, default: 20, unit: "a whole number of milliseconds",
            meaning: "least time between a projector's reads while writers keep committing: their commits are read together (0-1000)"
        ) { $0.projectorReadIntervalMilliseconds = $1 },
        Setting(variable: "INBOX_LOG_FORMAT", flag: "--log-format", defaultValue: "auto",
                meaning: "auto, json or text (auto: text on a terminal, JSON otherwise)") { configuration, text in
            guard let format = LogFormat(rawValue: text) else {
                throw Invalid(description: "INBOX_LOG_FORMAT (--log-format) must be auto, json or text, not \"\(text)\".")
            }
            configuration.logFormat = format
        },
        Setting(variable: "INBOX_LOG_LEVEL", flag: "--log-level", defaultValue: "info",
                meaning: "the least severe line written: trace, debug, info, notice, warning, error or critical") { configuration, text in
            guard let level = Logger.Level.allCases.first(where: { $0.description == text }) else {
                throw Invalid(
                    description: "INBOX_LOG_LEVEL (--log-level) must be one of \(Logger.Level.allCases.map(\.description).joined(separator: ", ")), not \"\(text)\".")
            }
            configuration.logLevel = level
        },
        Setting(variable: "INBOX_HTTP_HOST", flag: "--http-host", defaultValue: "127.0.0.1",
                meaning: "IPv4 address the API listens on (0.0.0.0: every interface)") { configuration, host in
            var address = in_addr()
            guard inet_pton(AF_INET, host, &address) == 1 else {
                throw Invalid(description: "INBOX_HTTP_HOST (--http-host) must be an IPv4 address such as 127.0.0.1, not \"\(host)\".")
            }
            configuration.httpHost = host
        },
        port("INBOX_HTTP_PORT", "--http-port", default: "8080", meaning: "TCP port the API listens on (0: any free port, printed at start)") {
            $0.httpPort = $1
        },
        port(
            "INBOX_OPS_PORT", "--ops-port", default: "(unset: none)",
            meaning: "TCP port of the operations listener on the API's host: /healthz, /readyz and /metrics only, answered while the API's connections are all taken (0: any free port, printed at start)"
        ) { $0.opsPort = $1 },
        wholeNumber(
            "INBOX_HTTP_THREADS", "--http-threads", 1...256, default: 64,
            meaning: "threads running requests that wait on the database, one request each (1-256)") { $0.httpThreads = $1 },
        wholeNumber(
            "INBOX_HTTP_MAX_BODY_BYTES", "--http-max-body-bytes", 1024...104_857_600, default: 1_048_576,
            meaning: "largest request body accepted, larger is 413 (1024-104857600)") { $0.httpMaximumBodyBytes = $1 },
        wholeNumber(
            "INBOX_HTTP_CONNECTIONS_PER_ADDRESS", "--http-connections-per-address", 0...100_000, default: 64,
            meaning: "connections one client address may hold open; more are closed at once (0: no limit, for a proxy in front)") {
            $0.httpConnectionsPerAddress = $1
        },
        wholeNumber(
            "INBOX_HTTP_REQUEST_DEADLINE_SECONDS", "--http-request-deadline-seconds", 1...600, default: 10, unit: "a whole number of seconds",
            meaning: "longest a whole request (head and body) may take to arrive, from the connection's opening or its previous answer; later, the connection is closed (1-600)") {
            $0.httpRequestDeadlineSeconds = $1
        },
        wholeNumber(
            "INBOX_BELL_CACHE_MB", "--bell-cache-mb", 0...65_536, default: 64,
            meaning: "memory for bell pages kept until the person's bell changes (0: none, up to 65536)") { $0.bellCacheMegabytes = $1 },
        wholeNumber(
            "INBOX_CONVERSATION_CACHE_MB", "--conversation-cache-mb", 0...65_536, default: 64,
            meaning: "memory for conversation list pages kept until a thread in them changes (0: none, up to 65536)") {
            $0.conversationCacheMegabytes = $1
        },
        requestLimit(
            "INBOX_API_PERSON_LIMIT", "--api-person-limit", default: "100/5",
            meaning: "requests of one person's token to this node: N/SECONDS, N at once refilled N per SECONDS; past it 429 with Retry-After (counted per node: docs/api.md)"
        ) { $0.apiPersonLimit = $1 },
        requestLimit(
            "INBOX_API_GUEST_LIMIT", "--api-guest-limit", default: "20/10", meaning: "requests of one guest token to this node: N/SECONDS"
        ) { $0.apiGuestLimit = $1 },
        Setting(variable: "INBOX_PERSONAL_DATA_KEY_FILE", flag: "--personal-data-key-file",
                defaultValue: "(unset: <INBOX_DATA_DIR>/personal-data.key, made, for the embedded PostgreSQL; nothing sealed with DATABASE_URL)",
                meaning: "32 random bytes (raw, hex or base64) wrapping each person's data key; message bodies and other personal fields are sealed under those (docs/event-log.md)") {
            $0.personalDataKeyFile = $1
        },
        Setting(variable: "INBOX_PERSONAL_DATA_PREVIOUS_KEY_FILE", flag: "--personal-data-previous-key-file",
                defaultValue: "(unset: no rotation under way)",
                meaning: "during a rotation of INBOX_PERSONAL_DATA_KEY_FILE, the key it replaces: data keys wrapped by either open; `inbox personal-data rewrap` then rewraps them all (docs/event-log.md)") {
            $0.personalDataPreviousKeyFile = $1
        },
        Setting(variable: "INBOX_UPLOADS_DIR", flag: "--uploads-dir", defaultValue: "(unset: <INBOX_DATA_DIR>/uploads)",
                meaning: "folder uploaded files are stored in, by their SHA-256 (made when missing)") { $0.uploadsDirectory = $1 },
        Setting(variable: "INBOX_UPLOADS_S3_URL", flag: "--uploads-s3-url", defaultValue: "(unset: the folder alone)",
                meaning: "http(s)://host[:port]/bucket of an S3-compatible store every node keeps uploads in (the folder then holds this node's copies; docs/uploads.md)") { configuration, text in
            guard S3Bucket.Settings.isBucketURL(text) else {
                throw Invalid(description: "INBOX_UPLOADS_S3_URL (--uploads-s3-url) must be http(s)://host[:port]/bucket, not \"\(text)\".")
            }
            configuration.uploadsS3URL = text
        },
        Setting(variable: "INBOX_UPLOADS_S3_REGION", flag: "--uploads-s3-region", defaultValue: "us-east-1",
                meaning: "the bucket's region, as its requests are signed for") { $0.uploadsS3Region = $1 },
        Setting(variable: "INBOX_UPLOADS_S3_ACCESS_KEY_ID", flag: "--uploads-s3-access-key-id", defaultValue: "(unset)",
                meaning: "the access key the bucket's requests are signed with, with INBOX_UPLOADS_S3_SECRET_ACCESS_KEY") { $0.uploadsS3AccessKeyId = $1 },
        Setting(variable: "INBOX_UPLOADS_S3_SECRET_ACCESS_KEY", flag: "--uploads-s3-secret-access-key", defaultValue: "(unset)",
                meaning: "its secret (an environment variable or a file, INBOX_UPLOADS_S3_SECRET_ACCESS_KEY_FILE; never a flag)") { $0.uploadsS3SecretAccessKey = $1 },
        Setting(variable: "INBOX_UPLOADS_S3_CA_FILE", flag: "--uploads-s3-ca-file", defaultValue: "(unset: the system's)",
                meaning: "PEM certificates to trust for the bucket's https") { $0.uploadsS3CAFile = $1 },
        Setting(variable: "INBOX_UPLOADS_ALLOW_PRIVATE_SOURCES", flag: "--uploads-allow-private-sources", defaultValue: "0",
                meaning: "1: a sourceUrl may lead to loopback, private and link-local addresses (tests only; 0 refuses them)") { configuration, text in
            guard text == "0" || text == "1" else {
                throw Invalid(description: "INBOX_UPLOADS_ALLOW_PRIVATE_SOURCES (--uploads-allow-private-sources) must be 0 or 1, not \"\(text)\".")
            }
            configuration.uploadsAllowPrivateSources = text == "1"
        },
        Setting(variable: "INBOX_TOKEN_KEYS", flag: "--token-keys", defaultValue: "(unset: the development key)",
                meaning: "the identity tier's ES256 public keys: a JWKS file, a PEM file, or a folder of <kid>.pem files") { $0.tokenKeysPath = $1 },
        Setting(variable: "INBOX_TOKEN_AUDIENCE", flag: "--token-audience", defaultValue: TokenExpectations.defaultAudience,
                meaning: "the aud of access tokens: the identity role writes it, the API refuses a token without it") { $0.tokenAudience = $1 },
        Setting(variable: "INBOX_TOKEN_ISSUER", flag: "--token-issuer", defaultValue: "(unset: INBOX_PUBLIC_URL, what the identity role writes as iss; none without it)",
                meaning: "the iss the API requires of access tokens") { $0.tokenIssuer = $1 },
        Setting(variable: "INBOX_SERVICE_CREDENTIALS", flag: "--service-credentials", defaultValue: "(unset: /internal refuses every call)",
                meaning: "name=secret,... of the tiers that may POST /internal/v1/events (secrets of 16+ characters)") { $0.serviceCredentials = $1 },
        Setting(variable: "INBOX_UNSUBSCRIBE_KEYS", flag: "--unsubscribe-keys", defaultValue: "(unset: no /mail/unsubscribe)",
                meaning: "version:base64url-secret,... signing mails' one-click unsubscribe links (the first signs; 32+ bytes each)") { configuration, text in
            do {
                _ = try UnsubscribeLink(setting: text)
            } catch {
                throw Invalid(description: "INBOX_UNSUBSCRIBE_KEYS (--unsubscribe-keys): \(error)")
            }
            configuration.unsubscribeKeys = text
        },
        Setting(variable: "INBOX_PUSH_ENVIRONMENT", flag: "--push-environment", defaultValue: "production",
                meaning: "production pushes to every registration; staging and development only to their own app's (eu.wristler.app.staging, .dev)") {
            configuration, text in
            guard let environment = PushEnvironment(rawValue: text) else {
                throw Invalid(description: "INBOX_PUSH_ENVIRONMENT (--push-environment) must be production, staging or development, not \"\(text)\".")
            }
            configuration.pushEnvironment = environment
        },
        Setting(variable: "INBOX_APNS_KEY_FILE", flag: "--apns-key-file", defaultValue: "(unset: iOS pushes are logged, not sent)",
                meaning: "the APNs provider key (.p8); needs INBOX_APNS_KEY_ID and INBOX_APNS_TEAM_ID") { $0.apnsKeyFile = $1 },
        Setting(variable: "INBOX_APNS_KEY_ID", flag: "--apns-key-id", defaultValue: "(unset)", meaning: "the APNs key's id (10 characters)") {
            $0.apnsKeyId = $1
        },
        Setting(variable: "INBOX_APNS_TEAM_ID", flag: "--apns-team-id", defaultValue: "(unset)", meaning: "the Apple developer team id") {
            $0.apnsTeamId = $1
        },
        url("INBOX_APNS_PRODUCTION_URL", "--apns-production-url", default: "https://api.push.apple.com", meaning: "APNs' production host") {
            $0.apnsProductionURL = $1
        },
        url("INBOX_APNS_DEVELOPMENT_URL", "--apns-development-url", default: "https://api.sandbox.push.apple.com", meaning: "APNs' sandbox host") {
            $0.apnsDevelopmentURL = $1
        },
        Setting(variable: "INBOX_FCM_SERVICE_ACCOUNT", flag: "--fcm-service-account", defaultValue: "(unset: Android pushes are logged, not sent)",
                meaning: "the Firebase service account's JSON file (project_id, client_email, private_key, token_uri)") { $0.fcmServiceAccountFile = $1 },
        url("INBOX_FCM_URL", "--fcm-url", default: "https://fcm.googleapis.com", meaning: "FCM's host") { $0.fcmURL = $1 },
        Setting(variable: "INBOX_PUSH_CA_FILE", flag: "--push-ca-file", defaultValue: "(unset: the system's certificates)",
                meaning: "PEM certificates trusted for APNs, FCM and the token endpoint besides the system's; also for Apple's and Google's sign-in keys") { $0.pushCAFile = $1 },
        wholeNumber(
            "INBOX_PUSH_DEADLINE_SECONDS", "--push-deadline-seconds", 60...2_419_200, default: 86_400, unit: "a whole number of seconds",
            meaning: "how long a push is retried before it is given up and counted (60-2419200)") { $0.pushDeadlineSeconds = $1 },
        wholeNumber(
            "INBOX_PUSH_CLAIM_SECONDS", "--push-claim-seconds", 5...3600, default: 60, unit: "a whole number of seconds",
            meaning: "how long a fan-out's claim on pushes lasts; a node that died leaves its pushes to the others after this (5-3600)") {
            $0.pushClaimSeconds = $1
        },
        wholeNumber("INBOX_FANOUT_WORKERS", "--fanout-workers", 1...64, default: 4, meaning: "sending loops per fan-out process (1-64)") {
            $0.fanoutWorkers = $1
        },
        wholeNumber("INBOX_FANOUT_BATCH", "--fanout-batch", 1...5000, default: 500, meaning: "pushes claimed per step of a sending loop (1-5000)") {
            $0.fanoutBatch = $1
        },
        wholeNumber(
            "INBOX_SCHEDULE_INTERVAL_SECONDS", "--schedule-interval-seconds", 10...86_400, default: 900, unit: "a whole number of seconds",
            meaning: "wait between two checks of the schedule (the shop reminders), on the one node that holds its lease (10-86400)") {
            $0.scheduleIntervalSeconds = $1
        },
        wholeNumber(
            "INBOX_SHOP_REMINDER_GAP_SECONDS", "--shop-reminder-gap-seconds", 0...604_800, default: 7200, unit: "a whole number of seconds",
            meaning: "least time between two shop_unanswered reminders of one shop; messages that wait meanwhile come in its next one (0-604800)") {
            $0.shopReminderGapSeconds = $1
        },
        wholeNumber(
            "INBOX_SHOP_REMINDER_WINDOW_DAYS", "--shop-reminder-window-days", 1...365, default: 14, unit: "a whole number of days",
            meaning: "how old a buyer's message may be and still be reminded of (1-365)") {
            $0.shopReminderWindowDays = $1
        },
        wholeNumber(
            "INBOX_MAIL_GATHER_SECONDS", "--mail-gather-seconds", 60...604_800, default: 3600, unit: "a whole number of seconds",
            meaning: "at most one mail per person per this many seconds: notifications meanwhile are gathered into the next one (60-604800)") {
            $0.mailGatherSeconds = $1
        },
        wholeNumber(
            "INBOX_SHOP_DIGEST_SECONDS", "--shop-digest-seconds", 60...604_800, default: 3600, unit: "a whole number of seconds",
            meaning: "the shop digest: a buyer's message waits this long for others, then they go in one mail, less those the shop read (60-604800)") {
            $0.shopDigestSeconds = $1
        },
        wholeNumber(
            "INBOX_MAIL_ATTEMPTS", "--mail-attempts", 1...100, default: 10, unit: "a whole number",
            meaning: "temporary failures of one mail (1 min, 5 min, 30 min, 2 h, then every 6 h apart) before it is dropped and counted (1-100)") {
            $0.mailAttempts = $1
        },
        wholeNumber(
            "INBOX_MAIL_CLAIM_SECONDS", "--mail-claim-seconds", 10...3600, default: 150, unit: "a whole number of seconds",
            meaning: "how long a mailer's claim on a mail lasts; a mailer that died leaves its mails to the others after this; more than "
                + "twice INBOX_SMTP_TIMEOUT_SECONDS, since a mailer sends for half its claim at most (10-3600)") {
            $0.mailClaimSeconds = $1
        },
        wholeNumber(
            "INBOX_MAIL_STALE_SECONDS", "--mail-stale-seconds", 3600...2_419_200, default: 604_800, unit: "a whole number of seconds",
            meaning: "news older than this when the mailer decides it (its event's age, or its outbox row's if younger) is not mailed, "
                + "only counted: a mailer that was down, or a projector that caught up on the whole log, does not mail the past (3600-2419200)") {
            $0.mailStaleSeconds = $1
        },
        wholeNumber(
            "INBOX_REPLAY_MEMORY_EVENTS", "--replay-memory-events", 0...1_000_000_000, default: 2_000_000, unit: "a whole number",
            meaning: "the events `inbox replay` folds the bell and the threads of in memory at a time; a longer log is folded "
                + "in slices of people of about this many events, the later ones kept on disk meanwhile; and the events a projector "
                + "whose tables are empty folds in memory before it writes them, with its checkpoint, in one transaction; 0: "
                + "batch by batch through SQL, slower (0-1000000000)") {
            $0.replayMemoryEvents = $1
        },
        Setting(variable: "INBOX_REPLAY_SPILL_DIR", flag: "--replay-spill-dir", defaultValue: "(unset: the system's temporary folder)",
                meaning: "where `inbox replay` keeps the events of the slices after the first until their turn (about the log's size)") {
            $0.replaySpillDirectory = $1
        },
        wholeNumber(
            "INBOX_MAIL_BATCH", "--mail-batch", 1...10_000, default: 100, unit: "a whole number",
            meaning: "outbox entries decided, and mails claimed, per step of the mailer (1-10000)") {
            $0.mailBatch = $1
        },
        wholeNumber(
            "INBOX_MAIL_WORKERS", "--mail-workers", 1...64, default: 4, unit: "a whole number",
            meaning: "mailing loops per process, each with its own database session and relay connection (1-64)") {
            $0.mailWorkers = $1
        },
        wholeNumber(
            "INBOX_MAIL_POLL_SECONDS", "--mail-poll-seconds", 1...3600, default: 5, unit: "a whole number of seconds",
            meaning: "how often the mailer looks for mail that fell due when nothing woke it (1-3600)") {
            $0.mailPollSeconds = $1
        },
        url("INBOX_PUBLIC_URL", "--public-url", default: "(unset: mails carry no unsubscribe link)",
            meaning: "the API's address from the internet; mails link to <url>/mail/unsubscribe (needs INBOX_UNSUBSCRIBE_KEYS; https for List-Unsubscribe)") {
            $0.publicURL = $1
        },
        mail("INBOX_SMTP_URL", "--smtp-url", default: "(unset: mails go to INBOX_MAIL_FOLDER)",
             meaning: "the relay: smtp://host:587 (STARTTLS required) or smtps://host:465 (TLS)"),
        mail("INBOX_SMTP_USERNAME", "--smtp-username", default: "(unset)", meaning: "the relay's AUTH user, with INBOX_SMTP_PASSWORD"),
        mail("INBOX_SMTP_PASSWORD", "--smtp-password", default: "(unset)", meaning: "the relay's AUTH password, with INBOX_SMTP_USERNAME"),
        mail("INBOX_SMTP_CA_FILE", "--smtp-ca-file", default: "(unset: the system's certificates)",
             meaning: "PEM certificates trusted for the relay instead of the system's"),
        mail("INBOX_SMTP_ALLOW_PLAIN", "--smtp-allow-plain", default: "0",
             meaning: "1: an smtp:// relay without STARTTLS is used in plain text (a relay on the same machine or network only)"),
        mail("INBOX_SMTP_CONNECT_TIMEOUT_SECONDS", "--smtp-connect-timeout-seconds", default: "10", meaning: "connecting to the relay (1-3600)"),
        mail("INBOX_SMTP_TIMEOUT_SECONDS", "--smtp-timeout-seconds", default: "60", meaning: "one whole mail, connecting included (1-3600)"),
        mail("INBOX_MAIL_FROM", "--mail-from", default: "Wristler <inbox@localhost> (required with a relay)",
             meaning: "the sender, Name <address> or address"),
        mail("INBOX_MAIL_FOLDER", "--mail-folder", default: "(unset: <INBOX_DATA_DIR>/mail)",
             meaning: "where mails are written as .eml files when INBOX_SMTP_URL is unset"),
    ] + identitySettings

    /// A setting of the Mail module: kept as given, and checked with the others when mail starts
    /// (`mailConfiguration()`), since several are only meaningful together.
    private static func mail(_ variable: String, _ flag: String, default defaultValue: String, meaning: String) -> Setting {
        Setting(variable: variable, flag: flag, defaultValue: defaultValue, meaning: meaning) { configuration, text in
            configuration.mailSettings[variable] = text
        }
    }

    /// A setting whose value is an http or https URL, kept without a trailing slash.
    private static func url(
        _ variable: String, _ flag: String, default defaultValue: String, meaning: String,
        _ set: @escaping @Sendable (inout InboxConfiguration, String) -> Void
    ) -> Setting {
        Setting(variable: variable, flag: flag, defaultValue: defaultValue, meaning: meaning) { configuration, text in
            guard let components = URLComponents(string: text), ["http", "https"].contains(components.scheme ?? ""), components.host?.isEmpty == false
            else {
                throw Invalid(description: "\(variable) (\(flag)) must be an http:// or https:// URL with a host, not \"\(text)\".")
            }
            set(&configuration, text.hasSuffix("/") ? String(text.dropLast()) : text)
        }
    }

    /// A setting whose value is a TCP port (0: any free one).
    private static func port(
        _ variable: String, _ flag: String, default defaultValue: String, meaning: String,
        _ set: @escaping @Sendable (inout InboxConfiguration, UInt16) -> Void
    ) -> Setting {
        Setting(variable: variable, flag: flag, defaultValue: defaultValue, meaning: meaning) { configuration, text in
            guard let port = UInt16(text) else {
                throw Invalid(description: "\(variable) (\(flag)) must be a port from 0 to 65535 (0: any free one), not \"\(text)\".")
            }
            set(&configuration, port)
        }
    }

    /// A setting whose value is a whole number within `range`.
    private static func wholeNumber(
        _ variable: String, _ flag: String, _ range: ClosedRange<Int>, default defaultValue: Int, unit: String = "a whole number",
        meaning: String, _ set: @escaping @Sendable (inout InboxConfiguration, Int) -> Void
    ) -> Setting {
        Setting(variable: variable, flag: flag, defaultValue: String(defaultValue), meaning: meaning) { configuration, text in
            guard let number = Int(text), range.contains(number) else {
                throw Invalid(
                    description: "\(variable) (\(flag)) must be \(unit) from \(range.lowerBound) to \(range.upperBound), not \"\(text)\".")
            }
            set(&configuration, number)
        }
    }

    private static func requestLimit(
        _ variable: String, _ flag: String, default defaultValue: String, meaning: String,
        _ set: @escaping @Sendable (inout InboxConfiguration, AttemptLimit) -> Void
    ) -> Setting {
        Setting(variable: variable, flag: flag, defaultValue: defaultValue, meaning: meaning) { configuration, text in
            guard let limit = AttemptLimit(text: text) else {
                throw Invalid(description: "\(variable) (\(flag)) must be N/SECONDS, such as \(defaultValue) (N from 1, SECONDS from 1 to 604800), not \"\(text)\".")
            }
            set(&configuration, limit)
        }
    }

    /// Reads the environment, then consumes the global flags from `arguments` (leaving the rest).
    /// Flags win over the environment; the first bad value is refused with a sentence naming it.
    /// A setting `NAME` may instead be read from the file `NAME_FILE` names (a mounted secret, a
    /// systemd credential), its last line break dropped.
    static func load(environment: [String: String], arguments: inout [String]) throws -> InboxConfiguration {
        var values: [String: String] = [:]
        for setting in settings {
            if let value = environment[setting.variable], !value.isEmpty { values[setting.variable] = value }
            if let path = environment[setting.variable + "_FILE"], !path.isEmpty {
                guard values[setting.variable] == nil else {
                    throw Invalid(description: "\(setting.variable) and \(setting.variable)_FILE are both set: set one of them.")
                }
                values[setting.variable] = try valueFile(path, of: setting.variable)
            }
        }
        values.merge(try takeFlags(from: &arguments)) { _, flag in flag }
        var configuration = InboxConfiguration()
        for setting in settings {
            if let value = values[setting.variable] { try setting.apply(&configuration, value) }
        }
        _ = try configuration.uploadsBucket()
        return configuration
    }

    /// The `INBOX_*` variables of `environment` that are no setting (nor a setting's `_FILE`), each
    /// with the known setting closest to it when one is near (a misspelling): they are ignored, and
    /// `inbox` says so at start. The tests' and benchmarks' own (`INBOX_TEST_*`, `INBOX_BENCH_*`,
    /// `INBOX_BINARY`) are not settings of `inbox` and pass unremarked.
    static func unknownVariables(in environment: [String: String]) -> [(variable: String, closest: String?)] {
        let known = Set(settings.map(\.variable))
        return environment.keys.sorted().compactMap { variable in
            guard variable.hasPrefix("INBOX_"), !variable.hasPrefix("INBOX_TEST_"), !variable.hasPrefix("INBOX_BENCH_"), variable != "INBOX_BINARY",
                !known.contains(variable), !(variable.hasSuffix("_FILE") && known.contains(String(variable.dropLast(5))))
            else { return nil }
            let nearest = known.map { ($0, editDistance(variable, $0)) }.min { ($0.1, $0.0) < ($1.1, $1.0) }
            return (variable, nearest.flatMap { $0.1 <= max(2, variable.count / 5) ? $0.0 : nil })
        }
    }

    /// Levenshtein's distance between two names (insertions, deletions and substitutions).
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8)
        let b = Array(b.utf8)
        var previous = Array(0...b.count)
        for (i, x) in a.enumerated() {
            var current = [i + 1] + Array(repeating: 0, count: b.count)
            for (j, y) in b.enumerated() {
                current[j + 1] = min(previous[j + 1] + 1, current[j] + 1, previous[j] + (x == y ? 0 : 1))
            }
            previous = current
        }
        return previous[b.count]
    }

    /// Removes the settings' flags (`--flag value` or `--flag=value`) from `arguments` and returns
    /// their values by variable.
    /// The settings whose values are secrets: never taken from the command line, where every user
    /// of the machine reads them in `ps` (`DATABASE_URL` only when it holds a password).
    static let secretVariables: Set<String> = [
        "DATABASE_URL", "INBOX_SMTP_PASSWORD", "INBOX_SERVICE_CREDENTIALS", "INBOX_UNSUBSCRIBE_KEYS", "INBOX_UPLOADS_S3_SECRET_ACCESS_KEY",
    ]

    /// The text of the file a `NAME_FILE` setting names, without its last line break.
    static func valueFile(_ path: String, of variable: String) throws -> String {
        let bytes: Data
        do {
            let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
            defer { try? handle.close() }
            bytes = try handle.read(upToCount: 1 << 20 + 1) ?? Data()
        } catch {
            throw Invalid(description: "\(variable)_FILE names \(path), which cannot be read: \(error.localizedDescription)")
        }
        guard bytes.count <= 1 << 20 else { throw Invalid(description: "\(variable)_FILE names \(path), which is over 1 MiB: not a setting's value.") }
        var text = String(decoding: bytes, as: UTF8.self)
        if text.hasSuffix("\r\n") { text.removeLast() } else if text.hasSuffix("\n") { text.removeLast() }
        guard !text.isEmpty else { throw Invalid(description: "\(variable)_FILE names \(path), which is empty.") }
        return text
    }

    /// Whether `value` of `variable` is a secret that the command line must not carry.
    static func isSecret(_ variable: String, _ value: String) -> Bool {
        guard secretVariables.contains(variable) else { return false }
        guard variable == "DATABASE_URL" else { return true }
        // postgres://user:password@host/... or ...?password=...
        let authority = value.split(separator: "/", maxSplits: 3).dropFirst().first.map(String.init) ?? ""
        return (authority.contains("@") && authority.prefix { $0 != "@" }.contains(":")) || value.lowercased().contains("password=")
    }

    private static func takeFlags(from arguments: inout [String]) throws -> [String: String] {
        var values: [String: String] = [:]
        var rest: [String] = []
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            let (flag, inlineValue): (String, String?) =
                argument.contains("=") && argument.hasPrefix("--")
                ? (String(argument.prefix { $0 != "=" }), String(argument.drop { $0 != "=" }.dropFirst())) : (argument, nil)
            if let setting = settings.first(where: { $0.flag == flag }) {
                if let inlineValue {
                    values[setting.variable] = inlineValue
                } else {
                    guard index + 1 < arguments.count else { throw Invalid(description: "\(flag) needs a value.") }
                    values[setting.variable] = arguments[index + 1]
                    index += 1
                }
                if let value = values[setting.variable], isSecret(setting.variable, value) {
                    throw Invalid(
                        description: "\(flag) would show a secret to everybody on this machine (in ps): set \(setting.variable) "
                            + "or \(setting.variable)_FILE (a file holding it) instead.")
                }
            } else {
                rest.append(argument)
            }
            index += 1
        }
        arguments = rest
        return values
    }
}
