import Foundation

/// One line per message on standard error: text on a terminal, JSON otherwise (or as configured).
struct Log: Sendable {
    let json: Bool

    init(format: InboxConfiguration.LogFormat) {
        switch format {
        case .json: json = true
        case .text: json = false
        case .auto: json = isatty(STDERR_FILENO) == 0
        }
    }

    func info(_ message: String, _ fields: [String: String]) { write("info", message, fields) }
    func error(_ message: String, _ fields: [String: String]) { write("error", message, fields) }

    private func write(_ level: String, _ message: String, _ fields: [String: String]) {
        let line: String
        if json {
            var object: [String: String] = fields
            object["level"] = level
            object["message"] = message
            object["time"] = ISO8601DateFormatter().string(from: Date())
            let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
            line = String(decoding: data, as: UTF8.self)
        } else {
            let details = fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            line = "\(level): \(message)" + (details.isEmpty ? "" : " \(details)")
        }
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}
