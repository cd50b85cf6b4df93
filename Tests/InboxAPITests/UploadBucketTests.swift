import Crypto
import Foundation
import HTTPServer
import InboxDomain
import InboxAPI
import InboxTesting
import PostgresClient
import Projections
import Testing
import Uploads

/// Uploads kept in an S3-compatible bucket (moto's server, which `make test` starts:
/// INBOX_TEST_S3_URL), through two API nodes with folders of their own on one database: what one
/// node took, the other serves, fetched from the bucket into its own folder; a file whose last
/// record is swept leaves the bucket too.
@Suite struct UploadBucketTests {
    static func bucket() throws -> S3Bucket {
        guard let url = ProcessInfo.processInfo.environment["INBOX_TEST_S3_URL"], !url.isEmpty else {
            throw TestFailure(description: "INBOX_TEST_S3_URL is not set: run the tests with `make test`, which starts an S3-compatible server (scripts/test-s3.sh).")
        }
        let bucket = S3Bucket(settings: .init(url: url + "/inbox-\(UUID().uuidString.lowercased().prefix(8))", accessKeyId: "test", secretAccessKey: "test-secret"))
        try bucket.create()
        return bucket
    }

    struct TestFailure: Error, CustomStringConvertible { var description: String }

    @Test func aFileOneNodeTookIsServedByAnotherFromTheBucketAndLeavesItWhenSwept() async throws {
        let bucket = try Self.bucket()
        try await withTestDatabase { db in
            try await InboxProjections.prepareLiveTables(client: db.client)
            let pool = try db.requestPool()
            let clock = UploadRoutesTests.Clock()
            var nodes: [(api: APITestServer, directory: URL, server: HTTPServer)] = []
            defer {
                for node in nodes {
                    node.server.shutdown()
                    try? FileManager.default.removeItem(at: node.directory)
                }
            }
            for _ in 0..<2 {
                let directory = FileManager.default.temporaryDirectory.appendingPathComponent("uploads-node-\(UUID().uuidString)", isDirectory: true)
                let settings = UploadSettings(directory: directory, bucket: bucket, allowPrivateSources: true, now: { clock.now() })
                let api = APIServer(
                    routes: UploadRoutes.routes(client: pool, settings: settings), gate: AppVersionGate(client: db.client, refreshInterval: .zero),
                    verifier: AccessTokenTests.verifier)
                let server = try HTTPServer(configuration: .init(port: 0, threads: 2, bodyLimits: InboxRoutes.bodyLimits), replying: { api.reply($0) })
                nodes.append((APITestServer(server: server, db: db), directory, server))
            }
            let headers = ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "alice", scopes: Scope.app))]
            // A video: kept as it is sent, so the bytes served are the bytes taken.
            var file = UploadRoutesTests.mp4
            file += (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            let (body, type) = UploadRoutesTests.multipart([("file", "clip.mp4", file)])
            let taken = try await nodes[0].api.send("POST", "/v1/uploads", headers: headers.merging(["Content-Type": type]) { $1 }, body: body)
            #expect(taken.status == 201, "\(String(decoding: taken.body.prefix(300), as: UTF8.self))")
            let handle = try #require(UploadRoutesTests.attributes(taken)["handle"] as? String)
            let sha256 = SHA256.hexDigest(file)

            // The second node has no copy, and serves it from the bucket, keeping one.
            #expect(!FileManager.default.fileExists(atPath: nodes[1].directory.appendingPathComponent(sha256).path))
            let served = try await nodes[1].api.send("GET", "/v1/uploads/\(handle)", headers: headers)
            #expect(served.status == 200)
            #expect(SHA256.hexDigest([UInt8](served.body)) == sha256, "compared as digests: a failed comparison of large arrays is diffed for ever")
            #expect(served.header("Content-Type") == "video/mp4")
            #expect(FileManager.default.fileExists(atPath: nodes[1].directory.appendingPathComponent(sha256).path))

            // Unattached, a day on, swept: the record, both copies the sweeping node knows of, and the object go.
            clock.advance(UploadLimits.unattachedLifetime.inSeconds + 1)
            let store = UploadStore(client: pool, directory: nodes[0].directory, bucket: bucket, now: { clock.now() })
            #expect(try store.sweep() == 1)
            let probe = FileManager.default.temporaryDirectory.appendingPathComponent("probe-\(UUID().uuidString)").path
            let descriptor = open(probe, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
            defer {
                close(descriptor)
                unlink(probe)
            }
            #expect(try bucket.get(key: "uploads/" + sha256, to: descriptor, limit: UploadLimits.maximumFileBytes) == false, "the object is gone")
            #expect(try await nodes[1].api.send("GET", "/v1/uploads/\(handle)", headers: headers).status == 404)
        }
    }

    /// A bucket that cannot be reached: the upload is a 503 to send again and nothing is recorded;
    /// a file this node does not have is a 503 too, not a 404.
    @Test func aStoreThatCannotBeReachedIsA503AndNothingIsRecorded() async throws {
        try await withTestDatabase { db in
            try await InboxProjections.prepareLiveTables(client: db.client)
            let pool = try db.requestPool()
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("uploads-dead-\(UUID().uuidString)", isDirectory: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let dead = S3Bucket(settings: .init(url: "http://127.0.0.1:1/inbox", accessKeyId: "test", secretAccessKey: "test-secret", timeout: .seconds(2)))
            let api = APIServer(
                routes: UploadRoutes.routes(client: pool, settings: UploadSettings(directory: directory, bucket: dead)),
                gate: AppVersionGate(client: db.client, refreshInterval: .zero), verifier: AccessTokenTests.verifier)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 2, bodyLimits: InboxRoutes.bodyLimits), replying: { api.reply($0) })
            defer { server.shutdown() }
            let test = APITestServer(server: server, db: db)
            let headers = ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: "alice", scopes: Scope.app))]
            let (body, type) = UploadRoutesTests.multipart([("file", "clip.mp4", UploadRoutesTests.mp4)])
            let refused = try await test.send("POST", "/v1/uploads", headers: headers.merging(["Content-Type": type]) { $1 }, body: body)
            #expect(refused.status == 503 && refused.firstError["code"] as? String == "storage_unavailable")
            #expect(refused.header("Retry-After") == "1")
            #expect(try await db.scalar("SELECT count(*)::int FROM uploads", Int.self) == 0)

            // A record whose file only the bucket has.
            let store = UploadStore(client: pool, directory: directory)
            let kept = try store.store(UploadRoutesTests.mp4, contentType: "video/mp4", person: "alice", origin: "api", appVersion: nil, source: "file")
            try FileManager.default.removeItem(at: directory.appendingPathComponent(kept.sha256))
            let unserved = try await test.send("GET", "/v1/uploads/\(kept.handle)", headers: headers)
            #expect(unserved.status == 503 && unserved.firstError["code"] as? String == "storage_unavailable")
        }
    }
}
