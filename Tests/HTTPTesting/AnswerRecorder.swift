import Foundation

/// Keeps the answers the tests' clients get, for `scripts/check-answers.py` (run by `make test`)
/// to check each against the official JSON:API 1.0 schema and the OpenAPI document's schema of
/// its operation and status. Only when `INBOX_TEST_ANSWERS_DIR` names a folder; at most
/// `perKind` answers of one method, path shape and status, so a randomized suite's thousands of
/// reads of one route do not make the check slow.
public enum AnswerRecorder {
    static let folder: URL? = ProcessInfo.processInfo.environment["INBOX_TEST_ANSWERS_DIR"].flatMap { $0.isEmpty ? nil : URL(fileURLWithPath: $0) }
    static let perKind = 40
    nonisolated(unsafe) private static var counts: [String: Int] = [:]
    private static let lock = NSLock()

    /// Keeps one answer. `path` is the request's target (with its query); `body` is parsed as JSON
    /// when it is JSON, else recorded as null with its content type.
    public static func record(method: String, path: String, status: Int, contentType: String?, body: [UInt8]) {
        guard let folder else { return }
        // The path's shape: ids (any segment with a digit, or past the known words) blanked.
        let route = path.split(separator: "?", maxSplits: 1).first.map(String.init) ?? path
        let shape = route.split(separator: "/").map { $0.contains(where: \.isNumber) ? "_" : String($0.prefix(40)) }.joined(separator: "/")
        let kind = "\(method) \(shape) \(status)"
        let number: Int? = lock.withLock {
            let seen = counts[kind, default: 0]
            guard seen < perKind else { return nil }
            counts[kind] = seen + 1
            return seen
        }
        guard number != nil else { return }
        let parsed: Any = (try? JSONSerialization.jsonObject(with: Data(body), options: [.fragmentsAllowed])) ?? NSNull()
        let record: [String: Any] = [
            "method": method, "path": path, "status": status, "contentType": contentType ?? NSNull(),
            "body": body.isEmpty ? NSNull() : parsed, "bodyBytes": body.count,
        ]
        guard let data = try? JSONSerialization.data(withJSONObject: record, options: [.sortedKeys]) else { return }
        try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try? data.write(to: folder.appendingPathComponent("\(UUID().uuidString).answer.json"))
    }

    /// Keeps the OpenAPI document the answers are checked against (the fullest one a test serves).
    public static func recordDocument(_ body: [UInt8], name: String = "openapi.json") {
        guard let folder else { return }
        try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try? Data(body).write(to: folder.appendingPathComponent(name))
    }
}
