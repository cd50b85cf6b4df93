import Crypto
import Encodings
import Foundation
import InboxAPI
import InboxTesting
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `inbox serve` as a process: it says where it listens, answers, logs a line per request, and
/// stops gracefully on SIGTERM.
@Suite struct ServeCommandTests {
    @Test func serveAnswersLogsEachRequestAndStopsOnSIGTERM() async throws {
        try await withTestDatabase { db in
            let dataDirectory = NSTemporaryDirectory() + "inbox-serve-\(UUID().uuidString)"
            defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
            // The person limit comes from a file (NAME_FILE), as a mounted secret would.
            let limitFile = dataDirectory + "-limit"
            try Data("3/60\n".utf8).write(to: URL(fileURLWithPath: limitFile))
            defer { try? FileManager.default.removeItem(atPath: limitFile) }
            let environment = InboxCLI.databaseEnvironment(
                db.url, ["INBOX_HTTP_PORT": "0", "INBOX_OPS_PORT": "0", "INBOX_DATA_DIR": dataDirectory, "INBOX_API_PERSON_LIMIT_FILE": limitFile])
            let server = try InboxCLI.start(["serve"], environment: environment)
            defer { server.cleanUp() }
            func listening(_ prefix: String) async throws -> String {
                let line = try await server.waitForStdoutLine(timeout: .seconds(30)) { $0.hasPrefix(prefix) }
                return try #require(line.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init))
            }
            let url = try await listening("The API listens on ")

            // The operations listener answers the health routes, and only them.
            let operations = try await listening("The operations listener listens on ")
            #expect(operations != url)
            for (path, status) in [("/healthz", 200), ("/metrics", 200), ("/v1/me/notifications", 404)] {
                let (_, response) = try await URLSession.shared.data(from: URL(string: operations + path)!)
                #expect((response as? HTTPURLResponse)?.statusCode == status, "\(path) on the operations listener")
            }
            // The metrics: the process's own and the build's besides the tier's; with an operations
            // listener they are answered there only, not on the API's port.
            let (metricsBody, _) = try await URLSession.shared.data(from: URL(string: operations + "/metrics")!)
            let metricsText = String(decoding: metricsBody, as: UTF8.self)
            for name in [
                "process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ", "process_max_fds ", "process_start_time_seconds ",
                #"inbox_db_pool_connections{state="in_use"} "#, #"inbox_db_pool_connections{state="idle"} "#, "inbox_db_pool_max_connections ",
                "inbox_db_pool_waiting 0",
            ] {
                #expect(metricsText.contains("\n" + name), "\(name)in /metrics")
            }
            #expect(metricsText.range(of: #"inbox_build_info\{commit="[^"]+",version="0\.1\.0"\} 1"#, options: .regularExpression) != nil)
            let (_, apiMetrics) = try await URLSession.shared.data(from: URL(string: url + "/metrics")!)
            #expect((apiMetrics as? HTTPURLResponse)?.statusCode == 404, "/metrics only on the operations listener")

            var request = URLRequest(url: URL(string: url + "/healthz")!)
            request.setValue("cli-test-1", forHTTPHeaderField: "X-Request-Id")
            let (_, response) = try await URLSession.shared.data(for: request)
            #expect((response as? HTTPURLResponse)?.statusCode == 200)

            // A development token from `inbox token` (same data folder) opens the person's routes.
            let token = try await InboxCLI.run(["token", "--person", "p1"], environment: environment)
            var bell = URLRequest(url: URL(string: url + "/v1/me/notifications")!)
            bell.setValue("Bearer \(token.stdout.trimmingCharacters(in: .whitespacesAndNewlines))", forHTTPHeaderField: "Authorization")
            let (body, bellResponse) = try await URLSession.shared.data(for: bell)
            #expect((bellResponse as? HTTPURLResponse)?.statusCode == 200, "\(String(decoding: body, as: UTF8.self))")
            // INBOX_API_PERSON_LIMIT_FILE holds 3/60: three requests at once, then 429 until the bucket refills.
            var statuses: [Int] = []
            for _ in 0..<3 {
                let (_, again) = try await URLSession.shared.data(for: bell)
                statuses.append((again as? HTTPURLResponse)?.statusCode ?? 0)
            }
            #expect(statuses == [200, 200, 429])


            _ = try await server.waitForStderrLine(timeout: .seconds(10)) { $0.contains(#""requestId":"cli-test-1""#) }
            server.send(SIGTERM)
            let result = try await server.waitForExit(timeout: .seconds(30))
            #expect(result.exitedNormally && result.status == 0, "stderr: \(result.stderr)")
            let logLine = try #require(result.stderr.split(separator: "\n").first { $0.contains(#""requestId":"cli-test-1""#) })
            let object = try #require(JSONSerialization.jsonObject(with: Data(logLine.utf8)) as? [String: Any])
            #expect(object["message"] as? String == "request")
            #expect(object["route"] as? String == "/healthz")
            // Typed values: numbers as JSON numbers, so a collector can compare and sum them.
            #expect(object["status"] as? Int == 200 && !logLine.contains(#""status":"200""#))
            #expect(object["durationMs"] is Double || object["durationMs"] is Int, "\(logLine)")
            #expect(result.stderr.contains("the API stopped"))
        }
    }

    /// A token signed by the key the API trusts opens it only when it is meant for it (`aud`),
    /// comes from its issuer (`iss`, INBOX_PUBLIC_URL here) and names a client it knows, if any.
    @Test func aTokenForAnotherAudienceIssuerOrClientIsRefused() async throws {
        try await withTestDatabase { db in
            let dataDirectory = NSTemporaryDirectory() + "inbox-audience-\(UUID().uuidString)"
            defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
            let environment = InboxCLI.databaseEnvironment(
                db.url, ["INBOX_HTTP_PORT": "0", "INBOX_DATA_DIR": dataDirectory, "INBOX_PUBLIC_URL": "https://inbox.example"])
            let server = try InboxCLI.start(["serve"], environment: environment)
            defer { server.cleanUp() }
            let line = try await server.waitForStdoutLine(timeout: .seconds(30)) { $0.hasPrefix("The API listens on ") }
            let url = try #require(line.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init))
            func status(_ token: String) async throws -> (Int, String) {
                var request = URLRequest(url: URL(string: url + "/v1/me/notifications")!)
                request.setValue("Bearer \(token)", forHTTPHeaderField: "Authorization")
                let (body, response) = try await URLSession.shared.data(for: request)
                return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: body, as: UTF8.self))
            }
            // `inbox token` writes what the API expects.
            let made = try await InboxCLI.run(["token", "--person", "p1"], environment: environment)
            let good = made.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(try await status(good).0 == 200)
            // The same key, other claims.
            let header = try #require(Base64URL.decode(String(good.split(separator: ".")[0])))
            let kid = try #require((try JSONSerialization.jsonObject(with: Data(header)) as? [String: Any])?["kid"] as? String)
            let signer = TokenSigner(key: try ES256PrivateKey(pem: String(contentsOfFile: dataDirectory + "/dev-token-key.pem", encoding: .utf8)), kid: kid)
            let scopes: [Scope] = [.accountRead]
            let refused = [
                ("another audience", try signer.mint(subject: "p1", scopes: scopes, audience: "another-api", issuer: "https://inbox.example")),
                ("no audience", try signer.mint(subject: "p1", scopes: scopes, audience: nil, issuer: "https://inbox.example")),
                ("another issuer", try signer.mint(subject: "p1", scopes: scopes, issuer: "https://elsewhere.example")),
                ("no issuer", try signer.mint(subject: "p1", scopes: scopes)),
                ("another client", try signer.mint(subject: "p1", scopes: scopes, issuer: "https://inbox.example", clientId: "not-a-client")),
            ]
            for (what, token) in refused {
                let (code, body) = try await status(token)
                #expect(code == 401 && body.contains("invalid_token"), "\(what): \(code) \(body)")
            }
            let client = try signer.mint(subject: "p1", scopes: scopes, issuer: "https://inbox.example", clientId: "wristler-app")
            #expect(try await status(client).0 == 200, "the app's own client")
        }
    }

    @Test(arguments: [["INBOX_HTTP_PORT": "http"], ["INBOX_HTTP_HOST": "localhost"], ["INBOX_HTTP_THREADS": "0"], ["INBOX_HTTP_MAX_BODY_BYTES": "10"],
        ["INBOX_OPS_PORT": "ops"], ["INBOX_HTTP_CONNECTIONS_PER_ADDRESS": "-1"], ["INBOX_HTTP_REQUEST_DEADLINE_SECONDS": "0"],
        ["INBOX_API_PERSON_LIMIT": "100"], ["INBOX_API_GUEST_LIMIT": "0/10"], ["INBOX_UPLOADS_S3_URL": "ftp://store/bucket"],
        ["INBOX_UPLOADS_S3_URL": "http://store/bucket/deeper"], ["INBOX_UPLOADS_S3_URL": "http://store/bucket"],
    ])
    func aBadHTTPSettingIsRefusedNamingIt(setting: [String: String]) async throws {
        let result = try await InboxCLI.run(["serve"], environment: setting)
        #expect(result.status == 2, "stderr: \(result.stderr)")
        #expect(result.stderr.contains(setting.keys.first!))
    }
}
