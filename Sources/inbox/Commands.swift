import EventLog
import HTTP2Client
import Foundation
import Lifecycle
import LinkedLibraries
import PasswordHashing
import PostgresClient
import Projections

/// One command of `inbox`: its usage line, what it does, and how it runs. `inbox help` and
/// `inbox COMMAND --help` are printed from these, so they cannot drift from what runs.
struct Command: Sendable {
    let name: String
    /// The usage after `inbox `, e.g. `project [--projection NAME]...`.
    let synopsis: String
    /// What it does, in a sentence or two.
    let summary: String
    let run: @Sendable (_ arguments: [String], _ configuration: InboxConfiguration, _ log: Logger) async throws -> Void

    /// `inbox COMMAND --help`.
    var help: String {
        "usage: inbox \(synopsis)\n\n\(summary)\n\nEvery command also takes the settings `inbox help` lists (environment variable or flag).\n"
    }
}

extension Command {
    static let all: [Command] = [
        run, serve, identity, project, fanout, schedule, mail, migrate, replay, events, status, health, token, account, keys, erase, personalData,
        version, help,
    ]

    static func named(_ name: String) -> Command? { all.first { $0.name == name } }

    static let run = Command(
        name: "run", synopsis: "run",
        summary: "Migrates, then runs the tier: the projectors, the push fan-out, the schedule, the mailer and the API (with its caches' listener "
            + "and the identity role's sign-in), until SIGTERM or SIGINT stops them in order. The default command."
    ) { arguments, configuration, log in
        try expectNoArguments(arguments, command: "run")
        try await withDatabase(configuration, log: log, migrate: true) { database in
            log.info("the inbox tier is running", metadata: ["database": .string(database.description)])
            let (api, pool) = try await Roles.api(database: database, configuration: configuration, log: log, withIdentity: true)
            defer { pool.close() }
            FileHandle.standardOutput.write(Data(gettingStarted(configuration).utf8))
            let fanout = try Roles.fanout(database: database, configuration: configuration, log: log)
            let schedule = Roles.schedule(database: database, configuration: configuration, log: log)
            let mail = try Roles.mail(database: database, configuration: configuration, log: log)
            try await Roles.run(
                Roles.projectors(InboxProjections.all, database: database, configuration: configuration, log: log) + [fanout, schedule, mail] + api,
                database: database, log: log)
        }
    }

    static let fanout = Command(
        name: "fanout", synopsis: "fanout",
        summary: "Sends the pushes the projections decided, through APNs and FCM (or, without their credentials, to the log), until "
            + "SIGTERM or SIGINT. Any number of nodes may run it: they never send one push twice."
    ) { arguments, configuration, log in
        try expectNoArguments(arguments, command: "fanout")
        try await withDatabase(configuration, log: log, migrate: true) { database in
            // A fan-out can start before any projector has made the read models' tables.
            try await InboxProjections.prepareLiveTables(client: database.client)
            let fanout = try Roles.fanout(database: database, configuration: configuration, log: log)
            try await Roles.run([fanout], database: database, log: log)
        }
    }

    static let schedule = Command(
        name: "schedule", synopsis: "schedule [--once]",
        summary: "Reminds shops of buyers waiting for an answer (shop_unanswered) every INBOX_SCHEDULE_INTERVAL_SECONDS, until "
            + "SIGTERM or SIGINT. One node at a time checks; the others wait for its lease. Nothing is reminded twice.\n"
            + "--once: one check now, then exit (for a timer): 0 when checked, 75 when the read models are behind the log."
    ) { arguments, configuration, log in
        guard arguments.isEmpty || arguments == ["--once"] else {
            throw UsageError(description: "inbox schedule takes only --once, not \(arguments.joined(separator: " ")).")
        }
        let once = !arguments.isEmpty
        try await withDatabase(configuration, log: log, migrate: true) { database in
            // The schedule can start before any projector has made the read models' tables.
            try await InboxProjections.prepareLiveTables(client: database.client)
            if once {
                try writeOutput(try await Roles.checkOnce(database: database, configuration: configuration) + "\n")
                return
            }
            try await Roles.run([Roles.schedule(database: database, configuration: configuration, log: log)], database: database, log: log)
        }
    }

    static let mail = Command(
        name: "mail", synopsis: "mail",
        summary: "Mails people their notifications of every category whose e-mail is on (at most one mail per person per "
            + "INBOX_MAIL_GATHER_SECONDS), saved searches' matches at their interval, and shops' digests and sold mails, "
            + "through INBOX_SMTP_URL (or as .eml files in INBOX_MAIL_FOLDER), until SIGTERM or SIGINT. "
            + "Any number of nodes may run it: they never send one mail twice."
    ) { arguments, configuration, log in
        try expectNoArguments(arguments, command: "mail")
        try await withDatabase(configuration, log: log, migrate: true) { database in
            // The mailer can start before any projector has made the read models' tables.
            try await InboxProjections.prepareLiveTables(client: database.client)
            try await Roles.run([try Roles.mail(database: database, configuration: configuration, log: log)], database: database, log: log)
        }
    }

