import EventLog
import Foundation
import InboxDomain
import LinkedLibraries
import PostgresClient
import Projections

/// The `inbox` executable: one binary, several roles and operator commands.
@main
struct Inbox {
    static let usage = """
        usage: inbox [COMMAND] [FLAGS]

        commands:
          run                      migrate, then run the tier: the API and the projectors [default]
          serve                    the JSON:API over HTTP (INBOX_HTTP_HOST:INBOX_HTTP_PORT) until SIGTERM
          migrate                  apply the sql/NNN_name.sql migrations that are missing
          project [--projection NAME]...
                                   keep read models current (all, or the named ones); one node per projection
                                   projects at a time, others wait for its lease
          replay [--projection NAME]... [--no-swap]
                                   rebuild read models from the whole log beside the live ones, then swap them in
          events append [JSON|-]   append one event (a JSON object) or a batch (an array); - or nothing reads stdin
          events tail [--from POSITION] [--follow]
                                   print events as JSON lines (default: the last 10; --follow waits for more)
          status                   migrations, the head of the event log, and where each projection stands
          token --person ID [--scope "S ..."] [--ttl SECONDS] | token --guest
                                   an access token signed with the development key (INBOX_DATA_DIR/dev-token-key.pem)
          version                  versions of the binary and the C libraries it runs on
          help                     this text

        settings (environment variable, flag, default):
        """

    static func main() async {
        var arguments = Array(CommandLine.arguments.dropFirst())
        let configuration: InboxConfiguration
        do {
            configuration = try InboxConfiguration.load(environment: ProcessInfo.processInfo.environment, arguments: &arguments)
        } catch {
            fail("\(error)", code: 2)
        }
        let command = arguments.first ?? "run"
        let rest = Array(arguments.dropFirst())
        let log = Log(format: configuration.logFormat)
        do {
            switch command {
            case "help", "--help", "-h":
                print(helpText)
            case "version", "--version":
                try expectNoArguments(rest, command: "version")
                printVersion()
            case "migrate":
                try expectNoArguments(rest, command: "migrate")
                try await withDatabase(configuration, log: log, migrate: false) { database in
                    let applied = try await database.migrator.migrate(client: database.client)
                    if applied.isEmpty {
                        log.info("migrations are current", ["count": "\(database.migrator.migrations.count)"])
                    }
                    for migration in applied { log.info("applied migration", ["file": migration.fileName]) }
                }
            case "events":
                try await EventsCommand.run(rest, configuration: configuration, log: log)
            case "status":
                try expectNoArguments(rest, command: "status")
                try await withDatabase(configuration, log: log, migrate: false) { database in
                    let pending = try await database.migrator.pending(client: database.client)
                    let head = pending.contains { $0.version == 1 } ? 0 : try await database.store.headPosition()
                    print("database:   \(database.description)")
                    print("migrations: \(database.migrator.migrations.count - pending.count) applied, \(pending.count) pending"
                        + (pending.isEmpty ? "" : " (\(pending.map(\.fileName).joined(separator: ", ")))"))
                    print("event log:  head position \(head)")
                    if !pending.contains(where: { $0.version == 2 }) {
                        for line in try await ProjectionCommands.status(database: database) { print(line) }
                    }
                }
            case "token":
                try TokenCommand.run(rest, configuration: configuration)
            case "serve":
                try expectNoArguments(rest, command: "serve")
                try await withDatabase(configuration, log: log, migrate: true) { database in
                    try await ServeCommand.serve(database: database, configuration: configuration, log: log)
                }
            case "project":
                let (projections, _) = try ProjectionCommands.selected(rest, command: "project")
                try await withDatabase(configuration, log: log, migrate: true) { database in
                    try await ProjectionCommands.project(projections, database: database, configuration: configuration, log: log)
                }
            case "replay":
                let (projections, flags) = try ProjectionCommands.selected(rest, command: "replay", extraFlags: ["--no-swap"])
                try await withDatabase(configuration, log: log, migrate: true) { database in
                    try await ProjectionCommands.replay(projections, swap: !flags.contains("--no-swap"), database: database, log: log)
                }
            case "run":
                try expectNoArguments(rest, command: "run")
                try await withDatabase(configuration, log: log, migrate: true) { database in
                    log.info("the inbox tier is running", ["database": database.description])
                    FileHandle.standardOutput.write(Data(
                        """
                        The tier runs its projectors and its API (docs/api.md). From another terminal:
                          swift run inbox events append '{"stream":"person-7-security","type":"password_changed","payload":{"personId":"7"}}'
                          TOKEN=$(swift run inbox token --person 7)
                          curl -H "Authorization: Bearer $TOKEN" http://\(configuration.httpHost):\(configuration.httpPort)/v1/me/notifications
                          swift run inbox status
                        Ctrl-C stops, and stops the embedded database.

                        """.utf8))
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        group.addTask {
                            try await ProjectionCommands.project(InboxProjections.all, database: database, configuration: configuration, log: log)
                        }
                        group.addTask { try await ServeCommand.serve(database: database, configuration: configuration, log: log) }
                        try await group.waitForAll()
                    }
                }
            default:
                fail("unknown command \"\(command)\"; `inbox help` lists the commands.", code: 2)
            }
        } catch let error as UsageError {
            fail(error.description, code: 2)
        } catch is CancellationError {
            exit(0)
        } catch {
            fail("\(error)", code: 1)
        }
    }

    static var helpText: String {
        usage + "\n"
            + InboxConfiguration.settings.map { "  \($0.variable) (\($0.flag)), default \($0.defaultValue)\n      \($0.meaning)" }
            .joined(separator: "\n")
    }

    static func printVersion() {
        let curl = LinkedLibraries.curl
        print("inbox 0.1.0")
        print("libpq \(LinkedLibraries.libpqVersion)")
        print("OpenSSL \(LinkedLibraries.openSSLVersion)")
        print("libcurl \(curl.version) (\(curl.sslBackend), HTTP/2 \(curl.supportsHTTP2 ? "yes" : "no"))")
        print("libmicrohttpd \(LinkedLibraries.microhttpdVersion)")
    }

    static func expectNoArguments(_ arguments: [String], command: String) throws {
        if let first = arguments.first {
            throw UsageError(description: "inbox \(command) takes no argument \"\(first)\"; `inbox help` lists the flags.")
        }
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
