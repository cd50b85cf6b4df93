import Foundation
import HTTP2Client
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The client through real sockets: Debian's nghttpd over TLS with a CA made for the test.
@Suite struct HTTP2ClientTests {
    /// Certificates, an nghttpd, and a client that trusts the test CA; everything is stopped after `body`.
    static func withServer<T>(
        htdocs: String? = nil, maxConcurrentStreams: Int? = nil,
        configuration: (TestCertificates) -> HTTP2Client.Configuration = { .init(caFile: $0.caFile) },
        _ body: (NGHTTPServer, HTTP2Client) async throws -> T
    ) async throws -> T {
        let certificates = try TestCertificates.make()
        defer { certificates.remove() }
        let server = try NGHTTPServer.start(certificates: certificates, htdocs: htdocs, maxConcurrentStreams: maxConcurrentStreams)
        defer { server.stop() }
        let client = try HTTP2Client(configuration: configuration(certificates))
        defer { client.shutdown() }
        return try await body(server, client)
    }

    static func post(_ url: String, _ text: String, timeout: Duration = .seconds(20)) -> HTTP2Request {
        HTTP2Request(
            method: "POST", url: url, headers: [(name: "content-type", value: "application/json"), (name: "apns-priority", value: "10")],
            body: Array(text.utf8), timeout: timeout)
    }

    @Test func aPostIsAnsweredWithItsOwnBodyOverHTTP2() async throws {
        try await Self.withServer { server, client in
            let response = try await client.send(Self.post(server.url("/3/device/abc"), #"{"aps":{"alert":"hi"}}"#))
            #expect(response.status == 200)
            #expect(response.httpVersion == 2)
            #expect(String(decoding: response.body, as: UTF8.self) == #"{"aps":{"alert":"hi"}}"#)
            #expect(response.header("Content-Length") == "\(response.body.count)")
            #expect(response.headers.allSatisfy { $0.name == $0.name.lowercased() })
            #expect(response.header("server")?.contains("nghttpd") == true, "\(response.headers)")

            // A GET of a file nghttpd does not have is an answer (404), not an error.
            let missing = try await client.send(HTTP2Request(url: server.url("/nothing-here")))
            #expect(missing.status == 404)
        }
    }

    @Test func aThousandRequestsInOneBatchAllSucceedOverAtMostTwoConnections() async throws {
        try await Self.withServer { server, client in
            let requests = (0..<1000).map { Self.post(server.url("/3/device/\($0)"), "push \($0)") }
            let results = await client.send(requests)
            #expect(results.count == 1000)
            var failures: [String] = []
            for (index, result) in results.enumerated() {
                switch result {
                case .success(let response):
                    if response.status != 200 || response.httpVersion != 2 || response.body != Array("push \(index)".utf8) {
                        failures.append("\(index): \(response.status) HTTP/\(response.httpVersion) \(String(decoding: response.body, as: UTF8.self))")
                    }
                case .failure(let error):
                    failures.append("\(index): \(error)")
                }
            }
            #expect(failures.isEmpty, "\(failures.count) failed, first: \(failures.prefix(3))")
            #expect(client.connectionsOpened >= 1)
            #expect(client.connectionsOpened <= client.configuration.maxConnectionsPerHost, "opened \(client.connectionsOpened)")

            // Singles at the same time, each with its own continuation, on the same connections.
            let singles = try await withThrowingTaskGroup(of: Int.self) { group in
                for index in 0..<200 {
                    group.addTask { try await client.send(Self.post(server.url("/single"), "s\(index)")).status }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(singles.count == 200 && singles.allSatisfy { $0 == 200 })
            #expect(client.connectionsOpened <= client.configuration.maxConnectionsPerHost, "opened \(client.connectionsOpened)")
        }
    }

    @Test func aServerThatAllowsOneStreamAtATimeStillGetsEveryRequest() async throws {
        try await Self.withServer(maxConcurrentStreams: 1) { server, client in
            let results = await client.send((0..<100).map { Self.post(server.url("/one"), "one \($0)") })
            let answered = results.enumerated().filter { index, result in
                (try? result.get().body) == Array("one \(index)".utf8)
            }
            let errors = results.compactMap { result -> String? in
                if case .failure(let error) = result { return "\(error)" }
                return nil
            }
            #expect(answered.count == 100, "errors: \(errors.prefix(3))")
        }
    }

    @Test func aCertificateNotSignedByATrustedAuthorityFailsClearlyAndIsNotRetried() async throws {
        try await Self.withServer(configuration: { _ in .init() }) { server, client in
            do {
                let response = try await client.send(Self.post(server.url("/"), "x"))
                Issue.record("answered \(response.status) despite an untrusted certificate")
            } catch let error as HTTP2ClientError {
                #expect(error.kind == .transport)
                #expect(error.curlCode == 60, "\(error)")  // CURLE_PEER_FAILED_VERIFICATION
                #expect(!error.isRetryable)
                #expect(error.message.lowercased().contains("certificate"), "\(error.message)")
            }
        }
    }

    @Test func aResponseBiggerThanTheBoundFailsInsteadOfGrowing() async throws {
        let htdocs = FileManager.default.temporaryDirectory.appendingPathComponent("htdocs-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: htdocs, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: htdocs) }
        try Data(repeating: 0x61, count: 4 << 20).write(to: URL(fileURLWithPath: htdocs + "/big"))
        try Data(repeating: 0x62, count: 1000).write(to: URL(fileURLWithPath: htdocs + "/small"))

        try await Self.withServer(htdocs: htdocs, configuration: { .init(caFile: $0.caFile, maxResponseBytes: 64 << 10) }) {
            server, client in
            // Announced by its content-length.
            await #expect(throws: HTTP2ClientError.self) { _ = try await client.send(HTTP2Request(url: server.url("/big"))) }
            do {
                _ = try await client.send(HTTP2Request(url: server.url("/big")))
            } catch let error as HTTP2ClientError {
                #expect(error.kind == .responseTooLarge, "\(error)")
                #expect(!error.isRetryable)
            }
            // Echoed (the body arrives in pieces; the write callback stops it at the bound).
            do {
                _ = try await client.send(HTTP2Request(method: "POST", url: server.url("/echo"), body: Array(repeating: 0x63, count: 200 << 10)))
                Issue.record("a 200 KiB answer passed a 64 KiB bound")
            } catch let error as HTTP2ClientError {
                #expect(error.kind == .responseTooLarge, "\(error)")
            }
            // Within the bound, and the client still works after the cut transfers.
            let small = try await client.send(HTTP2Request(url: server.url("/small")))
            #expect(small.status == 200 && small.body.count == 1000)
        }
    }

    @Test func aHeaderWithALineBreakIsRefusedBeforeSending() async throws {
        let client = try HTTP2Client()
        defer { client.shutdown() }
        let request = HTTP2Request(url: "https://127.0.0.1:1/", headers: [(name: "apns-topic", value: "a\r\nx-evil: 1")])
        do {
            _ = try await client.send(request)
            Issue.record("sent")
        } catch let error as HTTP2ClientError {
            #expect(error.kind == .invalidRequest && !error.isRetryable, "\(error)")
        }
    }
}
