import CLibPQ
import Encodings
import Foundation

/// One libpq connection. Its calls block, so it lives on a thread of its own (see `PostgresClient`);
/// it is not `Sendable` and must stay on the thread that opened it.
public final class PostgresConnection {
    private var handle: OpaquePointer?
    public let configuration: PostgresConfiguration
    /// The statements this session has prepared (`withPreparedStatements`), by SQL and parameter types.
    private var preparedStatements: [PreparedKey: String] = [:]
    /// Names handed out so far; a name is never reused, even for a statement forgotten since.
    private var preparedNames = 0
    /// Statements without rows held back by `executeWithNext`, to go in front of the next one.
    private var heldBack: [PostgresStatement] = []
    /// How many times this connection has sent to the server and waited for its answer (a
    /// statement, a preparation, a pipeline, a COPY's start and end): what a test counts to hold a
    /// path to its cost in round trips.
    public private(set) var roundTrips = 0

    /// Opens a connection, blocking until the server answers or `connect_timeout` passes.
    public init(configuration: PostgresConfiguration, applicationName: String = "inbox") throws {
        self.configuration = configuration
        let parameters = configuration.connectionParameters(applicationName: applicationName)
        let keys = parameters.map { strdup($0.0) }
        let values = parameters.map { strdup($0.1) }
        defer {
            keys.forEach { free($0) }
            values.forEach { free($0) }
        }
        var keyPointers: [UnsafePointer<CChar>?] = keys.map { UnsafePointer($0) } + [nil]
        var valuePointers: [UnsafePointer<CChar>?] = values.map { UnsafePointer($0) } + [nil]
        let connection = keyPointers.withUnsafeMutableBufferPointer { k in
            valuePointers.withUnsafeMutableBufferPointer { v in
                PQconnectdbParams(k.baseAddress, v.baseAddress, 1)
            }
        }
        guard let connection else {
            throw PostgresError(.connectionFailed, "libpq could not allocate a connection to \(configuration.redactedDescription).")
        }
        guard PQstatus(connection) == CONNECTION_OK else {
            let message = Self.trimmed(PQerrorMessage(connection))
            PQfinish(connection)
            throw PostgresError(
                .connectionFailed, "Cannot connect to PostgreSQL at \(configuration.redactedDescription): \(message)")
        }
        handle = connection
        // Server notices ("relation already exists, skipping") are not errors; libpq would print
        // them on stderr, which is the operator's log.
        PQsetNoticeProcessor(connection, { _, _ in }, nil)
        // Dates are parsed from ISO text in UTC; pin both so a server default cannot change them.
        // No JIT compilation: the tier's statements are short, and a generic plan's cost grows
        // with the log's estimated rows past `jit_above_cost`, after which every execution
        // compiled the statement again: an inline write's read of what is pending took 4.2 ms
        // instead of 0.015 on a log of 520,000 events (EXPLAIN ANALYZE), and posts fell from
        // about 700 a second to 130 as `inbox-bench sealing` grew its logs past 400,000.
        // One round trip for every setting of the session.
        var settings = "SET TimeZone TO 'UTC'; SET DateStyle TO 'ISO, YMD'; SET jit = off"
        if let milliseconds = configuration.statementTimeoutMilliseconds { settings += "; SET statement_timeout = \(milliseconds)" }
        try execute(settings)
    }

    deinit { close() }

    /// Closes the connection. Later calls throw `connectionLost`.
    public func close() {
        if let handle { PQfinish(handle) }
        handle = nil
    }

    /// Whether the connection is open and usable (it becomes unusable when the server goes away).
    public var isOpen: Bool {
        guard let handle else { return false }
        return PQstatus(handle) == CONNECTION_OK
    }

    /// Whether a transaction is open (or failed and not yet rolled back).
    public var isInTransaction: Bool {
        // A held-back BEGIN opens one (or the statement it goes with fails).
        if heldBack.first?.sql.hasPrefix("BEGIN") == true, let handle, PQtransactionStatus(handle) == PQTRANS_IDLE { return true }
        flushHeldBack()
        guard let handle else { return false }
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR || status == PQTRANS_ACTIVE
    }

    /// Whether the open transaction has failed: a statement in it raised an error that no
    /// `ROLLBACK TO SAVEPOINT` undid. A `COMMIT` now would end it as a rollback, without an error.
    public var isTransactionFailed: Bool {
        flushHeldBack()
        guard let handle else { return false }
        return PQtransactionStatus(handle) == PQTRANS_INERROR
    }

