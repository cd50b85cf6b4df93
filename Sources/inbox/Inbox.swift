import Foundation
import Lifecycle

/// The `inbox` executable: one binary, several roles and operator commands (`Command.all`).
@main
struct Inbox {
    static func main() async {
        // A closed pipe (`inbox events tail | head`) is an error of the write that meets it, which
        // ends the command cleanly (`OutputClosed`), its embedded PostgreSQL stopped; SIGPIPE's
        // default would kill the process on the spot and leave the cluster running.
        signal(SIGPIPE, SIG_IGN)
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
        let log = Logger.inbox(configuration)
        for (variable, closest) in InboxConfiguration.unknownVariables(in: ProcessInfo.processInfo.environment) {
            log.warning(
                "\(variable) is not a setting of inbox and is ignored" + (closest.map { "; did you mean \($0)?" } ?? " (`inbox help` lists the settings)"),
                metadata: ["variable": .string(variable)])
        }
        do {
            try await command.run(rest, configuration, log)
        } catch let error as UsageError {
            fail(error.description, code: 2)
        } catch is CancellationError {
            exit(0)
        } catch let error as TemporaryFailure {
            fail(error.description, code: 75)
        } catch is OutputClosed {
            // Whoever read the output has what they wanted (`| head`).
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

/// A command that could not do its work now, and may succeed if run again later: exit status 75
/// (`EX_TEMPFAIL`), which a timer's unit logs as a failure.
struct TemporaryFailure: Error, CustomStringConvertible {
    var description: String
}

/// Standard output was closed by its reader (a pipe whose other end is gone).
struct OutputClosed: Error {}

/// Writes `text` to standard output, throwing `OutputClosed` when its reader has gone.
func writeOutput(_ text: String) throws {
    do {
        try FileHandle.standardOutput.write(contentsOf: Data(text.utf8))
    } catch {
        throw OutputClosed()
    }
}
