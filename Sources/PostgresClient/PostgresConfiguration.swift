import Encodings
/// Where and how to connect. Built from a URL (`postgres://user:pass@host:port/db?sslmode=require`)
/// or from a Unix socket folder.
public struct PostgresConfiguration: Sendable, Hashable {
    /// libpq connection keywords, passed to `PQconnectdbParams` in order.
    private var parameterList: [KeyValue]

    struct KeyValue: Sendable, Hashable {
        let key: String
        let value: String
    }

    /// The connection target without a password, for logs and messages.
    public var redactedDescription: String

    /// How many statements each session keeps prepared (0: none). See `withPreparedStatements`.
    public private(set) var preparedStatementCapacity = 0

    /// From a `postgres://` or `postgresql://` URL. libpq parses the URL itself, so every documented
    /// URL parameter (`sslmode`, `host=/socket/folder`, `connect_timeout`, ...) works.
    public init(url: String) throws {
        guard url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") else {
            throw PostgresError(
                .invalidConfiguration, "The database URL must start with postgres:// or postgresql://, not \"\(Self.redact(url))\".")
        }
        parameterList = [KeyValue(key: "dbname", value: url)]
        redactedDescription = Self.redact(url)
    }

    /// A server listening on a Unix socket in `directory` (the folder holding `.s.PGSQL.<port>`).
    public init(unixSocketDirectory directory: String, port: Int = 5432, user: String, database: String) {
        parameterList = [
            KeyValue(key: "host", value: directory), KeyValue(key: "port", value: String(port)),
            KeyValue(key: "user", value: user), KeyValue(key: "dbname", value: database),
        ]
        redactedDescription = "postgres://\(user)@[\(directory)]:\(port)/\(database)"
    }

    /// The same server, another database (tests create one per suite).
    public func withDatabase(_ database: String) -> PostgresConfiguration {
        var copy = self
        copy.parameterList.append(KeyValue(key: "dbname", value: database))
        copy.redactedDescription += " (database \(database))"
        return copy
    }

    /// The `statement_timeout` each session sets when it opens (nil: the server's).
    public private(set) var statementTimeoutMilliseconds: Int?

    /// The same server, with every statement of its sessions cancelled after `timeout` (PostgreSQL's
    /// `statement_timeout`, SQLSTATE 57014): for request paths that must not wait for ever. Set by a
    /// `SET` once the session is open, not by the startup packet's `options`, which pgbouncer refuses
    /// ("unsupported startup parameter") or, told to ignore it, drops (docs/operations.md).
    public func withStatementTimeout(_ timeout: Duration) -> PostgresConfiguration {
        var copy = self
        copy.statementTimeoutMilliseconds = Int(max(1, timeout.wholeMilliseconds))
        return copy
    }

    /// The same server, with each session preparing the first `capacity` distinct statements it runs
    /// through `query` or `pipeline` (by SQL text and parameter types) and executing them by name
    /// afterwards, so PostgreSQL parses and plans them once per session instead of on every call.
    /// For request paths that run the same few statements over and over; later statements run
    /// unprepared. PostgreSQL re-plans a prepared statement by itself when a table it uses changes.
    public func withPreparedStatements(_ capacity: Int) -> PostgresConfiguration {
        var copy = self
        copy.preparedStatementCapacity = max(0, capacity)
        return copy
    }

    /// Keywords and values in order. libpq lets a later keyword override an earlier one, and the URL's
    /// own parameters override the defaults placed before it; the encoding is always UTF-8.
    func connectionParameters(applicationName: String) -> [(String, String)] {
        var list: [(String, String)] = [("connect_timeout", "10"), ("application_name", applicationName)]
        for item in parameterList { list.append((item.key, item.value)) }
        list.append(("client_encoding", "UTF8"))
        return list
    }

    static func redact(_ url: String) -> String {
        // postgres://user:secret@host → postgres://user:***@host
        guard let schemeEnd = url.range(of: "://"), let at = url[schemeEnd.upperBound...].firstIndex(of: "@") else {
            return url
        }
        let credentials = url[schemeEnd.upperBound..<at]
        guard let colon = credentials.firstIndex(of: ":") else { return url }
        return String(url[..<colon]) + ":***" + String(url[at...])
    }
}

extension PostgresConfiguration {
    public static func == (lhs: PostgresConfiguration, rhs: PostgresConfiguration) -> Bool {
        lhs.parameterList == rhs.parameterList && lhs.preparedStatementCapacity == rhs.preparedStatementCapacity
    }
    public func hash(into hasher: inout Hasher) {
        hasher.combine(parameterList)
        hasher.combine(preparedStatementCapacity)
    }
}