    /// The server's process id for this session (used to cancel or terminate it).
    public var backendPID: Int32 {
        guard let handle else { return 0 }
        return PQbackendPID(handle)
    }

    // MARK: Statements

    /// Runs one parameterized statement and returns its rows (if any). Values travel apart from the SQL.
    @discardableResult
    public func query(_ sql: String, _ parameters: any PostgresEncodable...) throws -> PostgresRows {
        try query(sql, binds: parameters.map { PostgresBind(text: $0.postgresText, type: type(of: $0).postgresType) })
    }

    /// Runs one parameterized statement with parameters given as a list.
    @discardableResult
    public func query(_ sql: String, binds: [PostgresBind]) throws -> PostgresRows {
        try query(sql, binds: binds, retried: false)
    }

    private func query(_ sql: String, binds: [PostgresBind], retried: Bool) throws -> PostgresRows {
        if !heldBack.isEmpty {
            return try pipeline([PostgresStatement(sql, binds: binds)]).last!
        }
        let connection = try liveHandle()
        if let name = try preparedName(sql, binds, on: connection) {
            let outsideTransaction = PQtransactionStatus(connection) == PQTRANS_IDLE
            roundTrips += 1
            let result = withParameters(binds) { _, values in PQexecPrepared(connection, name, Int32(binds.count), values, nil, nil, 0) }
            do {
                return try checkedPrepared(result, sql: sql, binds: binds)
            } catch let error as PostgresError where error.sqlState == .featureNotSupported && outsideTransaction && !retried {
                // Refused because its table changed shape (a column added by a migration, say):
                // nothing ran, so once more, prepared afresh. In a transaction the refusal stands.
                return try query(sql, binds: binds, retried: true)
            }
        }
        roundTrips += 1
        let result = withParameters(binds) { types, values in
            PQexecParams(connection, sql, Int32(binds.count), types, values, nil, nil, 0)
        }
        return try PostgresRows(checking: result, connection: self, sql: sql)
    }

    /// Runs SQL without parameters; it may hold several statements (migrations). Never put values in it.
    @discardableResult
    public func execute(_ sql: String) throws -> PostgresRows {
        // A statement held back with values needs the extended protocol: a pipeline, of which `sql`
        // is then one statement (with no values, and not several).
        if heldBack.contains(where: { !$0.binds.isEmpty }) {
            // (`SELECT` alone, when only what is held back is to go, answers one row of no columns.)
            return try pipeline([PostgresStatement(sql.isEmpty ? "SELECT" : sql, binds: [])])[0]
        }
        let connection = try liveHandle()
        // Statements held back go first, in the same message (the simple protocol runs them in
        // order and stops at the first error, which is the one returned).
        let text = heldBack.isEmpty ? sql : (heldBack.map(\.sql) + [sql]).joined(separator: "; ")
        heldBack = []
        roundTrips += 1
        return try PostgresRows(checking: PQexec(connection, text), connection: self, sql: text)
    }

    /// Holds `sql`, a statement that returns no rows and whose success the caller does not wait
    /// for (`BEGIN`, `SAVEPOINT`, `RELEASE SAVEPOINT` on the way of a transaction that goes on),
    /// and sends it in front of the next statement, in the same round trip. If it fails, that
    /// next statement throws its error (and does not run). Reading `isInTransaction` or
    /// `isTransactionFailed` sends what is held first, so they answer for it.
    ///
    /// An inline write's transaction is some thirty statements, each a round trip to PostgreSQL;
    /// on a busy machine the waits between them were more than half of its time.
    public func executeWithNext(_ sql: String) {
        heldBack.append(PostgresStatement(sql, binds: []))
    }

    /// `executeWithNext` for a statement with values (a checkpoint's update before a `COMMIT`, say):
    /// it goes in front of the next statement in a pipeline, so when the next is an `execute`, that
    /// must be a single statement with no values of its own.
    public func executeWithNext(_ statement: PostgresStatement) {
        heldBack.append(statement)
    }

