import Foundation

/// A logger value, shaped like swift-log's: a label, a level below which nothing is written,
/// metadata carried into every line, and a handler that writes the lines. It is handed down to
/// whatever logs (never a global), so a test can hand in a `RecordingLogHandler` and read the lines.
///
/// Messages and metadata are autoclosures: a line below the level costs no formatting.
public struct Logger: Sendable {
    /// Severities, in swift-log's order.
    public enum Level: Int, Sendable, Comparable, CaseIterable, CustomStringConvertible {
        case trace, debug, info, notice, warning, error, critical

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue < rhs.rawValue }

        public var description: String {
            switch self {
            case .trace: "trace"
            case .debug: "debug"
            case .info: "info"
            case .notice: "notice"
            case .warning: "warning"
            case .error: "error"
            case .critical: "critical"
            }
        }
    }

    /// Key-value pairs written with a line.
    public typealias Metadata = [String: Value]

    /// A metadata value, typed so that a JSON line says a number as a number (`"status":200`,
    /// `"durationMs":1.25`) and a collector can compare and sum it. A string literal, an
    /// interpolation, a number or a boolean literal makes one.
    public enum Value: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral, ExpressibleByStringInterpolation,
        ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral
    {
        case string(String)
        case integer(Int64)
        case number(Double)
        case bool(Bool)

        public init(stringLiteral value: String) { self = .string(value) }
        public init(integerLiteral value: Int64) { self = .integer(value) }
        public init(floatLiteral value: Double) { self = .number(value) }
        public init(booleanLiteral value: Bool) { self = .bool(value) }

        /// A whole number of any integer type.
        public static func int<Number: BinaryInteger>(_ value: Number) -> Value { .integer(Int64(clamping: value)) }

        /// As the text format writes it.
        public var description: String {
            switch self {
            case .string(let text): text
            case .integer(let number): String(number)
            case .number(let number): number.isFinite ? String(number) : "null"
            case .bool(let flag): flag ? "true" : "false"
            }
        }
    }

    public let label: String
    public var logLevel: Level
    public var metadata: Metadata
    public let handler: any LogHandler

    public init(label: String, level: Level = .info, metadata: Metadata = [:], handler: any LogHandler) {
        self.label = label
        self.logLevel = level
        self.metadata = metadata
        self.handler = handler
    }

    /// A logger that writes nothing, for code that is handed none.
    public static let silent = Logger(label: "silent", level: .critical, handler: SilentLogHandler())

    public subscript(metadataKey key: String) -> Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// A copy whose lines carry `extra` besides this logger's metadata.
    public func with(_ extra: Metadata) -> Logger {
        var copy = self
        copy.metadata.merge(extra) { _, new in new }
        return copy
    }

    public func log(
        level: Level, _ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil
    ) {
        guard level >= logLevel else { return }
        var merged = self.metadata
        if let extra = metadata() { merged.merge(extra) { _, new in new } }
        handler.write(LogRecord(level: level, label: label, message: message(), metadata: merged, date: Date()))
    }

    public func trace(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .trace, message(), metadata: metadata())
    }
    public func debug(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .debug, message(), metadata: metadata())
    }
    public func info(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .info, message(), metadata: metadata())
    }
    public func notice(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .notice, message(), metadata: metadata())
    }
    public func warning(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .warning, message(), metadata: metadata())
    }
    public func error(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .error, message(), metadata: metadata())
    }
    public func critical(_ message: @autoclosure () -> String, metadata: @autoclosure () -> Metadata? = nil) {
        log(level: .critical, message(), metadata: metadata())
    }
}

/// One line to be written.
public struct LogRecord: Sendable {
    public var level: Logger.Level
    public var label: String
    public var message: String
    public var metadata: Logger.Metadata
    public var date: Date

    public init(level: Logger.Level, label: String, message: String, metadata: Logger.Metadata, date: Date) {
        self.level = level
        self.label = label
        self.message = message
        self.metadata = metadata
        self.date = date
    }
}

/// Where a logger's lines go. Called from any thread; a handler orders its own writes.
public protocol LogHandler: Sendable {
    func write(_ record: LogRecord)
}

struct SilentLogHandler: LogHandler {
    func write(_ record: LogRecord) {}
}