    static let serve = Command(
        name: "serve", synopsis: "serve",
        summary: "Serves the JSON:API over HTTP (INBOX_HTTP_HOST:INBOX_HTTP_PORT) until SIGTERM or SIGINT, then finishes the requests "
            + "in flight and stops."
    ) { arguments, configuration, log in
        try expectNoArguments(arguments, command: "serve")
        try await withDatabase(configuration, log: log, migrate: true) { database in
            let (api, pool) = try await Roles.api(database: database, configuration: configuration, log: log)
            defer { pool.close() }
            try await Roles.run(api, database: database, log: log)
        }
    }

    static let project = Command(
        name: "project", synopsis: "project [--projection NAME]...",
        summary: "Keeps read models current (all, or the named ones: \(InboxProjections.all.map(\.name).joined(separator: ", "))). One node "
            + "per projection projects at a time; the others wait for its lease."
    ) { arguments, configuration, log in
        let (projections, _) = try ProjectionCommands.selected(arguments, command: "project")
        try await withDatabase(configuration, log: log, migrate: true) { database in
            try await Roles.run(
                Roles.projectors(projections, database: database, configuration: configuration, log: log), database: database, log: log)
        }
    }

    static let migrate = Command(
        name: "migrate", synopsis: "migrate", summary: "Applies the sql/NNN_name.sql migrations that are missing."
    ) { arguments, configuration, log in
        try expectNoArguments(arguments, command: "migrate")
        try await withDatabase(configuration, log: log, migrate: false) { database in
            let applied = try await database.migrator.migrate(client: database.client)
            if applied.isEmpty { log.info("migrations are current", metadata: ["count": .int(database.migrator.migrations.count)]) }
            for migration in applied { log.info("applied migration", metadata: ["file": .string(migration.fileName)]) }
        }
    }

    static let replay = Command(
        name: "replay", synopsis: "replay [--projection NAME]... [--no-swap]",
        summary: "Rebuilds read models from the whole log beside the live ones, then swaps them in (progress on stderr); "
            + "--no-swap leaves them in replay_<name>."
    ) { arguments, configuration, log in
        let (projections, flags) = try ProjectionCommands.selected(arguments, command: "replay", extraFlags: ["--no-swap"])
        try await withDatabase(configuration, log: log, migrate: true) { database in
            try await ProjectionCommands.replay(
                projections, swap: !flags.contains("--no-swap"), inMemoryEventLimit: Int64(configuration.replayMemoryEvents),
                spillDirectory: configuration.replaySpillDirectory.map { URL(fileURLWithPath: $0, isDirectory: true) }
                    ?? FileManager.default.temporaryDirectory,
                database: database, log: log)
        }
    }

    static let events = Command(
        name: "events", synopsis: "events append [JSON|-] | events tail [--from POSITION] [--follow]",
        summary: "append: appends one event (a JSON object) or a batch (an array); - or nothing reads stdin.\n"
            + "tail: prints events as JSON lines (default: the last 10; --follow waits for more)."
    ) { arguments, configuration, log in
        try await EventsCommand.run(arguments, configuration: configuration, log: log)
    }

    static let status = Command(
        name: "status", synopsis: "status",
        summary: "Prints the migrations, the head of the event log, where each projection stands, the push outbox, the shop reminders and the mail outbox."
    ) { arguments, configuration, log in
        try expectNoArguments(arguments, command: "status")
        try await withDatabase(configuration, log: log, migrate: false, existingOnly: true) { database in
            try writeOutput(try await statusLines(database).map { $0 + "\n" }.joined())
        }
    }

    static let token = Command(
        name: "token", synopsis: "token --person ID [--scope \"S ...\"] [--ttl SECONDS] | token --guest",
        summary: "Prints an access token signed with the development key (INBOX_DATA_DIR/dev-token-key.pem)."
    ) { arguments, configuration, _ in
        try TokenCommand.run(arguments, configuration: configuration)
    }

