import Foundation
import Lifecycle

/// The `inbox` executable: one binary, several roles and operator commands (`Command.all`).
@main
struct Inbox {
    static func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        let configuration: InboxConfiguration
        do {
            configuration = try InboxConfiguration.load(environment: ProcessInfo.processInfo.environment, arguments: &arguments)
        } catch {
            fail("\(error)", code: 2)
        }
        let name = arguments.first ?? "run"
        let rest = Array(arguments.dropFirst())
        if ["--help", "-h"].contains(name) {
            print(helpText)
            exit(0)
        }
        guard let command = Command.named(name == "--version" ? "version" : name) else {
            fail("unknown command \"\(name)\"; `inbox help` lists the commands.", code: 2)
        }
        if rest.contains("--help") || rest.contains("-h") {
            print(command.help, terminator: "")
            exit(0)
        }
        do {
            try await command.run(rest, configuration, .inbox(configuration))
        } catch let error as UsageError {
            fail(error.description, code: 2)
        } catch is CancellationError {
            exit(0)
        } catch {
            fail("\(error)", code: 1)
        }
    }

    static var helpText: String {
        var text = "usage: inbox [COMMAND] [FLAGS]\n\ncommands (`inbox COMMAND --help` for one):\n"
        for command in Command.all {
            text += "  \(command.synopsis)\n      \(command.summary.replacingOccurrences(of: "\n", with: "\n      "))\n"
        }
        text += "\nsettings (environment variable, flag, default; any NAME may be read from the file NAME_FILE names instead,\n"
        text += "and a secret, DATABASE_URL with a password, INBOX_SERVICE_CREDENTIALS, INBOX_SMTP_PASSWORD, INBOX_UNSUBSCRIBE_KEYS or INBOX_UPLOADS_S3_SECRET_ACCESS_KEY,\n"
        text += "is never taken as a flag, where ps shows it):\n"
        text += InboxConfiguration.settings.map { "  \($0.variable) (\($0.flag)), default \($0.defaultValue)\n      \($0.meaning)" }
            .joined(separator: "\n")
        return text
    }

    /// Prints one line to standard error and exits.
    static func fail(_ message: String, code: Int32) -> Never {
        FileHandle.standardError.write(Data("inbox: \(message)\n".utf8))
        exit(code)
    }
}

struct UsageError: Error, CustomStringConvertible {
    var description: String
}
