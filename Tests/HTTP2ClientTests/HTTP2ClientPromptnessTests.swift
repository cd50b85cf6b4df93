import Foundation
import HTTP2Client
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The client's bounds in time (a refused connection fails fast, shutdown is prompt, a silent
/// server times out): run on their own by `make test` (TIMED_SUITES), so that they time the client
/// rather than a two-core machine busy with every other suite.
// Serialized: freePort() releases a port that a parallel test's listener could take before the
// client connects (seen once in CI: a TLS error, 35, instead of a refused connection, 7).
@Suite(.serialized) struct HTTP2ClientPromptnessTests {
    @Test func aServerThatIsNotListeningFailsFastAndRetryable() async throws {
        let port = try freePort()
        let client = try HTTP2Client()
        defer { client.shutdown() }
        let started = ContinuousClock.now
        do {
            _ = try await client.send(HTTP2ClientTests.post("https://127.0.0.1:\(port)/", "x", timeout: .seconds(10)))
            Issue.record("a server that is not there answered")
        } catch let error as HTTP2ClientError {
            #expect(error.kind == .transport)
            #expect(error.curlCode == 7, "\(error)")  // CURLE_COULDNT_CONNECT
            #expect(error.isRetryable)
        }
        #expect(ContinuousClock.now - started < .seconds(2))
    }

    @Test func shutdownWithRequestsInFlightReturnsPromptlyAndFailsThem() async throws {
        let silent = try silentListener()
        defer { close(silent.socket) }
        let client = try HTTP2Client()
        let requests = (0..<50).map { HTTP2ClientTests.post("https://127.0.0.1:\(silent.port)/", "\($0)", timeout: .seconds(60)) }
        async let batch = client.send(requests)
        let single = Task { () -> Result<HTTP2Response, HTTP2ClientError> in
            do {
                return .success(try await client.send(HTTP2ClientTests.post("https://127.0.0.1:\(silent.port)/", "one", timeout: .seconds(60))))
            } catch let error as HTTP2ClientError {
                return .failure(error)
            } catch {
                return .failure(HTTP2ClientError(kind: .transport, message: "\(error)", isRetryable: false))
            }
        }
        try await Task.sleep(for: .milliseconds(300))  // into curl: connecting, waiting for TLS
        let started = ContinuousClock.now
        client.shutdown()
        let results = await batch
        let one = await single.value
        #expect(ContinuousClock.now - started < .seconds(1))
        #expect(results.count == 50)
        for result in results + [one] {
            guard case .failure(let error) = result else {
                Issue.record("answered though the server never spoke")
                continue
            }
            #expect(error.kind == .shutdown && error.isRetryable, "\(error)")
        }
        // Later requests fail at once; a second shutdown is harmless.
        await #expect(throws: HTTP2ClientError.self) { _ = try await client.send(HTTP2ClientTests.post("https://127.0.0.1:1/", "late")) }
        client.shutdown()
    }

    @Test func aServerThatNeverAnswersTimesOutAsRetryable() async throws {
        let silent = try silentListener()
        defer { close(silent.socket) }
        let client = try HTTP2Client()
        defer { client.shutdown() }
        let started = ContinuousClock.now
        do {
            _ = try await client.send(HTTP2ClientTests.post("https://127.0.0.1:\(silent.port)/", "x", timeout: .milliseconds(300)))
            Issue.record("answered")
        } catch let error as HTTP2ClientError {
            #expect(error.curlCode == 28, "\(error)")  // CURLE_OPERATION_TIMEDOUT
            #expect(error.isRetryable)
        }
        let elapsed = ContinuousClock.now - started
        #expect(elapsed >= .milliseconds(250) && elapsed < .seconds(2), "\(elapsed)")
    }
}
