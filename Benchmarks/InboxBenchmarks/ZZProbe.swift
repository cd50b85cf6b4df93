// TEMPORARY timing-split probe; removed after measuring.
import EventLog
import Foundation
import PostgresClient

enum Probe {
    static func escape(_ s: String) -> String {
        var out = "\""
        for ch in s.unicodeScalars {
            switch ch {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(ch)
            }
        }
        return out + "\""
    }
    static func json(_ events: [NewEvent]) -> String {
        var parts: [String] = []
        for e in events {
            let m = e.metadata
            let meta = "{\"origin\":\(escape(m.origin.rawValue)),\"appVersion\":\(escape(m.appVersion ?? "")),\"actor\":\(escape(m.actor ?? "")),\"correlationId\":\(escape(m.correlationId ?? "")),\"service\":\"inbox\"}"
            parts.append("{\"stream\":\(escape(e.streamId)),\"type\":\(escape(e.type)),\"schemaVersion\":1,\"payload\":\(e.payloadJSON),\"metadata\":\(meta),\"idempotencyKey\":\(escape(e.idempotencyKey ?? ""))}")
        }
        return "[" + parts.joined(separator: ",") + "]"
    }

    static func run() async throws {
        try await BenchmarkDatabase.with { db in
            var factory = EventFactory(seed: 42)
            for start in stride(from: 0, to: 10_000, by: 1000) {
                _ = try await db.store.append(try EventFactory.seedEvents(batch: start..<start + 1000))
            }
            let clock = ContinuousClock()
            var t: [String: [Double]] = [:]
            func add(_ k: String, _ d: Duration) { t[k, default: []].append(d.seconds * 1000) }
            for _ in 0..<25 {
                var s = clock.now
                let e1 = try factory.batch(size: 1000)
                add("A build 1000 NewEvent", clock.now - s)
                s = clock.now
                _ = try await db.store.append(e1)
                add("B EventStore.append", clock.now - s)

                let e2 = try factory.batch(size: 1000)
                s = clock.now
                let j2 = json(e2)
                add("F probe JSON envelope", clock.now - s)
                s = clock.now
                let (rows, decode) = try await db.client.withConnection { c -> (Int, Double) in
                    let r = try c.query("SELECT * FROM append_events($1::jsonb, $2::jsonb)", PostgresRawJSON(j2), PostgresRawJSON("{}"))
                    let d0 = ContinuousClock.now
                    var n = 0
                    for row in r {
                        _ = try row.decode(Int32.self, "ordinal"); _ = try row.decode(Bool.self, "appended")
                        _ = try row.decode(Int64.self, "position"); _ = try row.decode(UInt64.self, "transaction_id")
                        _ = try row.decode(String.self, "stream_id"); _ = try row.decode(Int64.self, "stream_version")
                        _ = try row.decode(String.self, "type"); _ = try row.decode(Int32.self, "schema_version")
                        _ = try row.decode(String?.self, "idempotency_key"); _ = try row.decode(Date.self, "recorded_at")
                        n += 1
                    }
                    return (n, (ContinuousClock.now - d0).seconds * 1000)
                }
                add("C raw query SELECT * (incl decode)", clock.now - s)
                add("G decode 1000 rows", .milliseconds(decode))
                precondition(rows == 1000)

                let e3 = try factory.batch(size: 1000)
                let j3 = json(e3)
                s = clock.now
                _ = try await db.client.withConnection { c in
                    try c.query("SELECT count(*) FROM append_events($1::jsonb, $2::jsonb)", PostgresRawJSON(j3), PostgresRawJSON("{}")).count
                }
                add("D raw query count(*)", clock.now - s)

                let e4 = try factory.batch(size: 1000)
                let j4 = json(e4)
                s = clock.now
                _ = try await db.client.withConnection { c in
                    try c.query("SELECT count(*) FROM jsonb_array_elements($1::jsonb)", PostgresRawJSON(j4)).count
                }
                add("E send+parse JSON only", clock.now - s)
                s = clock.now
                _ = try await db.client.withConnection { c in
                    try c.query("SELECT 1").count
                }
                add("H empty round trip", clock.now - s)
                s = clock.now
                _ = try await db.client.withConnection { c in
                    try c.query(AppendBenchmark.serverSideInsert, "probe\(UUID().uuidString.prefix(8))-", Int64(0), Int64(999), EventFactory.bodies, "c").count
                }
                add("I server-side INSERT 1000", clock.now - s)
            }
            for (k, v) in t.sorted(by: { $0.key < $1.key }) {
                print(k.padding(toLength: 40, withPad: " ", startingAt: 0), String(format: "median %.2f ms", median(v)))
            }
            print("bytes per batch JSON:", json(try factory.batch(size: 1000)).utf8.count)
        }
    }
}
