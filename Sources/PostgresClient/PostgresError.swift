/// An error from the PostgreSQL client. Callers switch on `code` (and `sqlState` for server errors),
/// never on `message`, which is for people.
public struct PostgresError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure this is. Extensible: new codes may be added.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        let name: String
        private init(_ name: String) { self.name = name }

        /// Could not open a connection (server down, wrong address, authentication refused).
        public static let connectionFailed = Code("connectionFailed")
        /// The connection broke while a call was in flight. Later calls reconnect.
        public static let connectionLost = Code("connectionLost")
        /// The server answered with an error; `sqlState` says which.
        public static let server = Code("server")
        /// A column's PostgreSQL type cannot be decoded as the requested Swift type, or its text is malformed.
        public static let typeMismatch = Code("typeMismatch")
        /// A column name that the result does not have.
        public static let columnNotFound = Code("columnNotFound")
        /// A NULL where the Swift type is not optional.
        public static let unexpectedNull = Code("unexpectedNull")
        /// The configuration (URL, pool size, ...) is not usable.
        public static let invalidConfiguration = Code("invalidConfiguration")
        /// The pool was shut down.
        public static let poolClosed = Code("poolClosed")
        /// libpq reported a failure outside any server answer (out of memory, protocol state).
        public static let clientFailure = Code("clientFailure")

        public var description: String { name }
    }

    public var code: Code
    /// The five-character SQLSTATE for server errors (`23505` for a unique violation, ...).
    public var sqlState: String?
    public var message: String
    public var detail: String?
    /// The constraint a server error names, if any.
    public var constraint: String?
    public var file: String
    public var line: Int

    public init(
        _ code: Code, _ message: String, sqlState: String? = nil, detail: String? = nil, constraint: String? = nil,
        file: String = #fileID, line: Int = #line
    ) {
        self.code = code
        self.message = message
        self.sqlState = sqlState
        self.detail = detail
        self.constraint = constraint
        self.file = file
        self.line = line
    }

    public var description: String {
        var text = message
        if let sqlState { text += " (SQLSTATE \(sqlState))" }
        if let detail, !detail.isEmpty { text += " — \(detail)" }
        return text
    }

    /// `23505`: a unique constraint refused the row.
    public var isUniqueViolation: Bool { sqlState == SQLState.uniqueViolation }
    /// `40001`/`40P01`: retrying the transaction may succeed.
    public var isSerializationFailure: Bool {
        sqlState == SQLState.serializationFailure || sqlState == SQLState.deadlockDetected
    }
    /// The statement may well succeed if tried again later: a serialization failure or deadlock
    /// (class 40), a lack of resources (53), an operator's intervention such as a cancelled
    /// statement (57), or a lost connection.
    public var isTransient: Bool {
        if isConnectionError { return true }
        guard let sqlState else { return false }
        return sqlState.hasPrefix("40") || sqlState.hasPrefix("53") || sqlState.hasPrefix("57")
    }
    /// The connection is gone: lost mid-call, refused, or the server is shutting down.
    public var isConnectionError: Bool {
        if code == .connectionLost || code == .connectionFailed { return true }
        guard let sqlState else { return false }
        return sqlState.hasPrefix("08") || sqlState == SQLState.adminShutdown
            || sqlState == SQLState.crashShutdown || sqlState == SQLState.cannotConnectNow
    }
}

/// SQLSTATE values the tier acts on. The full list is in the PostgreSQL manual, appendix A.
public enum SQLState {
    public static let uniqueViolation = "23505"
    public static let foreignKeyViolation = "23503"
    public static let checkViolation = "23514"
    public static let notNullViolation = "23502"
    public static let serializationFailure = "40001"
    public static let deadlockDetected = "40P01"
    public static let adminShutdown = "57P01"
    public static let crashShutdown = "57P02"
    public static let cannotConnectNow = "57P03"
    public static let insufficientPrivilege = "42501"
    public static let objectNotInPrerequisiteState = "55000"
    public static let undefinedTable = "42P01"
    public static let raiseException = "P0001"
}
