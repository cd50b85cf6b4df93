import EventLog
import Foundation
import InboxDomain
import InboxTesting
import PostgresClient

struct MessageSent: EventPayload, Equatable {
    static let eventType = "message_sent"
    var conversationId: String
    var authorId: String
    var body: String
}

func message(_ stream: String, _ body: String, key: String? = nil) -> NewEvent {
    NewEvent(
        streamId: stream, type: "message_sent",
        payloadJSON: #"{"conversationId":"\#(stream)","authorId":"p-1","body":"\#(body)"}"#,
        metadata: EventMetadata(origin: .appIOS, appVersion: "2.4.0", actor: "p-1", service: "inbox"), idempotencyKey: key)
}

extension TestDatabase {
    func count(_ sql: String = "SELECT count(*) FROM events") async throws -> Int64 {
        try await client.withConnection { try $0.query(sql).scalar(Int64.self) }
    }

    /// Everything a reader following checkpoints sees, from the start.
    func readAll(batch: Int = 1000) async throws -> [RecordedEvent] {
        try await waitUntilEventsAreReadable()
        var all: [RecordedEvent] = []
        var checkpoint = Checkpoint.start
        while true {
            let events = try await store.read(after: checkpoint, limit: batch)
            guard let last = events.last else { return all }
            all += events
            checkpoint = last.checkpoint
        }
    }
}

/// The stream ids of the first `count` events a subscription hands over, then the subscription ends.
func streamIds(_ count: Int, from stream: AsyncThrowingStream<[RecordedEvent], any Error>) -> Task<[String], any Error> {
    Task {
        var streams: [String] = []
        for try await batch in stream {
            streams += batch.map(\.streamId)
            if streams.count >= count { break }
        }
        return streams
    }
}
