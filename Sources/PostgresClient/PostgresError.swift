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
    /// The server's SQLSTATE for server errors (`.uniqueViolation`, ...).
    public var sqlState: SQLState?
    public var message: String
    public var detail: String?
    /// The constraint a server error names, if any.
    public var constraint: String?
    public var file: String
    public var line: Int
    /// The statement ran prepared, and PostgreSQL refused it because a table it reads changed shape
    /// since ("cached plan must not change result type", `0A000`): the session has forgotten it, so
    /// running it again prepares it afresh and succeeds.
    public var preparedStatementForgotten = false

    public init(
        _ code: Code, _ message: String, sqlState: SQLState? = nil, detail: String? = nil, constraint: String? = nil,
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
    /// statement (57), a lost connection, or a prepared statement refused and forgotten.
    public var isTransient: Bool {
        if isConnectionError || preparedStatementForgotten { return true }
        guard let sqlState else { return false }
        return sqlState.class == .transactionRollback || sqlState.class == .insufficientResources
            || sqlState.class == .operatorIntervention
    }
    /// The connection is gone: lost mid-call, refused, or the server is shutting down.
    public var isConnectionError: Bool {
        if code == .connectionLost || code == .connectionFailed { return true }
        guard let sqlState else { return false }
        return sqlState.class == .connectionException || sqlState == SQLState.adminShutdown
            || sqlState == SQLState.crashShutdown || sqlState == SQLState.cannotConnectNow
    }
}

/// A SQLSTATE: five characters naming a server error, the first two its class (PostgreSQL manual,
/// appendix A). Extensible: the values the tier acts on have names, any other the server sends is
/// still a value, and the tier's own SQL functions raise codes of their own (`WR001`, named where
/// they are handled).
public struct SQLState: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }

    /// The class of a SQLSTATE: its first two characters, which say what kind of failure it is
    /// (`40`, transaction rollback: retrying may succeed).
    public struct Class: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ rawValue: String) { self.rawValue = rawValue }

        public var description: String { rawValue }

        public static let connectionException = Class("08")
        public static let featureNotSupported = Class("0A")
        public static let dataException = Class("22")
        public static let integrityConstraintViolation = Class("23")
        public static let transactionRollback = Class("40")
        public static let syntaxErrorOrAccessRuleViolation = Class("42")
        public static let insufficientResources = Class("53")
        public static let objectNotInPrerequisiteState = Class("55")
        public static let operatorIntervention = Class("57")
    }

    public var `class`: Class { Class(String(rawValue.prefix(2))) }

    public static let featureNotSupported = SQLState("0A000")
    public static let uniqueViolation = SQLState("23505")
    public static let foreignKeyViolation = SQLState("23503")
    public static let checkViolation = SQLState("23514")
    public static let notNullViolation = SQLState("23502")
    public static let serializationFailure = SQLState("40001")
    public static let deadlockDetected = SQLState("40P01")
    public static let queryCanceled = SQLState("57014")
    public static let adminShutdown = SQLState("57P01")
    public static let crashShutdown = SQLState("57P02")
    public static let cannotConnectNow = SQLState("57P03")
    public static let insufficientPrivilege = SQLState("42501")
    public static let objectNotInPrerequisiteState = SQLState("55000")
    public static let undefinedTable = SQLState("42P01")
    public static let raiseException = SQLState("P0001")
}