    /// Sends the statements held back, alone; an error is left for the transaction's state to
    /// tell (`isTransactionFailed`), or the connection's (`isOpen`).
    private func flushHeldBack() {
        guard !heldBack.isEmpty, handle != nil else { return }
        _ = try? execute("")
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws. The
    /// `BEGIN` goes with the body's first statement (`executeWithNext`), not in a round trip of its own.
    public func transaction<T>(
        isolation: TransactionIsolation = .readCommitted, _ body: (PostgresConnection) throws -> T
    ) throws -> T {
        executeWithNext(isolation == .readCommitted ? "BEGIN" : "BEGIN ISOLATION LEVEL \(isolation.rawValue)")
        let value: T
        do {
            value = try body(self)
        } catch {
            // What the body held back goes nowhere: it would run, or fail, before the ROLLBACK.
            // (With nothing sent, not even the BEGIN, there is nothing to roll back.)
            heldBack = []
            if isOpen && isInTransaction { _ = try? execute("ROLLBACK") }
            throw error
        }
        do {
            try execute("COMMIT")
        } catch {
            // A statement held in front of the COMMIT failed, so the COMMIT did not run.
            if isOpen && isInTransaction { _ = try? execute("ROLLBACK") }
            throw error
        }
        return value
    }

    // MARK: Pipeline

    /// Sends every statement before reading any answer (libpq pipeline mode), then returns the results
    /// in order. The batch is one implicit transaction unless it holds its own BEGIN/COMMIT: when one
    /// statement fails, the ones after it are skipped and the first error is thrown.
    /// Keep a pipeline to a few thousand statements: it is sent in one go and read afterwards.
    public func pipeline(_ statements: [PostgresStatement]) throws -> [PostgresRows] {
        if statements.isEmpty { return [] }
        let connection = try liveHandle()
        // Held-back statements lead, and their (empty) results are not the caller's; those without
        // values (BEGIN, SAVEPOINT) are never prepared.
        let leading = heldBack.count
        let statements = heldBack + statements
        heldBack = []
        // Statements not yet prepared are prepared first: libpq's synchronous calls cannot run in pipeline mode.
        let names = try statements.enumerated().map { index, statement in
            index < leading && statement.binds.isEmpty ? nil : try preparedName(statement.sql, statement.binds, on: connection)
        }
        guard PQenterPipelineMode(connection) == 1 else { throw failure("cannot enter pipeline mode") }
        defer { PQexitPipelineMode(connection) }
        var sendError: PostgresError?
        for (statement, name) in zip(statements, names) {
            let sent = withParameters(statement.binds) { types, values in
                if let name {
                    PQsendQueryPrepared(connection, name, Int32(statement.binds.count), values, nil, nil, 0)
                } else {
                    PQsendQueryParams(connection, statement.sql, Int32(statement.binds.count), types, values, nil, nil, 0)
                }
            }
            if sent != 1 {
                sendError = failure("sending a pipelined statement failed")
                break
            }
        }
        roundTrips += 1
        guard PQpipelineSync(connection) == 1 else { throw sendError ?? failure("pipeline sync failed") }
        var results: [PostgresRows] = []
        var firstError: (any Error)? = sendError
        results.reserveCapacity(statements.count)
        while true {
            guard let result = PQgetResult(connection) else {
                if !isOpen { throw firstError ?? failure("the connection was lost during a pipeline") }
                continue  // the end of one statement's results
            }
            let status = PQresultStatus(result)
            if status == PGRES_PIPELINE_SYNC {
                PQclear(result)
                break
            }
            if status == PGRES_PIPELINE_ABORTED {
                PQclear(result)
                continue
            }
            do {
                let statement = statements[min(results.count, statements.count - 1)]
                results.append(try checkedPrepared(result, sql: statement.sql, binds: statement.binds))
            } catch {
                if firstError == nil { firstError = error }
            }
        }
        if let firstError { throw firstError }
        return Array(results.dropFirst(leading))
    }

    // MARK: COPY

    /// Loads rows with `COPY ... FROM STDIN` (text format). `sql` is the COPY statement;
    /// `write` is handed a writer and adds rows to it. Returns the number of rows the server loaded.
    @discardableResult
    public func copyIn(_ sql: String, _ write: (inout PostgresCopyWriter) throws -> Void) throws -> Int {
        let connection = try liveHandle()
        // A COPY cannot ride along with statements held back: they go first, on their own.
        if !heldBack.isEmpty { try execute("") }
        roundTrips += 2  // the start, and the end's answer
        let start = PQexec(connection, sql)
        guard PQresultStatus(start) == PGRES_COPY_IN else {
            _ = try PostgresRows(checking: start, connection: self, sql: sql)
            throw PostgresError(.clientFailure, "\(sql.prefix(60)) is not a COPY ... FROM STDIN statement.")
        }
        PQclear(start)
        var writer = PostgresCopyWriter { [unowned self] chunk in try self.putCopyData(connection, chunk) }
        var writeError: (any Error)?
        do {
            try write(&writer)
            try writer.flush()
        } catch {
            writeError = error
        }
        let ended: Int32 =
            writeError == nil ? PQputCopyEnd(connection, nil) : PQputCopyEnd(connection, "the client stopped the COPY")
        guard ended == 1 else { throw failure("ending the COPY failed") }
        var loaded = 0
        var serverError: (any Error)?
        while let result = PQgetResult(connection) {
            do {
                let rows = try PostgresRows(checking: result, connection: self, sql: sql)
                loaded += rows.affectedRows ?? 0
            } catch {
                serverError = serverError ?? error
            }
        }
        if let writeError { throw writeError }
        if let serverError { throw serverError }
        return loaded
    }

    /// Reads rows with `COPY ... TO STDOUT`: `sql` is the COPY statement; `read` is handed each
    /// row as the server sent it (in the statement's format). Returns the number of rows.
    @discardableResult
    public func copyOut(_ sql: String, _ read: (UnsafeRawBufferPointer) throws -> Void) throws -> Int {
        let connection = try liveHandle()
        if !heldBack.isEmpty { try execute("") }
        roundTrips += 1
        let start = PQexec(connection, sql)
        guard PQresultStatus(start) == PGRES_COPY_OUT else {
            _ = try PostgresRows(checking: start, connection: self, sql: sql)
            throw PostgresError(.clientFailure, "\(sql.prefix(60)) is not a COPY ... TO STDOUT statement.")
        }
        PQclear(start)
        var rows = 0
        var readError: (any Error)?
        while true {
            var buffer: UnsafeMutablePointer<CChar>?
            let length = PQgetCopyData(connection, &buffer, 0)
            if length == -1 { break }
            guard length >= 0, let buffer else { throw failure("reading COPY data failed") }
            defer { PQfreemem(buffer) }
            rows += 1
            // After a failure of `read`, the rest is drained: the connection stays usable.
            if readError == nil {
                do { try read(UnsafeRawBufferPointer(start: buffer, count: Int(length))) } catch { readError = error }
            }
        }
        var serverError: (any Error)?
        while let result = PQgetResult(connection) {
            do { _ = try PostgresRows(checking: result, connection: self, sql: sql) } catch { serverError = serverError ?? error }
        }
        if let readError { throw readError }
        if let serverError { throw serverError }
        return rows
    }

    private func putCopyData(_ connection: OpaquePointer, _ chunk: [UInt8]) throws {
        let sent = chunk.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { PQputCopyData(connection, $0.baseAddress, Int32($0.count)) }
        }
        guard sent == 1 else { throw failure("sending COPY data failed") }
    }

