import Foundation

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
    /// `INBOX_LOG_FORMAT`: `json` when not on a terminal under `auto`.
    var logFormat: LogFormat = .auto
    /// `INBOX_HTTP_HOST`, `INBOX_HTTP_PORT`: where `serve` listens (loopback by default).
    var httpHost: String = "127.0.0.1"
    var httpPort: UInt16 = 8080
    /// `INBOX_HTTP_THREADS`: the threads that run requests waiting on the database (the event
    /// loops that read and write the connections are one per core).
    var httpThreads: Int = 16
    /// `INBOX_HTTP_MAX_BODY_BYTES`: the largest request body accepted (larger: 413).
    var httpMaximumBodyBytes: Int = 1 << 20
    /// `INBOX_BELL_CACHE_MB`: memory for bell pages kept between their changes; 0: none.
    var bellCacheMegabytes: Int = 64
    /// `INBOX_TOKEN_KEYS`: the identity tier's public keys (a JWKS file, a PEM file or a folder of
    /// them); nil: the development key.
    var tokenKeysPath: String?
    /// `INBOX_SERVICE_CREDENTIALS`: `name=secret,...` of the tiers that may post events.
    var serviceCredentials: String?

    struct Invalid: Error, CustomStringConvertible {
        var description: String
    }

    /// One row of the settings table (README and `inbox help`).
    struct Setting {
        let variable: String
        let flag: String
        let defaultValue: String
        let meaning: String
    }

    static let settings: [Setting] = [
        Setting(variable: "DATABASE_URL", flag: "--database-url", defaultValue: "(unset: embedded PostgreSQL)",
                meaning: "postgres://user:pass@host:port/db?sslmode=... of the server to use"),
        Setting(variable: "INBOX_DATA_DIR", flag: "--data-dir", defaultValue: ".inbox",
                meaning: "folder of the embedded PostgreSQL (<dir>/postgres)"),
        Setting(variable: "INBOX_DB_POOL_SIZE", flag: "--pool-size", defaultValue: "10",
                meaning: "database connections per process (1-500)"),
        Setting(variable: "INBOX_MIGRATIONS_DIR", flag: "--migrations-dir", defaultValue: "(found: ./sql, beside the binary, /usr/share/inbox/sql)",
                meaning: "folder of the NNN_name.sql migrations"),
        Setting(variable: "INBOX_POLL_INTERVAL_MS", flag: "--poll-interval-ms", defaultValue: "1000",
                meaning: "longest wait between two reads of the log without a NOTIFY (10-60000)"),
        Setting(variable: "INBOX_LOG_FORMAT", flag: "--log-format", defaultValue: "auto",
                meaning: "auto, json or text (auto: text on a terminal, JSON otherwise)"),
        Setting(variable: "INBOX_HTTP_HOST", flag: "--http-host", defaultValue: "127.0.0.1",
                meaning: "IPv4 address the API listens on (0.0.0.0: every interface)"),
        Setting(variable: "INBOX_HTTP_PORT", flag: "--http-port", defaultValue: "8080",
                meaning: "TCP port the API listens on (0: any free port, printed at start)"),
        Setting(variable: "INBOX_HTTP_THREADS", flag: "--http-threads", defaultValue: "16",
                meaning: "threads running requests that wait on the database, one request each (1-256)"),
        Setting(variable: "INBOX_HTTP_MAX_BODY_BYTES", flag: "--http-max-body-bytes", defaultValue: "1048576",
                meaning: "largest request body accepted, larger is 413 (1024-104857600)"),
        Setting(variable: "INBOX_BELL_CACHE_MB", flag: "--bell-cache-mb", defaultValue: "64",
                meaning: "memory for bell pages kept until the person's bell changes (0: none, up to 65536)"),
        Setting(variable: "INBOX_TOKEN_KEYS", flag: "--token-keys", defaultValue: "(unset: the development key)",
                meaning: "the identity tier's ES256 public keys: a JWKS file, a PEM file, or a folder of <kid>.pem files"),
        Setting(variable: "INBOX_SERVICE_CREDENTIALS", flag: "--service-credentials", defaultValue: "(unset: /internal refuses every call)",
                meaning: "name=secret,... of the tiers that may POST /internal/v1/events (secrets of 16+ characters)"),
    ]

    /// Reads the environment, then consumes the global flags from `arguments` (leaving the rest).
    static func load(environment: [String: String], arguments: inout [String]) throws -> InboxConfiguration {
        var values: [String: String] = [:]
        for setting in settings {
            if let value = environment[setting.variable], !value.isEmpty { values[setting.variable] = value }
        }
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
            } else {
                rest.append(argument)
            }
            index += 1
        }
        arguments = rest

        var configuration = InboxConfiguration()
        if let url = values["DATABASE_URL"] {
            guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else {
                throw Invalid(description: "DATABASE_URL (--database-url) must start with postgres:// or postgresql://.")
            }
            configuration.databaseURL = url
        }
        if let directory = values["INBOX_DATA_DIR"] { configuration.dataDirectory = directory }
        if let text = values["INBOX_DB_POOL_SIZE"] {
            guard let size = Int(text), (1...500).contains(size) else {
                throw Invalid(description: "INBOX_DB_POOL_SIZE (--pool-size) must be a whole number from 1 to 500, not \"\(text)\".")
            }
            configuration.poolSize = size
        }
        configuration.migrationsDirectory = values["INBOX_MIGRATIONS_DIR"]
        if let text = values["INBOX_POLL_INTERVAL_MS"] {
            guard let milliseconds = Int(text), (10...60_000).contains(milliseconds) else {
                throw Invalid(
                    description: "INBOX_POLL_INTERVAL_MS (--poll-interval-ms) must be a whole number of milliseconds from 10 to 60000, not \"\(text)\".")
            }
            configuration.pollIntervalMilliseconds = milliseconds
        }
        if let text = values["INBOX_LOG_FORMAT"] {
            guard let format = LogFormat(rawValue: text) else {
                throw Invalid(description: "INBOX_LOG_FORMAT (--log-format) must be auto, json or text, not \"\(text)\".")
            }
            configuration.logFormat = format
        }
        if let host = values["INBOX_HTTP_HOST"] {
            var address = in_addr()
            guard inet_pton(AF_INET, host, &address) == 1 else {
                throw Invalid(description: "INBOX_HTTP_HOST (--http-host) must be an IPv4 address such as 127.0.0.1, not \"\(host)\".")
            }
            configuration.httpHost = host
        }
        if let text = values["INBOX_HTTP_PORT"] {
            guard let port = UInt16(text) else {
                throw Invalid(description: "INBOX_HTTP_PORT (--http-port) must be a port from 0 to 65535 (0: any free one), not \"\(text)\".")
            }
            configuration.httpPort = port
        }
        if let text = values["INBOX_HTTP_THREADS"] {
            guard let threads = Int(text), (1...256).contains(threads) else {
                throw Invalid(description: "INBOX_HTTP_THREADS (--http-threads) must be a whole number from 1 to 256, not \"\(text)\".")
            }
            configuration.httpThreads = threads
        }
        if let text = values["INBOX_BELL_CACHE_MB"] {
            guard let megabytes = Int(text), (0...65_536).contains(megabytes) else {
                throw Invalid(description: "INBOX_BELL_CACHE_MB (--bell-cache-mb) must be a whole number from 0 to 65536, not \"\(text)\".")
            }
            configuration.bellCacheMegabytes = megabytes
        }
        if let text = values["INBOX_HTTP_MAX_BODY_BYTES"] {
            guard let bytes = Int(text), (1024...104_857_600).contains(bytes) else {
                throw Invalid(
                    description: "INBOX_HTTP_MAX_BODY_BYTES (--http-max-body-bytes) must be a whole number from 1024 to 104857600, not \"\(text)\".")
            }
            configuration.httpMaximumBodyBytes = bytes
        }
        configuration.tokenKeysPath = values["INBOX_TOKEN_KEYS"]
        configuration.serviceCredentials = values["INBOX_SERVICE_CREDENTIALS"]
        return configuration
    }
}
