import EventLog
import Crypto
import Foundation
import HTTPServer
import HTTPTesting
import InboxAPI
import InboxDomain
import InboxTesting
import PostgresClient
import Projections
import Synchronization
import Testing
import Uploads

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// Files through real sockets against a real PostgreSQL: uploads as a multipart part and from a
/// source URL (a local Python server), the type read from the bytes, the bounds an attacker meets,
/// storage by content, who may read a file, and expiry.
@Suite struct UploadRoutesTests {
    /// A 1x1 PNG, as a phone's app or the local source sends it.
    static let sentPNG = [UInt8](Data(base64Encoded: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC")!)
    /// The same PNG as it is stored and served: written again without metadata (`PhotoCleaner`),
    /// which leaves it as it is when it comes again.
    static let png = (try? PhotoCleaner.clean(sentPNG, contentType: "image/png")) ?? []
    /// The start of an MP4 (an ftyp box), which is what libmagic reads.
    static let mp4 = [UInt8](Data(hexString: "00000018667479706d703432000000006d70343269736f6d0000000866726565"))

    /// A clock the test moves.
    final class Clock: Sendable {
        let current = Mutex(Date())
        func now() -> Date { current.withLock { $0 } }
        func advance(_ seconds: TimeInterval) { current.withLock { $0 = $0.addingTimeInterval(seconds) } }
    }

    struct Harness {
        let api: APITestServer
        let directory: URL
        let clock: Clock
        let store: UploadStore

        func headers(_ person: String, scopes: [Scope] = Scope.app, extra: [String: String] = [:]) throws -> [String: String] {
            ["Authorization": "Bearer " + (try AccessTokenTests.signer.mint(subject: person, scopes: scopes))].merging(extra) { $1 }
        }

        /// The stored files (not the temporary ones being written).
        func files() throws -> [String] {
            (try? FileManager.default.contentsOfDirectory(atPath: directory.path))?.filter { !$0.hasPrefix(".") }.sorted() ?? []
        }

        func upload(_ person: String, _ bytes: [UInt8], filename: String? = "photo.jpg", extra: [String: String] = [:]) async throws -> APITestServer.Reply {
            let (body, type) = UploadRoutesTests.multipart([("file", filename, bytes)])
            return try await api.send("POST", "/v1/uploads", headers: try headers(person, extra: ["Content-Type": type].merging(extra) { $1 }), body: body)
        }

        func fromSource(_ person: String, _ url: String) async throws -> APITestServer.Reply {
            let body = Data(#"{"data":{"type":"uploads","attributes":{"sourceUrl":"\#(url)"}}}"#.utf8)
            return try await api.send("POST", "/v1/uploads", headers: try headers(person, extra: ["Content-Type": JSONAPI.mediaType]), body: body)
        }
    }

    static func withUploadsAPI(
        allowPrivateSources: Bool = true, fetchLimits: SourceFetcher.Limits = .init(), concurrentFetches: Int = 4, _ body: (Harness) async throws -> Void
    ) async throws {
        try await withTestDatabase { db in
            try await InboxProjections.prepareLiveTables(client: db.client)
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("uploads-test-\(UUID().uuidString)", isDirectory: true)
            defer { try? FileManager.default.removeItem(at: directory) }
            let clock = Clock()
            let pool = try db.requestPool()
            let settings = UploadSettings(
                directory: directory, allowPrivateSources: allowPrivateSources, fetchLimits: fetchLimits, concurrentFetches: concurrentFetches,
                now: { clock.now() })
            let api = APIServer(
                routes: UploadRoutes.routes(client: pool, settings: settings), gate: AppVersionGate(client: db.client, refreshInterval: .zero),
                verifier: AccessTokenTests.verifier)
            let server = try HTTPServer(configuration: .init(port: 0, threads: 4, bodyLimits: InboxRoutes.bodyLimits), replying: { api.reply($0) })
            defer { server.shutdown() }
            let store = UploadStore(client: pool, directory: directory, now: { clock.now() })
            try await body(Harness(api: APITestServer(server: server, db: db), directory: directory, clock: clock, store: store))
        }
    }

    /// A multipart/form-data body of `parts` (name, filename, bytes) and its Content-Type.
    static func multipart(_ parts: [(String, String?, [UInt8])], boundary: String = "wristler-boundary-7d1f") -> (Data, String) {
        var body = Data()
        for (name, filename, bytes) in parts {
            body.append(Data("--\(boundary)\r\n".utf8))
            let file = filename.map { "; filename=\"\($0)\"" } ?? ""
            body.append(Data("Content-Disposition: form-data; name=\"\(name)\"\(file)\r\nContent-Type: text/plain\r\n\r\n".utf8))
            body.append(Data(bytes))
            body.append(Data("\r\n".utf8))
        }
        body.append(Data("--\(boundary)--\r\n".utf8))
        return (body, "multipart/form-data; boundary=\(boundary)")
    }

    static func pointer(_ reply: APITestServer.Reply) -> String? { (reply.firstError["source"] as? [String: Any])?["pointer"] as? String }
    static func attributes(_ reply: APITestServer.Reply) -> [String: Any] { ((reply.json["data"] as? [String: Any])?["attributes"] as? [String: Any]) ?? [:] }

    @Test func anUploadIsTypedByItsBytesStoredOnceByContentAndServedToItsUploaderOnly() async throws {
        try await Self.withUploadsAPI { h in
            // Named .jpg and sent as text/plain: it is a PNG all the same.
            let first = try await h.upload("alice", Self.png, extra: ["X-Wristler-App": "ios/2.4.0"])
            #expect(first.status == 201, "\(String(decoding: first.body, as: UTF8.self))")
            let attributes = Self.attributes(first)
            let handle = try #require(attributes["handle"] as? String)
            #expect((first.json["data"] as? [String: Any])?["type"] as? String == "uploads")
            #expect((first.json["data"] as? [String: Any])?["id"] as? String == handle)
            #expect(attributes["contentType"] as? String == "image/png")
            #expect(attributes["size"] as? Int == Self.png.count)
            #expect(attributes["expiresAt"] is String)
            #expect(try await h.api.db.scalar("SELECT origin || ' ' || app_version || ' ' || source || ' ' || person_id FROM uploads", String.self) == "app:ios 2.4.0 file alice")

            let again = try await h.upload("alice", Self.png)
            #expect(again.status == 201)
            let second = try #require(Self.attributes(again)["handle"] as? String)
            #expect(second != handle, "every upload has a handle of its own")
            #expect(try h.files() == [SHA256Hex.of(Self.png)], "the same bytes are stored once, under their SHA-256")
            #expect(try await h.api.db.scalar("SELECT origin FROM uploads WHERE handle = '\(second)'", String.self) == "api")

            let video = try await h.upload("alice", Self.mp4, filename: "clip.mov")
            #expect(video.status == 201)
            #expect(Self.attributes(video)["contentType"] as? String == "video/mp4")

            let served = try await h.api.send("GET", "/v1/uploads/\(handle)", headers: try h.headers("alice", extra: ["Accept": "image/*"]))
            #expect(served.status == 200)
            #expect([UInt8](served.body) == Self.png)
            #expect(served.header("Content-Type") == "image/png")
            #expect(served.header("Content-Length") == String(Self.png.count))
            #expect(served.header("Cache-Control") == "private")
            #expect(served.header("X-Content-Type-Options") == "nosniff")

            // Anybody else: 404, as for a handle that does not exist; never a 403.
            let other = try await h.api.send("GET", "/v1/uploads/\(handle)", headers: try h.headers("bob"))
            #expect(other.status == 404)
            #expect(other.firstError["code"] as? String == "not_found")
            for path in ["/v1/uploads/AAAAAAAAAAAAAAAAAAAAAAAA", "/v1/uploads/..%2F..%2Fetc%2Fpasswd", "/v1/uploads/..", "/v1/uploads/\(handle)%00",
                         "/v1/uploads/" + String(repeating: "a", count: 5000)] {
                let reply = try await h.api.send("GET", path, headers: try h.headers("alice"))
                #expect(reply.status == 404, "\(path): \(reply.status)")
            }
        }
    }

    @Test func scopesAndGuests() async throws {
        try await Self.withUploadsAPI { h in
            let (body, type) = Self.multipart([("file", "a.png", Self.png)])
            let guest = "Bearer " + (try AccessTokenTests.signer.mint(subject: "", scopes: Scope.guest + [.uploadsWrite, .messagesRead], guest: true))
            let asGuest = try await h.api.send("POST", "/v1/uploads", headers: ["Authorization": guest, "Content-Type": type], body: body)
            #expect(asGuest.status == 403 && asGuest.firstError["code"] as? String == "sign_in_required")
            let withoutScope = try await h.api.send("POST", "/v1/uploads", headers: try h.headers("alice", scopes: [.messagesRead, .messagesWrite], extra: ["Content-Type": type]), body: body)
            #expect(withoutScope.status == 403 && (withoutScope.firstError["meta"] as? [String: Any])?["scopes"] as? [String] == ["uploads:write"])
            let uploaded = try await h.upload("alice", Self.png)
            let handle = try #require(Self.attributes(uploaded)["handle"] as? String)
            let readWithout = try await h.api.send("GET", "/v1/uploads/\(handle)", headers: try h.headers("alice", scopes: [.uploadsWrite]))
            #expect(readWithout.status == 403 && (readWithout.firstError["meta"] as? [String: Any])?["scopes"] as? [String] == ["messages:read"])
            let guestRead = try await h.api.send("GET", "/v1/uploads/\(handle)", headers: ["Authorization": guest])
            #expect(guestRead.status == 403 && guestRead.firstError["code"] as? String == "sign_in_required")
            #expect(try await h.api.send("GET", "/v1/uploads/\(handle)").status == 401)
            let wrongType = try await h.api.send("POST", "/v1/uploads", headers: try h.headers("alice", extra: ["Content-Type": "image/png"]), body: Data(Self.png))
            #expect(wrongType.status == 415)
        }
    }

    /// Each bad form meets a 4xx naming the part (or the header), nothing is stored, and the
    /// server answers on.
    @Test func badFormsAreRefusedWithA4xxNamingThePartAndNothingIsStored() async throws {
        try await Self.withUploadsAPI { h in
            func post(_ body: Data, _ type: String) async throws -> APITestServer.Reply {
                try await h.api.send("POST", "/v1/uploads", headers: try h.headers("alice", extra: ["Content-Type": type]), body: body)
            }
            let text = Array("MZ\u{0}\u{0} not an image, with NUL bytes \u{0}\u{0}\u{0}".utf8)
            let svg = Array(#"<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>"#.utf8)
            let html = Array("<!doctype html><html><body>hi</body></html>".utf8)
            let cases: [(String, Data, String, Int, String?)] = [
                ("text with NUL bytes", Self.multipart([("file", "a.png", text)]).0, Self.multipart([]).1, 422, "/file"),
                ("SVG (script)", Self.multipart([("file", "a.svg", svg)]).0, Self.multipart([]).1, 422, "/file"),
                ("HTML named .png", Self.multipart([("file", "a.png", html)]).0, Self.multipart([]).1, 422, "/file"),
                ("two file parts", Self.multipart([("file", "a.png", Self.png), ("file", "b.png", Self.png)]).0, Self.multipart([]).1, 422, "/file"),
                ("no file part", Self.multipart([]).0, Self.multipart([]).1, 422, "/file"),
                ("another part", Self.multipart([("file", "a.png", Self.png), ("caption", nil, Array("hi".utf8))]).0, Self.multipart([]).1, 422, "/caption"),
                ("a file part without a filename", Self.multipart([("file", nil, Self.png)]).0, Self.multipart([]).1, 422, "/file"),
                ("an empty file", Self.multipart([("file", "a.png", [])]).0, Self.multipart([]).1, 422, "/file"),
                ("no boundary", Self.multipart([("file", "a.png", Self.png)]).0, "multipart/form-data", 400, nil),
                ("a boundary of 200 characters", Self.multipart([("file", "a.png", Self.png)], boundary: String(repeating: "b", count: 200)).0,
                 "multipart/form-data; boundary=" + String(repeating: "b", count: 200), 400, nil),
                ("another boundary than the body's", Self.multipart([("file", "a.png", Self.png)]).0, "multipart/form-data; boundary=other", 400, ""),
                ("an unclosed part", Data("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\n".utf8) + Data(Self.png), "multipart/form-data; boundary=b", 400, ""),
                ("headers without end", Data("--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\nX: ".utf8) + Data(repeating: 65, count: 20_000), "multipart/form-data; boundary=b", 400, ""),
                ("a NUL in a part's headers", Data("--b\r\nContent-Disposition: form-data; name=\"fi\u{0}le\"; filename=\"a\"\r\n\r\nx\r\n--b--\r\n".utf8), "multipart/form-data; boundary=b", 400, ""),
                ("not form-data", Data("--b\r\nContent-Disposition: attachment; filename=\"a\"\r\n\r\nx\r\n--b--\r\n".utf8), "multipart/form-data; boundary=b", 400, ""),
                ("an empty body", Data(), "multipart/form-data; boundary=b", 400, ""),
                ("many parts", Self.multipart((0..<100).map { _ in ("file", "a.png", Self.png) }).0, Self.multipart([]).1, 400, ""),
            ]
            for (label, body, type, status, pointer) in cases {
                let reply = try await post(body, type)
                #expect(reply.status == status, "\(label): \(reply.status) \(String(decoding: reply.body, as: UTF8.self))")
                if let pointer { #expect(Self.pointer(reply) == pointer, "\(label): \(String(decoding: reply.body, as: UTF8.self))") }
                else { #expect((reply.firstError["source"] as? [String: Any])?["header"] as? String == "Content-Type", "\(label)") }
            }
            let notImage = try await post(Self.multipart([("file", "a.png", text)]).0, Self.multipart([]).1)
            #expect(notImage.firstError["code"] as? String == "unsupported_file_type")
            #expect(try await h.api.db.scalar("SELECT count(*)::int FROM uploads", Int.self) == 0)
            #expect(try h.files().isEmpty)
            #expect(try await h.upload("alice", Self.png).status == 201, "the server answers on")
        }
    }

    @Test func aFileOverTenMegabytesIsA413WhetherTheBodyOrThePartIsTooLarge() async throws {
        try await Self.withUploadsAPI { h in
            // A part just over the file limit inside a body the server takes: the route refuses it.
            var large = Self.mp4
            large += [UInt8](repeating: 0, count: UploadLimits.maximumFileBytes + 1 - large.count)
            let overPart = try await h.upload("alice", large)
            #expect(overPart.status == 413, "\(String(decoding: overPart.body.prefix(300), as: UTF8.self))")
            #expect(Self.pointer(overPart) == "/file")
            // A body over the upload route's limit: the server refuses it before any route. A client
            // that waits for the answer (`Expect: 100-continue`) gets it on the head alone
            // (Content-Length); one that sends its body first gets it once the body is in, read and
            // dropped (before 2026-12-02 the connection was closed under its send, and it failed with
            // "Send failure: Broken pipe" about once in three runs).
            let over = large + [UInt8](repeating: 0, count: 100_000)
            for extra in [["Expect": "100-continue"], [:], [:], [:]] {
                let overBody = try await h.upload("alice", over, extra: extra)
                #expect(overBody.status == 413, "\(extra)")
                #expect(overBody.firstError["code"] as? String == "body_too_large")
            }
            // Exactly the limit is taken.
            var exact = Self.mp4
            exact += [UInt8](repeating: 0, count: UploadLimits.maximumFileBytes - exact.count)
            let taken = try await h.upload("alice", exact)
            #expect(taken.status == 201)
            #expect(Self.attributes(taken)["size"] as? Int == UploadLimits.maximumFileBytes)
        }
    }

    /// A file is sent from its descriptor as each client reads it: 1,000 clients that asked for a
    /// 10 MB file and stopped reading after its first 64 KiB grow the process by less than 128 MiB
    /// (a copy each, as before 2026-12-05, would be 10 GB); what each got is the file's start.
    @Test func aThousandSlowReadersOfATenMegabyteFileHoldNoCopyOfIt() async throws {
        try await Self.withUploadsAPI { h in
            // A video, which is kept as it is sent (a photo is written again, PhotoCleaner).
            var large = Self.mp4
            large += (0..<(UploadLimits.maximumFileBytes - large.count)).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) }
            let handle = try #require(Self.attributes(try await h.upload("alice", large))["handle"] as? String)
            let authorization = try #require(try h.headers("alice")["Authorization"])
            let request = Array("GET /v1/uploads/\(handle) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: \(authorization)\r\nAccept: */*\r\n\r\n".utf8)
            let warm = try await h.api.send("GET", "/v1/uploads/\(handle)", headers: try h.headers("alice"))
            // Compared as digests: a failed comparison of 10 MB arrays would be diffed for ever.
            #expect(warm.status == 200 && SHA256Hex.of([UInt8](warm.body)) == SHA256Hex.of(large))
            let before = Self.residentBytes()

            // 1,000 connections from 16 loopback addresses (the server takes 64 from one), each
            // reading the head and 64 KiB of the body, then nothing.
            var sockets: [Int32] = []
            defer { for socket in sockets { close(socket) } }
            var firstBytes: [[UInt8]] = []  // reader 0's
            for index in 0..<1_000 {
                // A small receive window, as a slow phone's: 1,000 readers' unread megabytes would
                // otherwise fill the kernel's TCP memory and stall the machine's other connections.
                let socket = try RawHTTPClient.connect(port: h.api.server.port, from: "127.0.0.\(10 + index / 63)", receiveBuffer: 65_536)
                sockets.append(socket)
                var time = timeval(tv_sec: 5, tv_usec: 0)
                setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &time, socklen_t(MemoryLayout<timeval>.size))
                let sent = request.withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                #expect(sent == request.count)
                var received: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 16_384)
                while received.count < 65_536 + 512 {
                    let count = buffer.withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
                    guard count > 0 else { break }
                    received += buffer[0..<count]
                }
                if index == 0 { firstBytes.append(received) }
                // The first that does not get its start stops the test, rather than wait for each after it.
                try #require(
                    String(decoding: received.prefix(12), as: UTF8.self) == "HTTP/1.1 200" && received.count >= 65_536,
                    "reader \(index) got \(received.count) bytes: \(String(decoding: received.prefix(200), as: UTF8.self))")
            }
            let during = Self.residentBytes()
            let kernel = Self.kernelTCPBytes()
            let grown = during - before
            #expect(grown < 128 << 20, "1,000 slow readers grew the process by \(grown >> 20) MiB")
            // And the kernel's socket buffers stay bounded (SO_SNDBUF on each connection): unbounded,
            // they grew to the machine's TCP limit (2.3 GB here) and stalled every connection on it.
            #expect(kernel < 768 << 20, "the machine's TCP buffers hold \(kernel >> 20) MiB")

            // What each reader got is the file's start (the warm-up above got the whole of it). A
            // reader that goes on to the end is not waited for here: under a busy suite the first
            // may sit past the server's idle timeout while the others connect.
            let received = firstBytes[0]
            let head = try #require(received.indices.first { received[$0...].starts(with: Array("\r\n\r\n".utf8)) })
            let body = Array(received[(head + 4)...])
            #expect(body.count >= 60_000 && body == Array(large.prefix(body.count)))
            print("1,000 slow readers of a 10 MB upload: resident \(before >> 20) MiB before, \(during >> 20) MiB while they wait; the machine's TCP buffers \(kernel >> 20) MiB")
        }
    }

    /// The memory of every TCP socket of the machine, in bytes (`/proc/net/sockstat`, in pages).
    static func kernelTCPBytes() -> Int {
        let text = (try? String(contentsOfFile: "/proc/net/sockstat", encoding: .utf8)) ?? ""
        let line = text.split(separator: "\n").first { $0.hasPrefix("TCP:") } ?? ""
        let fields = line.split(separator: " ")
        guard let index = fields.firstIndex(of: "mem"), index + 1 < fields.count, let pages = Int(fields[index + 1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// This process's resident memory, in bytes (`/proc/self/statm`).
    static func residentBytes() -> Int {
        let fields = ((try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8)) ?? "").split(separator: " ")
        return (fields.count > 1 ? Int(fields[1]) ?? 0 : 0) * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    @Test func aSourceIsFetchedWithinItsBoundsAndTypedByItsBytes() async throws {
        let source = try await LocalSource.start()
        defer { source.stop() }
        try await Self.withUploadsAPI(fetchLimits: .init(totalTime: .seconds(3), connectTime: .seconds(2), redirects: 3)) { h in
            let fetched = try await h.fromSource("alice", source.url("/photo.png"))
            #expect(fetched.status == 201, "\(String(decoding: fetched.body, as: UTF8.self))")
            #expect(Self.attributes(fetched)["contentType"] as? String == "image/png", "the bytes decide, not the source's text/plain")
            let handle = try #require(Self.attributes(fetched)["handle"] as? String)
            #expect([UInt8](try await h.api.send("GET", "/v1/uploads/\(handle)", headers: try h.headers("alice")).body) == Self.png)
            #expect(try await h.api.db.scalar("SELECT source FROM uploads", String.self) == "url")
            let redirected = try await h.fromSource("alice", source.url("/to?url=" + Documents_escape(source.url("/photo.png"))))
            #expect(redirected.status == 201, "a redirect within the limit is followed")

            let cases: [(String, String, String)] = [
                ("/page.html", "unsupported_file_type", "HTML sent as image/png"),
                ("/empty", "unsupported_file_type", "nothing"),
                ("/missing", "source_unavailable", "a 404"),
                ("/huge", "file_too_large", "a Content-Length of 1 GB"),
                ("/endless", "file_too_large", "a body without end"),
                ("/slow", "source_unavailable", "a byte a second"),
                ("/loop", "source_unavailable", "redirects without end"),
                ("/to?url=ftp%3A%2F%2F127.0.0.1%2Fx", "invalid_field", "a redirect to ftp"),
                ("/to?url=file%3A%2F%2F%2Fetc%2Fpasswd", "invalid_field", "a redirect to a file"),
            ]
            for (path, code, label) in cases {
                let started = ContinuousClock.now
                let reply = try await h.fromSource("alice", source.url(path))
                #expect(reply.status == 422, "\(label): \(reply.status) \(String(decoding: reply.body, as: UTF8.self))")
                #expect(reply.firstError["code"] as? String == code, "\(label): \(String(decoding: reply.body, as: UTF8.self))")
                #expect(Self.pointer(reply) == "/data/attributes/sourceUrl", "\(label)")
                #expect(ContinuousClock.now - started < .seconds(6), "\(label) is bounded in time")
            }
            for url in ["file:///etc/passwd", "ftp://example.com/a.png", "gopher://127.0.0.1/", "http://", "not a url", "http:/x"] {
                let reply = try await h.fromSource("alice", url)
                #expect(reply.status == 422 && Self.pointer(reply) == "/data/attributes/sourceUrl", "\(url): \(reply.status)")
            }
            let missing = try await h.api.send(
                "POST", "/v1/uploads", headers: try h.headers("alice", extra: ["Content-Type": JSONAPI.mediaType]),
                body: Data(#"{"data":{"type":"uploads","attributes":{}}}"#.utf8))
            #expect(missing.status == 422 && Self.pointer(missing) == "/data/attributes/sourceUrl")
            let wrongType = try await h.api.send(
                "POST", "/v1/uploads", headers: try h.headers("alice", extra: ["Content-Type": JSONAPI.mediaType]),
                body: Data(#"{"data":{"type":"devices","attributes":{"sourceUrl":"http://x/"}}}"#.utf8))
            #expect(wrongType.status == 409)
            #expect(try await h.api.db.scalar("SELECT count(*)::int FROM uploads", Int.self) == 2)
        }
    }

    /// Slow sources cannot hold every blocking thread of the server: past the slots for fetching,
    /// a source upload is a 503 at once, and a slot is free again when its fetch ends.
    @Test func slowSourcesTakeAtMostTheirSlots() async throws {
        let source = try await LocalSource.start()
        defer { source.stop() }
        try await Self.withUploadsAPI(fetchLimits: .init(totalTime: .seconds(5)), concurrentFetches: 1) { h in
            let slow = Task { try await h.fromSource("alice", source.url("/slow")) }
            // Until the slow fetch has reached the source (and so holds the slot).
            let deadline = ContinuousClock.now + .seconds(10)
            while try await source.seen("/slow") == 0, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
            let started = ContinuousClock.now
            let busy = try await h.fromSource("alice", source.url("/photo.png"))
            #expect(busy.status == 503, "\(String(decoding: busy.body, as: UTF8.self))")
            #expect(busy.firstError["code"] as? String == "uploads_busy")
            #expect(busy.header("Retry-After") == "1")
            #expect(ContinuousClock.now - started < .seconds(3), "refused at once, not after the slow fetch")
            #expect(try await h.upload("alice", Self.png).status == 201, "a multipart upload needs no slot")
            #expect(try await slow.value.firstError["code"] as? String == "source_unavailable")
            #expect(try await h.fromSource("alice", source.url("/photo.png")).status == 201, "the slot is free again")
        }
    }

    /// Without INBOX_UPLOADS_ALLOW_PRIVATE_SOURCES, a loopback source is refused, by address or by
    /// a name that resolves to it; and a redirect is checked on the address it connects to.
    @Test func withoutTheSettingALoopbackSourceIsA422NamingSourceUrl() async throws {
        let source = try await LocalSource.start()
        defer { source.stop() }
        try await Self.withUploadsAPI(allowPrivateSources: false) { h in
            for url in [source.url("/photo.png"), "http://localhost:\(source.port)/photo.png", "http://[::1]:\(source.port)/photo.png",
                        "http://0.0.0.0:\(source.port)/photo.png", "http://127.1:\(source.port)/photo.png"] {
                let reply = try await h.fromSource("alice", url)
                #expect(reply.status == 422, "\(url): \(reply.status)")
                #expect(Self.pointer(reply) == "/data/attributes/sourceUrl", "\(url)")
                #expect(["source_not_allowed", "source_unavailable"].contains(reply.firstError["code"] as? String ?? ""), "\(url): \(reply.firstError)")
            }
            let direct = try await h.fromSource("alice", source.url("/photo.png"))
            #expect(direct.firstError["code"] as? String == "source_not_allowed")
            #expect(try await h.api.db.scalar("SELECT count(*)::int FROM uploads", Int.self) == 0)
        }
        // The first hop allowed (as a public address would be), the redirect's is not: it is
        // refused as it connects, whatever the first hop said.
        let fetcher = SourceFetcher(limits: .init(totalTime: .seconds(3)), allowedAddresses: ["127.0.0.1"])
        let direct = source.url("/photo.png")
        #expect(try await BlockingThread.run { fetcher.fetch(direct) } == .success(Self.sentPNG))
        let hop = source.url("/to?url=" + Documents_escape("http://127.0.0.2:\(source.port)/photo.png"))
        #expect(try await BlockingThread.run { fetcher.fetch(hop) } == .failure(.addressNotAllowed("127.0.0.2")))
    }

    /// What `inbox serve` checks before it starts, and libmagic's reading of a few files.
    @Test func libmagicReadsFilesByTheirBytes() {
        #expect(FileType.problem == nil)
        #expect(FileType.allowedType(of: Self.png) == "image/png")
        #expect(FileType.allowedType(of: Self.mp4) == "video/mp4")
        #expect(FileType.allowedType(of: [0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, 0x4A, 0x46, 0x49, 0x46, 0x00, 0x01]) == "image/jpeg")
        #expect(FileType.allowedType(of: Array("<svg xmlns=\"http://www.w3.org/2000/svg\"></svg>".utf8)) == nil)
        #expect(FileType.sniff(Array("just words".utf8)) == "text/plain")
    }

    @Test func theAddressPolicyRefusesEveryInnerRange() {
        let refused = [
            "127.0.0.1", "127.255.255.254", "10.1.2.3", "172.16.0.1", "172.31.255.255", "192.168.1.1", "169.254.169.254", "0.0.0.0", "0.1.2.3",
            "100.64.0.1", "100.127.255.255", "224.0.0.1", "239.1.1.1", "255.255.255.255", "240.0.0.1", "::1", "::", "fc00::1", "fd12:3456::1",
            "fe80::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::127.0.0.1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::1", "fec0::1",
            "not an address",
        ]
        for address in refused { #expect(!AddressPolicy.isPublic(address), "\(address)") }
        let allowed = ["8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.1", "172.15.255.255", "172.32.0.1", "192.169.0.1", "2001:4860:4860::8888",
                       "::ffff:8.8.8.8", "2a00:1450::1"]
        for address in allowed { #expect(AddressPolicy.isPublic(address), "\(address)") }
    }

    /// The functions the conversation routes use, and expiry with a clock the test moves.
    @Test func handlesNobodyAttachesExpireAfterADayAndTheirFileGoesWithTheLastRecord() async throws {
        try await Self.withUploadsAPI { h in
            func handle(_ reply: APITestServer.Reply) throws -> String { try #require(Self.attributes(reply)["handle"] as? String) }
            let kept = try handle(try await h.upload("alice", Self.png))
            let dropped = try handle(try await h.upload("alice", Self.png))
            _ = try handle(try await h.upload("alice", Self.mp4))
            let bobs = try handle(try await h.upload("bob", Self.mp4))
            #expect(try h.files().count == 2)

            try h.api.db.client.transactionBlocking { (connection: PostgresConnection) throws -> Void in
                let invalid = try h.store.invalidHandles(
                    [kept, bobs, "AAAAAAAAAAAAAAAAAAAAAAAA", "../../etc/passwd", kept], person: "alice", on: connection)
                #expect(invalid == [bobs, "AAAAAAAAAAAAAAAAAAAAAAAA", "../../etc/passwd"], "unknown, malformed and somebody else's; each once")
                #expect(try h.store.markAttached([kept, bobs], person: "alice", conversationId: "c1", on: connection) == [bobs])
                #expect(try h.store.markAttached([kept], person: "alice", conversationId: "c2", messageId: "m9", on: connection).isEmpty, "a photo sent again")
                #expect(try h.store.invalidHandles([kept, dropped], person: "alice", on: connection).isEmpty)
            }
            #expect(try await h.api.db.scalar("SELECT string_agg(conversation_id, ',' ORDER BY conversation_id) FROM upload_attachments", String.self) == "c1,c2")

            h.clock.advance(23 * 3600)
            #expect(try h.store.sweep() == 0, "not yet a day old")
            h.clock.advance(2 * 3600)
            // Expired: gone for reading and attaching before any sweep.
            #expect(try await h.api.send("GET", "/v1/uploads/\(dropped)", headers: try h.headers("alice")).status == 404)
            try h.api.db.client.withConnectionBlocking { (connection: PostgresConnection) throws -> Void in
                #expect(try h.store.invalidHandles([kept, dropped], person: "alice", on: connection) == [dropped])
                #expect(try h.store.markAttached([dropped], person: "alice", conversationId: "c1", on: connection) == [dropped])
                #expect(throws: UploadStore.AttachFailure.self) {
                    try h.store.attach([kept, dropped], person: "alice", conversationId: "c1", messageId: "m2", on: connection)
                }
            }
            #expect(try await h.api.send("GET", "/v1/uploads/\(kept)", headers: try h.headers("alice")).status == 200, "attached: never expires")

            #expect(try h.store.sweep() == 3, "dropped, alone and bob's")
            #expect(try await h.api.db.scalar("SELECT string_agg(handle, ',') FROM uploads", String.self) == kept)
            #expect(try h.files() == [SHA256Hex.of(Self.png)], "the PNG's file stays for the attached record; the MP4's is gone")
            #expect(try h.store.sweep() == 0)

            // A temporary file left by a process that stopped mid-write goes once it is an hour old.
            let old = h.directory.appendingPathComponent(".incoming-old")
            let fresh = h.directory.appendingPathComponent(".incoming-fresh")
            #expect(FileManager.default.createFile(atPath: old.path, contents: Data([1, 2, 3])))
            #expect(FileManager.default.createFile(atPath: fresh.path, contents: Data([1, 2, 3])))
            try FileManager.default.setAttributes([.modificationDate: Date().addingTimeInterval(-7200)], ofItemAtPath: old.path)
            try h.store.sweep()
            #expect(!FileManager.default.fileExists(atPath: old.path))
            #expect(FileManager.default.fileExists(atPath: fresh.path))
        }
    }

    /// The default `UploadAccess`: through the threads read model, the buyer and the people who
    /// work at the conversation's shop may read a file attached to one of its messages; whether the
    /// conversation route recorded the attachment (looked up by index) or not (every message scanned).
    @Test func peopleWhoMaySeeTheMessageMayReadItsFileAndNobodyElse() async throws {
        try await Self.withUploadsAPI { h in
            func upload(_ bytes: [UInt8]) async throws -> String {
                try #require(Self.attributes(try await h.upload("buyer-1", bytes))["handle"] as? String)
            }
            let recorded = try await upload(Self.png)
            let unrecorded = try await upload(Self.mp4)
            let onNoMessage = try await upload(Self.png + [0])
            let unattached = try await upload(Self.mp4 + [0])
            try h.api.db.client.transactionBlocking { (connection: PostgresConnection) throws -> Void in
                try h.store.attach([recorded, onNoMessage], person: "buyer-1", conversationId: "conv-1", messageId: "m1", on: connection)
            }
            try await h.api.db.append(
                ShopMemberAdded(shopId: "shop-1", personId: "seller-1"), ShopMemberAdded(shopId: "shop-1", personId: "seller-2"),
                ShopMemberAdded(shopId: "shop-2", personId: "seller-3"),
                ConversationStarted(conversationId: "conv-1", buyerId: "buyer-1", shopId: "shop-1", watchId: "w1"),
                ConversationStarted(conversationId: "conv-2", buyerId: "buyer-1", shopId: "shop-2", watchId: "w2"),
                MessageSent(conversationId: "conv-1", messageId: "m1", authorSide: .buyer, authorId: "buyer-1", body: "Look", attachmentHandles: [recorded]),
                MessageSent(conversationId: "conv-2", messageId: "m2", authorSide: .buyer, authorId: "buyer-1", body: "And this", attachmentHandles: [unrecorded]))
            try await h.api.db.withProjectors([ThreadsProjection(), PeopleProjection()]) {
                try await h.api.db.waitUntilProjected([ThreadsProjection(), PeopleProjection()])
            }
            func status(_ handle: String, _ person: String) async throws -> Int {
                let reply = try await h.api.send("GET", "/v1/uploads/\(handle)", headers: try h.headers(person))
                if reply.status == 200 { #expect(reply.body.count > 0) }
                return reply.status
            }
            let expected: [(String, String, Int)] = [
                (recorded, "buyer-1", 200), (recorded, "seller-1", 200), (recorded, "seller-2", 200), (recorded, "seller-3", 404), (recorded, "stranger", 404),
                (unrecorded, "seller-3", 200), (unrecorded, "seller-1", 404), (unrecorded, "stranger", 404),
                (onNoMessage, "seller-1", 404), (unattached, "seller-1", 404), (unattached, "buyer-1", 200),
            ]
            for (handle, person, code) in expected {
                #expect(try await status(handle, person) == code, "\(handle == recorded ? "recorded" : handle == unrecorded ? "unrecorded" : handle) for \(person)")
            }
            let access = ThreadsUploadAccess(client: h.api.db.client)
            #expect(try access.mayRead(handle: recorded, person: "seller-2"))
            #expect(try !access.mayRead(handle: "../../etc", person: "seller-2"))
        }
    }
}

/// Percent-encodes a URL for a query value.
func Documents_escape(_ text: String) -> String {
    text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
}

enum SHA256Hex {
    static func of(_ bytes: [UInt8]) -> String { SHA256.hexDigest(bytes) }
}

extension Data {
    init(hexString: String) {
        var bytes: [UInt8] = []
        var index = hexString.startIndex
        while index < hexString.endIndex {
            let next = hexString.index(index, offsetBy: 2)
            bytes.append(UInt8(hexString[index..<next], radix: 16)!)
            index = next
        }
        self.init(bytes)
    }
}

struct SourceDidNotStart: Error {}

/// Tests/UploadSource/upload_source.py on a free port of 127.0.0.1, until `stop` (or the test
/// runner's end).
struct LocalSource {
    let process: Process
    let port: Int

    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    /// How many requests for `path` the source has begun to answer.
    func seen(_ path: String) async throws -> Int {
        let (data, _) = try await URLSession.shared.data(from: URL(string: url("/seen?path=" + Documents_escape(path)))!)
        return Int(String(decoding: data, as: UTF8.self)) ?? 0
    }

    static func start() async throws -> LocalSource {
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("UploadSource/upload_source.py")
        let ready = FileManager.default.temporaryDirectory.appendingPathComponent("upload-source-\(UUID().uuidString)")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [script.path, ready.path, String(ProcessInfo.processInfo.processIdentifier)]
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let deadline = ContinuousClock.now + .seconds(10)
        while !FileManager.default.fileExists(atPath: ready.path) {
            guard process.isRunning, ContinuousClock.now < deadline else {
                process.terminate()
                throw SourceDidNotStart()
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        let port = Int(try String(contentsOf: ready, encoding: .utf8)) ?? 0
        try? FileManager.default.removeItem(at: ready)
        return LocalSource(process: process, port: port)
    }

    /// SIGKILL, which no inherited mask blocks; then the exit is waited for (at once).
    func stop() {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}