    // MARK: LISTEN / NOTIFY

    /// Subscribes this session to a channel. The name is an identifier, not a value, so it is checked
    /// to be a plain lower-case identifier and never interpolated otherwise.
    public func listen(_ channel: String) throws {
        try execute("LISTEN \(try Self.checkedIdentifier(channel))")
    }

    public func unlisten(_ channel: String) throws {
        try execute("UNLISTEN \(try Self.checkedIdentifier(channel))")
    }

    /// Sends a notification (delivered when the current transaction commits).
    public func notify(_ channel: String, payload: String = "") throws {
        try query("SELECT pg_notify($1, $2)", channel, payload)
    }

    /// Notifications already received, then waits up to `timeout` for more. Returns an empty list on timeout.
    /// Waits up to `timeout` for notifications on the channels this session listens on. When
    /// `interrupt` (the read end of a pipe) becomes readable first, its bytes are drained and the
    /// wait returns nothing: that is how a waiting listener is told to stop early.
    public func waitForNotifications(timeout: Duration, interrupt: Int32? = nil) throws -> [PostgresNotification] {
        let connection = try liveHandle()
        var received = drainNotifications(connection)
        if !received.isEmpty { return received }
        let socket = PQsocket(connection)
        guard socket >= 0 else { throw failure("the connection has no socket") }
        var descriptors = [pollfd(fd: socket, events: Int16(POLLIN), revents: 0)]
        if let interrupt { descriptors.append(pollfd(fd: interrupt, events: Int16(POLLIN), revents: 0)) }
        let ready = poll(&descriptors, nfds_t(descriptors.count), Int32(clamping: timeout.wholeMilliseconds))
        if ready < 0 && errno != EINTR { throw failure("poll failed: \(String(cString: strerror(errno)))") }
        if ready > 0 && descriptors[0].revents != 0 {
            guard PQconsumeInput(connection) == 1 else { throw failure("reading notifications failed") }
            received = drainNotifications(connection)
        }
        if let interrupt, descriptors.count > 1, descriptors[1].revents != 0 {
            var sink = [UInt8](repeating: 0, count: 64)
            while read(interrupt, &sink, sink.count) > 0 {}
        }
        return received
    }

