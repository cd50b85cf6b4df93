import Encodings
import Foundation
import PostgresClient
import Threads

/// Writes each line to standard error as one `write(2)`: text (`info: message key=value`) for a
/// person at a terminal, or a JSON object (`level`, `message`, `time`, then the metadata) for a
/// log collector. Nothing is allocated per line beyond the line itself: no formatter, no encoder.
public struct StreamLogHandler: LogHandler {
    public enum Format: Sendable {
        case text, json
    }

    public let format: Format
    private let descriptor: Int32

    public init(format: Format, descriptor: Int32 = STDERR_FILENO) {
        self.format = format
        self.descriptor = descriptor
    }

    public func write(_ record: LogRecord) {
        var line = format == .json ? Self.json(record) : Self.text(record)
        line.append(UInt8(ascii: "\n"))
        line.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Foundation.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { return }
                offset += written
            }
        }
    }

    /// The line `record` makes as text, without its newline.
    public static func textLine(_ record: LogRecord) -> String { String(decoding: text(record), as: UTF8.self) }
    /// The line `record` makes as JSON, without its newline.
    public static func jsonLine(_ record: LogRecord) -> String { String(decoding: json(record), as: UTF8.self) }

    static func text(_ record: LogRecord) -> [UInt8] {
        var line = Array("\(record.level): \(record.message)".utf8)
        for (key, value) in record.metadata.sorted(by: { $0.key < $1.key }) {
            line.append(UInt8(ascii: " "))
            line.append(contentsOf: key.utf8)
            line.append(UInt8(ascii: "="))
            line.append(contentsOf: value.description.utf8)
        }
        return line
    }

    /// Keys in order, `level`, `message` and `time` winning over metadata of the same name.
    static func json(_ record: LogRecord) -> [UInt8] {
        var members = record.metadata
        members["level"] = .string(record.level.description)
        members["message"] = .string(record.message)
        members["time"] = .string(record.date.postgresText ?? "")
        var line: [UInt8] = [UInt8(ascii: "{")]
        line.reserveCapacity(256)
        for (index, (key, value)) in members.sorted(by: { $0.key < $1.key }).enumerated() {
            if index > 0 { line.append(UInt8(ascii: ",")) }
            JSONString.append(key, to: &line)
            line.append(UInt8(ascii: ":"))
            switch value {
            case .string(let text): JSONString.append(text, to: &line)
            case .integer, .bool: line.append(contentsOf: value.description.utf8)
            // JSON has no NaN nor infinity: such a number is null.
            case .number: line.append(contentsOf: value.description.utf8)
            }
        }
        line.append(UInt8(ascii: "}"))
        return line
    }
}

/// Keeps every line in memory, for tests that read what was logged.
public final class RecordingLogHandler: LogHandler {
    private let lines = Locked<[LogRecord]>([])

    public init() {}

    public func write(_ record: LogRecord) { lines.withLock { $0.append(record) } }

    public var records: [LogRecord] { lines.withLock { $0 } }
    public var messages: [String] { records.map(\.message) }
}
