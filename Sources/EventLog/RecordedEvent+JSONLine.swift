import Foundation
import PostgresClient

extension RecordedEvent {
    /// The event as one line of JSON, as `inbox events tail` prints it. The payload and metadata are
    /// embedded as stored, but sealed personal fields, which are shown opened where their keys
    /// exist and `{"$erased": true}` where they do not (`openedPayloadJSON`); the transaction id is
    /// a string (it can exceed what JSON numbers hold exactly).
    public func jsonLine(extra: [(String, Bool)] = []) -> String {
        var text = JSONText(capacity: payloadJSON.utf8.count + metadataJSON.utf8.count + 256)
        var first = true
        text.raw(UInt8(ascii: "{"))
        text.key("position", first: &first)
        text.raw(String(position))
        text.key("transactionId", first: &first)
        text.string(String(transactionId))
        text.key("stream", first: &first)
        text.string(streamId)
        text.key("version", first: &first)
        text.raw(String(streamVersion))
        text.key("type", first: &first)
        text.string(type)
        text.key("schemaVersion", first: &first)
        text.raw(String(schemaVersion))
        text.key("payload", first: &first)
        text.raw(openedPayloadJSON)
        text.key("metadata", first: &first)
        text.raw(metadataJSON)
        text.key("idempotencyKey", first: &first)
        if let idempotencyKey { text.string(idempotencyKey) } else { text.raw("null") }
        text.key("recordedAt", first: &first)
        text.string(recordedAt.postgresText ?? "")
        for (name, value) in extra {
            text.key(name, first: &first)
            text.raw(value ? "true" : "false")
        }
        text.raw(UInt8(ascii: "}"))
        return text.string
    }
}