    private func drainNotifications(_ connection: OpaquePointer) -> [PostgresNotification] {
        var list: [PostgresNotification] = []
        while let notify = PQnotifies(connection) {
            let item = notify.pointee
            list.append(
                PostgresNotification(
                    channel: String(cString: item.relname), payload: String(cString: item.extra), senderPID: item.be_pid))
            PQfreemem(notify)
        }
        return list
    }

    static func checkedIdentifier(_ name: String) throws -> String {
        let allowed = name.utf8.allSatisfy { c in
            (c >= UInt8(ascii: "a") && c <= UInt8(ascii: "z")) || (c >= UInt8(ascii: "0") && c <= UInt8(ascii: "9"))
                || c == UInt8(ascii: "_")
        }
        guard allowed, !name.isEmpty, name.utf8.count < 64, let first = name.utf8.first, !(48...57).contains(first) else {
            throw PostgresError(.invalidConfiguration, "\"\(name)\" is not a plain lower-case identifier.")
        }
        return name
    }

    // MARK: Internals

    struct PreparedKey: Hashable {
        let sql: String
        let types: [UInt32]
    }

    /// The name under which `sql` with `binds`' types is prepared on this session, preparing it now
    /// when there is room; nil when this session prepares nothing (more).
    private func preparedName(_ sql: String, _ binds: [PostgresBind], on connection: OpaquePointer) throws -> String? {
        let capacity = configuration.preparedStatementCapacity
        guard capacity > 0 else { return nil }
        let key = PreparedKey(sql: sql, types: binds.map { $0.type.oid })
        if let name = preparedStatements[key] { return name }
        guard preparedStatements.count < capacity else { return nil }
        preparedNames += 1
        let name = "wristler_\(preparedNames)"
        let types = binds.map { Oid($0.type.oid) }
        roundTrips += 1
        let result = types.withUnsafeBufferPointer { PQprepare(connection, name, sql, Int32(types.count), $0.baseAddress) }
        // A statement PostgreSQL refuses throws here, as it would have when run.
        _ = try PostgresRows(checking: result, connection: self, sql: sql)
        preparedStatements[key] = name
        return name
    }

    /// The rows of a statement that may have run prepared. PostgreSQL refuses to run a prepared
    /// statement whose result columns changed since it was prepared (a column added, a table
    /// swapped for one of another shape: "cached plan must not change result type", SQLSTATE
    /// 0A000); the statement is forgotten then, so that it is prepared afresh: at once by `query`
    /// outside a transaction, on the next call otherwise (and in a pipeline).
    private func checkedPrepared(_ result: OpaquePointer?, sql: String, binds: [PostgresBind]) throws -> PostgresRows {
        do {
            return try PostgresRows(checking: result, connection: self, sql: sql)
        } catch var error as PostgresError where error.sqlState == .featureNotSupported {
            preparedStatements[PreparedKey(sql: sql, types: binds.map { $0.type.oid })] = nil
            error.preparedStatementForgotten = true
            throw error
        }
    }

    private func liveHandle() throws -> OpaquePointer {
        guard let handle else { throw PostgresError(.connectionLost, "The connection is closed.") }
        return handle
    }

    /// An error for a failed libpq call: a lost connection when the connection is gone, otherwise a client failure.
    func failure(_ what: String, file: String = #fileID, line: Int = #line) -> PostgresError {
        let message = handle.map { Self.trimmed(PQerrorMessage($0)) } ?? ""
        let text = message.isEmpty ? what : "\(what): \(message)"
        return PostgresError(isOpen ? .clientFailure : .connectionLost, text, file: file, line: line)
    }

