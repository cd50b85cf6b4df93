import EventLog
import Foundation
import InboxDomain
import JSONParsing
import Lifecycle
import PostgresClient

/// `inbox events append` and `inbox events tail`.
enum EventsCommand {
    static func run(_ arguments: [String], configuration: InboxConfiguration, log: Logger) async throws {
        guard let verb = arguments.first else {
            throw UsageError(description: "inbox events needs append or tail.")
        }
        let rest = Array(arguments.dropFirst())
        switch verb {
        case "append":
            if rest.count > 1 { throw UsageError(description: "inbox events append takes one JSON argument (or - for stdin).") }
            if let flag = rest.first, flag.hasPrefix("--") {
                throw UsageError(description: "inbox events append has no flag \(flag).")
            }
            let text: String
            if let argument = rest.first, argument != "-" {
                text = argument
            } else {
                text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
            }
            let (events, expected) = try parseEvents(text)
            try await withDatabase(configuration, log: log, migrate: true) { database in
                let appended = try await database.store.append(events, expectedVersions: expected)
                for item in appended { print(item.event.jsonLine(extra: [("appended", item.wasAppended)])) }
            }
        case "tail":
            var from: Int64?
            var follow = false
            var index = 0
            while index < rest.count {
                switch rest[index] {
                case "--follow", "-f": follow = true
                case "--from":
                    guard index + 1 < rest.count, let position = Int64(rest[index + 1]), position >= 1 else {
                        throw UsageError(description: "--from needs a position: a whole number of 1 or more.")
                    }
                    from = position
                    index += 1
                default:
                    throw UsageError(description: "inbox events tail has no flag \(rest[index]); it takes --from POSITION and --follow.")
                }
                index += 1
            }
            let (start, following) = (from, follow)
            try await withDatabase(configuration, log: log, migrate: true, existingOnly: true) { database in
                try await tail(store: database.store, from: start, follow: following, configuration: configuration)
            }
        default:
            throw UsageError(description: "inbox events has no command \"\(verb)\"; it has append and tail.")
        }
    }

    /// Prints events with a position of `from` or more (the last 10 when nil) as JSON lines; with
    /// `follow`, keeps printing new ones as they commit.
    static func tail(store: EventStore, from: Int64?, follow: Bool, configuration: InboxConfiguration) async throws {
        let first: Int64
        if let from { first = from } else { first = max(1, try await store.headPosition() - 9) }
        let checkpoint = try await store.checkpoint(beforePosition: first)
        let options = EventStore.SubscriptionOptions(pollInterval: .milliseconds(configuration.pollIntervalMilliseconds))
        if follow {
            try await store.follow(after: checkpoint, options: options) { batch in
                try printLines(batch, from: first)
            }
        } else {
            // Everything committed when the command started, even events held back for a moment
            // by an older transaction that is still open (docs/event-log.md, gap-safe reads).
            let target = try await store.lastCommittedTransactionId()
            var position = checkpoint
            while true {
                let batch = try await store.read(after: position, limit: 1000)
                if let last = batch.last {
                    try printLines(batch, from: first)
                    position = last.checkpoint
                } else if position.transactionId >= target {
                    break
                } else {
                    try await Task.sleep(for: .milliseconds(20))
                }
            }
        }
    }

    private static func printLines(_ batch: [RecordedEvent], from first: Int64) throws {
        var output = ""
        for event in batch where event.position >= first { output += event.jsonLine() + "\n" }
        try writeOutput(output)
    }

    /// One event object or an array of them:
    /// `{"stream", "type", "schemaVersion"?, "payload", "metadata"?, "idempotencyKey"?, "expectedVersion"?}`.
    static func parseEvents(_ text: String) throws -> ([NewEvent], [String: ExpectedVersion]) {
        let document: JSONValue
        do {
            document = try JSONValue(parsing: text)
        } catch {
            throw UsageError(description: "the event is not valid JSON: \(conciseJSONError(error))")
        }
        let items: [JSONValue]
        switch document {
        case .array(let list): items = list
        case .object: items = [document]
        default: throw UsageError(description: "the event must be a JSON object, or an array of them.")
        }
        if items.isEmpty { throw UsageError(description: "the batch is empty.") }
        var events: [NewEvent] = []
        var expected: [String: ExpectedVersion] = [:]
        let known: Set<String> = ["stream", "type", "schemaVersion", "payload", "metadata", "idempotencyKey", "expectedVersion"]
        for (index, item) in items.enumerated() {
            let place = items.count == 1 ? "the event" : "event \(index)"
            guard case .object(let members) = item else { throw UsageError(description: "\(place) is not a JSON object.") }
            if let unknown = members.keys.sorted().first(where: { !known.contains($0) }) {
                throw UsageError(description: "\(place) has an unknown field \"\(unknown)\".")
            }
            guard let stream = members["stream"]?.stringValue else {
                throw UsageError(description: "\(place) needs \"stream\", a string.")
            }
            guard let type = members["type"]?.stringValue else { throw UsageError(description: "\(place) needs \"type\", a string.") }
            guard let payload = members["payload"], case .object = payload else {
                throw UsageError(description: "\(place) needs \"payload\", a JSON object.")
            }
            var schemaVersion = 1
            if let value = members["schemaVersion"] {
                guard let number = value.integerValue, (1...1_000_000).contains(number) else {
                    throw UsageError(description: "\(place): \"schemaVersion\" must be a whole number from 1 to 1000000.")
                }
                schemaVersion = Int(number)
            }
            var metadata = EventMetadata(origin: .api, service: "inbox-cli")
            if let value = members["metadata"] {
                do {
                    metadata = try JSONDecoder().decode(EventMetadata.self, from: JSONEncoder().encode(value))
                } catch {
                    throw UsageError(
                        description: "\(place): \"metadata\" must be an object with \"origin\" (app:ios, app:android, web or api) and optional strings appVersion, actor, correlationId, causationId, service.")
                }
            }
            var idempotencyKey: String?
            if let value = members["idempotencyKey"] {
                guard let key = value.stringValue else { throw UsageError(description: "\(place): \"idempotencyKey\" must be a string.") }
                idempotencyKey = key
            }
            if let value = members["expectedVersion"] {
                guard let number = value.integerValue, number >= 0 else {
                    throw UsageError(description: "\(place): \"expectedVersion\" must be a whole number of 0 or more (0: a new stream).")
                }
                if let earlier = expected[stream], earlier != (number == 0 ? .noStream : .exactly(number)) {
                    throw UsageError(description: "\(place): \"expectedVersion\" differs from an earlier one for stream \"\(stream)\".")
                }
                expected[stream] = number == 0 ? .noStream : .exactly(number)
            }
            let payloadJSON = String(decoding: try JSONEncoder().encode(payload), as: UTF8.self)
            events.append(
                NewEvent(
                    streamId: stream, type: type, schemaVersion: schemaVersion, payloadJSON: payloadJSON, metadata: metadata,
                    idempotencyKey: idempotencyKey))
        }
        return (events, expected)
    }

    private static func conciseJSONError(_ error: any Error) -> String {
        if case DecodingError.dataCorrupted(let context) = error {
            let underlying = (context.underlyingError as NSError?)?.userInfo[NSDebugDescriptionErrorKey] as? String
            return underlying ?? context.debugDescription
        }
        return "\(error)"
    }
}
