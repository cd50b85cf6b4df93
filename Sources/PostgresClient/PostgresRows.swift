import CLibPQ

/// The rows of one statement's result, read in text format. Decoding checks the column's type
/// and names the column when it cannot be decoded as the requested Swift type.
public final class PostgresRows: Sequence {
    private let result: OpaquePointer?
    public let count: Int
    public let columnNames: [String]
    private let columnTypes: [PostgresDataType]
    private let columnIndex: [String: Int]
    /// Rows changed by INSERT/UPDATE/DELETE/COPY (`PQcmdTuples`), nil for other statements.
    public let affectedRows: Int?
    /// The statement's command tag (`PQcmdStatus`): `INSERT 0 1`, `COMMIT`, or `ROLLBACK` for a
    /// `COMMIT` that ended a failed transaction.
    public let commandTag: String

    /// Takes ownership of `result`, or throws the server's error (with its SQLSTATE) if it is one.
    init(checking result: OpaquePointer?, connection: PostgresConnection, sql: String) throws {
        guard let result else { throw connection.failure("no result") }
        switch PQresultStatus(result) {
        case PGRES_COMMAND_OK, PGRES_TUPLES_OK, PGRES_SINGLE_TUPLE, PGRES_EMPTY_QUERY, PGRES_COPY_IN:
            break
        default:
            let error = Self.error(of: result, connection: connection)
            PQclear(result)
            throw error
        }
        self.result = result
        count = Int(PQntuples(result))
        let columns = Int(PQnfields(result))
        var names: [String] = []
        var types: [PostgresDataType] = []
        var index: [String: Int] = [:]
        names.reserveCapacity(columns)
        for column in 0..<columns {
            let name = String(cString: PQfname(result, Int32(column)))
            names.append(name)
            types.append(PostgresDataType(oid: UInt32(PQftype(result, Int32(column)))))
            if index[name] == nil { index[name] = column }
        }
        columnNames = names
        columnTypes = types
        columnIndex = index
        let tuples = String(cString: PQcmdTuples(result))
        affectedRows = Int(tuples)
        commandTag = PQcmdStatus(result).map { String(cString: $0) } ?? ""
    }

    deinit { if let result { PQclear(result) } }

    private static func error(of result: OpaquePointer, connection: PostgresConnection) -> PostgresError {
        func field(_ code: Int32) -> String? {
            guard let value = PQresultErrorField(result, code) else { return nil }
            return String(cString: value)
        }
        let sqlState = field(Int32(UInt8(ascii: "C")))  // PG_DIAG_SQLSTATE
        let primary = field(Int32(UInt8(ascii: "M"))) ?? PostgresConnection.trimmed(PQresultErrorMessage(result))
        let detail = field(Int32(UInt8(ascii: "D")))
        let constraint = field(Int32(UInt8(ascii: "n")))  // PG_DIAG_CONSTRAINT_NAME
        if sqlState == nil && !connection.isOpen {
            return PostgresError(.connectionLost, "The connection to PostgreSQL was lost: \(primary)")
        }
        return PostgresError(.server, primary, sqlState: sqlState.map { SQLState($0) }, detail: detail, constraint: constraint)
    }

    public func makeIterator() -> AnyIterator<PostgresRow> {
        var index = 0
        return AnyIterator { [self] in
            guard index < count else { return nil }
            defer { index += 1 }
            return PostgresRow(rows: self, index: index)
        }
    }

    public subscript(index: Int) -> PostgresRow { PostgresRow(rows: self, index: index) }

    public var first: PostgresRow? { count > 0 ? self[0] : nil }

    /// The single value of a one-row, one-column result (`SELECT count(*) ...`).
    public func scalar<T: PostgresDecodable>(_ type: T.Type = T.self) throws -> T {
        guard count == 1, columnNames.count >= 1 else {
            throw PostgresError(.columnNotFound, "Expected one row with a value, got \(count) rows.")
        }
        return try self[0].decode(T.self, at: 0)
    }

    /// Where the column `name` is, for a reader that decodes many rows by position
    /// (`PostgresRow.decode(_:at:)`) instead of looking the name up in each.
    public func columnIndex(_ name: String) throws -> Int { try column(named: name) }

    func column(named name: String) throws -> Int {
        guard let index = columnIndex[name] else {
            throw PostgresError(
                .columnNotFound, "The result has no column \"\(name)\" (it has \(columnNames.joined(separator: ", "))).")
        }
        return index
    }

    func decode<T: PostgresDecodable>(_ type: T.Type, row: Int, column: Int) throws -> T {
        guard column >= 0, column < columnTypes.count else {
            throw PostgresError(.columnNotFound, "The result has no column \(column).")
        }
        let columnType = columnTypes[column]
        let name = columnNames[column]
        guard T.accepts(columnType) else {
            throw PostgresError(
                .typeMismatch, "Column \"\(name)\" is \(columnType), which cannot be decoded as \(T.self).")
        }
        do {
            if PQgetisnull(result, Int32(row), Int32(column)) == 1 { return try T.decodeNull() }
            let text = String(cString: PQgetvalue(result, Int32(row), Int32(column)))
            return try T.decode(postgresText: text, type: columnType)
        } catch PostgresDecodingFailure.unexpectedNull {
            throw PostgresError(.unexpectedNull, "Column \"\(name)\" is NULL, which cannot be decoded as \(T.self).")
        } catch PostgresDecodingFailure.malformed(let why) {
            throw PostgresError(.typeMismatch, "Column \"\(name)\" (\(columnType)) cannot be decoded as \(T.self): \(why).")
        }
    }

    func isNull(row: Int, column: Int) -> Bool { PQgetisnull(result, Int32(row), Int32(column)) == 1 }
}

/// One row of a result.
public struct PostgresRow {
    let rows: PostgresRows
    let index: Int

    /// The column `name` decoded as `T`. Throws naming the column when the types do not fit.
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, _ name: String) throws -> T {
        try rows.decode(T.self, row: index, column: rows.column(named: name))
    }

    /// The column at `column` (0-based) decoded as `T`.
    public func decode<T: PostgresDecodable>(_ type: T.Type = T.self, at column: Int) throws -> T {
        try rows.decode(T.self, row: index, column: column)
    }

    public func isNull(_ name: String) throws -> Bool {
        rows.isNull(row: index, column: try rows.column(named: name))
    }
}