    static let health = Command(
        name: "health", synopsis: "health",
        summary: "Asks this node's operations listener (INBOX_OPS_PORT on INBOX_HTTP_HOST) whether it is ready (/readyz): exit 0 when it "
            + "is, 1 with the reason when not. For a container's or a load balancer's health check."
    ) { arguments, configuration, _ in
        try expectNoArguments(arguments, command: "health")
        guard let port = configuration.opsPort, port != 0 else {
            throw UsageError(description: "inbox health asks the operations listener: set INBOX_OPS_PORT (and INBOX_HTTP_HOST) as the node has them.")
        }
        let host = configuration.httpHost == "0.0.0.0" ? "127.0.0.1" : configuration.httpHost
        let url = "http://\(host):\(port)/readyz"
        let client = try HTTP2Client(configuration: .init(connectTimeout: .seconds(2), maxResponseBytes: 64 << 10))
        defer { client.shutdown() }
        let response: HTTP2Response
        do {
            response = try await client.send(HTTP2Request(url: url, timeout: .seconds(5)))
        } catch {
            throw HealthFailure(description: "nothing answers at \(url): \(error)")
        }
        let body = String(decoding: response.body.prefix(500), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard response.status == 200 else {
            throw HealthFailure(description: "not ready: \(url) answered \(response.status): \(body)")
        }
        print("ready: \(url) answered 200")
    }

    struct HealthFailure: Error, CustomStringConvertible {
        var description: String
    }

    static let version = Command(
        name: "version", synopsis: "version", summary: "Prints the versions of the binary and the C libraries it runs on."
    ) { arguments, _, _ in
        try expectNoArguments(arguments, command: "version")
        let curl = LinkedLibraries.curl
        print("inbox 0.1.0 (commit \(LinkedLibraries.buildCommit))")
        print("libpq \(LinkedLibraries.libpqVersion)")
        print("OpenSSL \(LinkedLibraries.openSSLVersion)")
        print("libcurl \(curl.version) (\(curl.sslBackend), HTTP/2 \(curl.supportsHTTP2 ? "yes" : "no"))")
        print("libmicrohttpd \(LinkedLibraries.microhttpdVersion)")
        print("libnghttp2 \(LinkedLibraries.nghttp2Version)")
        print("libmagic \(LinkedLibraries.magicVersion / 100).\(LinkedLibraries.magicVersion % 100)")
        print("libjansson \(LinkedLibraries.janssonVersion)")
        print("libargon2 (Argon2 \(Argon2id.algorithmVersion >> 4).\(Argon2id.algorithmVersion & 0xF))")
    }

    static let help = Command(
        name: "help", synopsis: "help [COMMAND]", summary: "Prints the commands and the settings, or one command's usage."
    ) { arguments, _, _ in
        guard let name = arguments.first else {
            print(Inbox.helpText)
            return
        }
        guard arguments.count == 1, let command = Command.named(name) else {
            throw UsageError(description: "there is no command \"\(arguments.joined(separator: " "))\"; `inbox help` lists the commands.")
        }
        print(command.help, terminator: "")
    }

    static func expectNoArguments(_ arguments: [String], command: String) throws {
        if let first = arguments.first {
            throw UsageError(description: "inbox \(command) takes no argument \"\(first)\"; `inbox \(command) --help` shows its usage.")
        }
    }

    private static func gettingStarted(_ configuration: InboxConfiguration) -> String {
        """
        The tier runs its projectors and its API (docs/api.md). From another terminal:
          swift run inbox events append '{"stream":"person-7-security","type":"password_changed","payload":{"personId":"7"}}'
          TOKEN=$(swift run inbox token --person 7)
          curl -H "Authorization: Bearer $TOKEN" http://\(configuration.httpHost):\(configuration.httpPort)/v1/me/notifications
          swift run inbox status
          curl -d grant_type=urn:wristler:guest -d client_id=wristler-app http://\(configuration.httpHost):\(configuration.httpPort)/oauth/token
        \(Roles.mailDestination(configuration))
        \(configuration.databaseURL == nil
            ? "Ctrl-C stops the tier, and the embedded PostgreSQL when this command started it."
            : "Ctrl-C stops the tier; the PostgreSQL of DATABASE_URL keeps running.")

        """
    }

    private static func statusLines(_ database: Database) async throws -> [String] {
        let pending = try await database.migrator.pending(client: database.client)
        let head = pending.contains { $0.version == 1 } ? 0 : try await database.store.headPosition()
        var lines = [
            "database:   \(database.description)",
            "migrations: \(database.migrator.migrations.count - pending.count) applied, \(pending.count) pending"
                + (pending.isEmpty ? "" : " (\(pending.map(\.fileName).joined(separator: ", ")))"),
            "event log:  head position \(head)",
        ]
        if !pending.contains(where: { $0.version == 2 }) { lines += try await ProjectionCommands.status(database: database) }
        if !pending.contains(where: { $0.version == 6 }) { lines += try await Roles.fanoutStatus(database: database) }
        if !pending.contains(where: { $0.version == 12 }) { lines += try await Roles.scheduleStatus(database: database) }
        if !pending.contains(where: { $0.version == 14 }) { lines += try await Roles.mailStatus(database: database) }
        return lines
    }
}
