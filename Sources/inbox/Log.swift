import Foundation
import Lifecycle

extension InboxConfiguration.LogFormat {
    /// `auto`: text for a person at a terminal, JSON for a collector.
    var handlerFormat: StreamLogHandler.Format {
        switch self {
        case .json: .json
        case .text: .text
        case .auto: isatty(STDERR_FILENO) == 0 ? .json : .text
        }
    }
}

extension Logger {
    /// The process's logger: one line per message on standard error, as configured.
    static func inbox(_ configuration: InboxConfiguration) -> Logger {
        Logger(label: "inbox", level: configuration.logLevel, handler: StreamLogHandler(format: configuration.logFormat.handlerFormat))
    }
}