    static func trimmed(_ message: UnsafePointer<CChar>?) -> String {
        guard let message else { return "" }
        return String(cString: message).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    private func withParameters<R>(
        _ binds: [PostgresBind], _ body: (UnsafePointer<Oid>?, UnsafePointer<UnsafePointer<CChar>?>?) -> R
    ) -> R {
        if binds.isEmpty { return body(nil, nil) }
        let types = binds.map { Oid($0.type.oid) }
        // strdup keeps each C string alive for the call; freed right after.
        let values: [UnsafeMutablePointer<CChar>?] = binds.map { bind in bind.text.flatMap { strdup($0) } }
        defer { values.forEach { free($0) } }
        let constValues = values.map { UnsafePointer($0) }
        return types.withUnsafeBufferPointer { typeBuffer in
            constValues.withUnsafeBufferPointer { valueBuffer in body(typeBuffer.baseAddress, valueBuffer.baseAddress) }
        }
    }
}

/// `READ COMMITTED` is PostgreSQL's default.
public enum TransactionIsolation: String, Sendable {
    case readCommitted = "READ COMMITTED"
    case repeatableRead = "REPEATABLE READ"
    case serializable = "SERIALIZABLE"
}

/// One statement of a pipeline.
public struct PostgresStatement: Sendable {
    public var sql: String
    public var binds: [PostgresBind]
    public init(_ sql: String, _ parameters: any PostgresEncodable...) {
        self.sql = sql
        self.binds = parameters.map { PostgresBind(text: $0.postgresText, type: type(of: $0).postgresType) }
    }
    public init(_ sql: String, binds: [PostgresBind]) {
        self.sql = sql
        self.binds = binds
    }
}

/// A message from `NOTIFY`.
public struct PostgresNotification: Sendable, Hashable {
    public var channel: String
    public var payload: String
    public var senderPID: Int32
}

/// Encodes rows in COPY's text format and sends them in chunks of about 256 KiB.
public struct PostgresCopyWriter {
    private var buffer: [UInt8] = []
    private let send: ([UInt8]) throws -> Void
    private static let chunkSize = 256 * 1024

    init(send: @escaping ([UInt8]) throws -> Void) {
        self.send = send
        buffer.reserveCapacity(Self.chunkSize + 4096)
    }

    /// Adds one row; nil is NULL. Tabs, newlines and backslashes inside values are escaped.
    public mutating func write(row: [String?]) throws {
        for (index, field) in row.enumerated() {
            if index > 0 { buffer.append(UInt8(ascii: "\t")) }
            guard let field else {
                buffer.append(UInt8(ascii: "\\"))
                buffer.append(UInt8(ascii: "N"))
                continue
            }
            append(escaping: field)
        }
        buffer.append(UInt8(ascii: "\n"))
        if buffer.count >= Self.chunkSize { try flush() }
    }

    /// Adds rows already in COPY's text format, each ending with a newline (as `copyOut` of a
    /// text-format COPY hands them out).
    public mutating func write(encodedRows bytes: [UInt8]) throws {
        buffer.append(contentsOf: bytes)
        if buffer.count >= Self.chunkSize { try flush() }
    }

    /// Appends `field`'s bytes, escaping tabs, newlines, carriage returns and backslashes: the
    /// runs between them in one copy each (a replay writes hundreds of thousands of rows).
    private mutating func append(escaping field: String) {
        var field = field
        field.withUTF8 { bytes in
            var start = 0
            for index in bytes.indices {
                let escaped: UInt8
                switch bytes[index] {
                case UInt8(ascii: "\\"): escaped = UInt8(ascii: "\\")
                case UInt8(ascii: "\t"): escaped = UInt8(ascii: "t")
                case UInt8(ascii: "\n"): escaped = UInt8(ascii: "n")
                case UInt8(ascii: "\r"): escaped = UInt8(ascii: "r")
                default: continue
                }
                buffer.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start..<index]))
                buffer.append(UInt8(ascii: "\\"))
                buffer.append(escaped)
                start = index + 1
            }
            buffer.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[start...]))
        }
    }

    /// Adds one row of encodable values.
    public mutating func write(_ values: any PostgresEncodable...) throws {
        try write(row: values.map(\.postgresText))
    }

    mutating func flush() throws {
        guard !buffer.isEmpty else { return }
        try send(buffer)
        buffer.removeAll(keepingCapacity: true)
    }
}
