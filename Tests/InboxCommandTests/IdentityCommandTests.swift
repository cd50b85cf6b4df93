import Foundation
import HTTPTesting
import InboxTesting
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The identity role as processes: `inbox account` makes an account, `inbox identity` signs it in
/// on a server of its own, and `inbox run` serves the sign-in beside the API, whose verifier takes
/// the role's tokens with no setting.
@Suite struct IdentityCommandTests {
    static let cheapHashes = ["INBOX_PASSWORD_HASH_MEMORY_KIB": "1024", "INBOX_PASSWORD_HASH_ITERATIONS": "1"]

    static func signIn(_ url: String, scope: String) async throws -> (status: Int, body: [String: Any]) {
        var request = URLRequest(url: URL(string: url + "/oauth/token")!)
        request.httpMethod = "POST"
        request.setValue("application/x-www-form-urlencoded", forHTTPHeaderField: "Content-Type")
        request.setValue("ios/2.4.0", forHTTPHeaderField: "X-Wristler-App")
        let scopeField = scope.replacingOccurrences(of: " ", with: "+").replacingOccurrences(of: ":", with: "%3A")
        request.httpBody = Data(
            "grant_type=urn%3Awristler%3Anative-login&client_id=wristler-app&username=anna%40example.com&password=correct+horse+battery&scope=\(scopeField)".utf8)
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, (try? JSONSerialization.jsonObject(with: data) as? [String: Any]) ?? [:])
    }

    @Test func anOperatorMakesAnAccountAndInboxIdentitySignsItInAndStopsOnSIGTERM() async throws {
        try await withTestDatabase { db in
            let dataDirectory = NSTemporaryDirectory() + "inbox-identity-\(UUID().uuidString)"
            defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
            let environment = InboxCLI.databaseEnvironment(db.url, ["INBOX_HTTP_PORT": "0", "INBOX_DATA_DIR": dataDirectory].merging(Self.cheapHashes) { $1 })
            let made = try await InboxCLI.run(
                ["account", "create", "--email", "anna@example.com", "--given-name", "Anna", "--verified"], environment: environment,
                stdin: "correct horse battery\n")
            #expect(made.status == 0, "\(made.stderrHead)")
            #expect(made.stdout.contains("created account"))
            let shown = try await InboxCLI.run(["account", "show", "--email", "ANNA@example.com"], environment: environment)
            #expect(shown.stdout.contains("second factor: off") && shown.stdout.contains("(verified)"), "\(shown.stdout)")

            let server = try InboxCLI.start(["identity"], environment: environment)
            defer { server.cleanUp() }
            let line = try await server.waitForStdoutLine(timeout: .seconds(30)) { $0.hasPrefix("The identity role listens on ") }
            let url = try #require(line.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init))
            let (status, body) = try await Self.signIn(url, scope: "account:read")
            #expect(status == 200, "\(body)")
            #expect(body["refresh_token"] is String && body["access_token"] is String)
            let (keys, _) = try await URLSession.shared.data(from: URL(string: url + "/.well-known/jwks.json")!)
            #expect(String(decoding: keys, as: UTF8.self).contains("\"kty\":\"EC\""))
            #expect(try await db.scalar("SELECT count(*)::int FROM events WHERE type = 'signed_in'", Int.self) == 1)

            server.send(SIGTERM)
            let result = try await server.waitForExit(timeout: .seconds(30))
            #expect(result.exitedNormally && result.status == 0, "stderr: \(result.stderrHead)")
            #expect(result.stderr.contains("the identity role stopped"))
        }
    }

    /// `inbox run` serves the identity role's routes beside the API's, and its OpenAPI document
    /// describes all of them (kept for `scripts/check-answers.py`, the fullest document: with
    /// unsubscribe links configured too).
    @Test func inboxRunVerifiesTheTokensItsIdentityRoleSignsWithNoSetting() async throws {
        try await withTestDatabase { db in
            let dataDirectory = NSTemporaryDirectory() + "inbox-run-identity-\(UUID().uuidString)"
            defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
            let environment = InboxCLI.databaseEnvironment(
                db.url,
                ["INBOX_HTTP_PORT": "0", "INBOX_DATA_DIR": dataDirectory, "INBOX_UNSUBSCRIBE_KEYS": "1:dW5zdWJzY3JpYmUta2V5LW9mLXRoZS1ydW4tdGVzdCE"].merging(
                    Self.cheapHashes) { $1 })
            let made = try await InboxCLI.run(["account", "create", "--email", "anna@example.com"], environment: environment, stdin: "correct horse battery\n")
            #expect(made.status == 0, "\(made.stderrHead)")
            let server = try InboxCLI.start(["run"], environment: environment)
            defer { server.cleanUp() }
            let line = try await server.waitForStdoutLine(timeout: .seconds(60)) { $0.hasPrefix("The API listens on ") }
            let url = try #require(line.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init))
            let (document, _) = try await URLSession.shared.data(from: URL(string: url + "/openapi.json")!)
            let paths = try #require((try JSONSerialization.jsonObject(with: document) as? [String: Any])?["paths"] as? [String: Any])
            for path in ["/oauth/token", "/oauth/revoke", "/oauth/apple/return", "/.well-known/jwks.json", "/internal/v1/accounts", "/v1/me", "/mail/unsubscribe"] {
                #expect(paths[path] != nil, "\(path) is not in the document of inbox run")
            }
            AnswerRecorder.recordDocument(Array(document))
            let (status, body) = try await Self.signIn(url, scope: "account:read account:write")
            #expect(status == 200, "\(body)")
            let access = try #require(body["access_token"] as? String)
            var devices = URLRequest(url: URL(string: url + "/v1/me/devices")!)
            devices.setValue("Bearer \(access)", forHTTPHeaderField: "Authorization")
            let (answer, response) = try await URLSession.shared.data(for: devices)
            #expect((response as? HTTPURLResponse)?.statusCode == 200, "\(String(decoding: answer, as: UTF8.self))")
            server.send(SIGTERM)
            let result = try await server.waitForExit(timeout: .seconds(30))
            #expect(result.exitedNormally && result.status == 0, "stderr: \(result.stderrHead)")
        }
    }

    /// Two nodes with their own data folders and the same key-encryption key share one signing key
    /// through PostgreSQL: a token the first signs opens the second's API, both publish the same
    /// JWKS, and the table holds the key sealed. A node with another key-encryption key does not start.
    @Test func twoNodesWithOneSecretsKeySignAndVerifyEachOthersTokens() async throws {
        try await withTestDatabase { db in
            let base = NSTemporaryDirectory() + "inbox-two-nodes-\(UUID().uuidString)"
            defer { try? FileManager.default.removeItem(atPath: base) }
            try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
            let keyFile = base + "/secrets.key"
            try Data(Data((0..<32).map { _ in UInt8.random(in: 0...255) }).base64EncodedString().utf8).write(to: URL(fileURLWithPath: keyFile))
            func environment(_ node: String, key: String = keyFile) -> [String: String] {
                InboxCLI.databaseEnvironment(
                    db.url, ["INBOX_HTTP_PORT": "0", "INBOX_DATA_DIR": base + "/" + node, "INBOX_SECRETS_KEY_FILE": key].merging(Self.cheapHashes) { $1 })
            }
            let made = try await InboxCLI.run(["account", "create", "--email", "anna@example.com"], environment: environment("a"), stdin: "correct horse battery\n")
            #expect(made.status == 0, "\(made.stderrHead)")

            let first = try InboxCLI.start(["identity"], environment: environment("a"))
            defer { first.cleanUp() }
            let firstLine = try await first.waitForStdoutLine(timeout: .seconds(30)) { $0.hasPrefix("The identity role listens on ") }
            let firstURL = try #require(firstLine.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init))
            let second = try InboxCLI.start(["run"], environment: environment("b"))
            defer { second.cleanUp() }
            let secondLine = try await second.waitForStdoutLine(timeout: .seconds(60)) { $0.hasPrefix("The API listens on ") }
            let secondURL = try #require(secondLine.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init))

            let (status, body) = try await Self.signIn(firstURL, scope: "account:read account:write")
            #expect(status == 200, "\(body)")
            let access = try #require(body["access_token"] as? String)
            var devices = URLRequest(url: URL(string: secondURL + "/v1/me/devices")!)
            devices.setValue("Bearer \(access)", forHTTPHeaderField: "Authorization")
            let (answer, response) = try await URLSession.shared.data(for: devices)
            #expect((response as? HTTPURLResponse)?.statusCode == 200, "the second node refused the first's token: \(String(decoding: answer, as: UTF8.self))")
            let (firstKeys, _) = try await URLSession.shared.data(from: URL(string: firstURL + "/.well-known/jwks.json")!)
            let (secondKeys, _) = try await URLSession.shared.data(from: URL(string: secondURL + "/.well-known/jwks.json")!)
            #expect(firstKeys == secondKeys && !firstKeys.isEmpty)

            #expect(try await db.scalar("SELECT count(*)::int FROM identity_signing_keys", Int.self) == 1)
            #expect(try await db.scalar("SELECT bool_or(encode(sealed_private, 'escape') LIKE '%PRIVATE KEY%') FROM identity_signing_keys", Bool.self) == false)
            for node in ["a", "b"] {
                let folder = base + "/" + node + "/identity-keys"
                #expect(((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).isEmpty, "no key file in \(folder)")
            }

            let otherKey = base + "/other.key"
            try Data(String(repeating: "ab", count: 32).utf8).write(to: URL(fileURLWithPath: otherKey))
            let refused = try await InboxCLI.run(["identity"], environment: environment("c", key: otherKey))
            #expect(refused.status != 0)
            #expect(refused.stderr.contains("does not open"), "\(refused.stderrHead)")
        }
    }

    /// `inbox keys rotate` adds a key that signs after the overlap and retires the keys replaced
    /// more than an hour ago; `inbox keys` without the secrets key is a usage error.
    @Test func keysRotateAddsAKeyAheadAndRetiresTheReplacedOnes() async throws {
        try await withTestDatabase { db in
            let base = NSTemporaryDirectory() + "inbox-keys-\(UUID().uuidString)"
            defer { try? FileManager.default.removeItem(atPath: base) }
            try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
            let keyFile = base + "/secrets.key"
            try Data((0..<32).map { _ in UInt8.random(in: 0...255) }).write(to: URL(fileURLWithPath: keyFile))
            let environment = InboxCLI.databaseEnvironment(db.url, ["INBOX_DATA_DIR": base, "INBOX_SECRETS_KEY_FILE": keyFile])
            let without = try await InboxCLI.run(["keys", "list"], environment: InboxCLI.databaseEnvironment(db.url, ["INBOX_DATA_DIR": base]))
            #expect(without.status == 2 && without.stderr.contains("INBOX_SECRETS_KEY_FILE"), "\(without.stderrHead)")

            let first = try await InboxCLI.run(["keys", "rotate", "--overlap-seconds", "0"], environment: environment)
            #expect(first.status == 0, "\(first.stderrHead)")
            let firstKid = try #require(first.stdout.split(separator: " ").dropFirst().first.map { String($0.dropLast()) })
            let second = try await InboxCLI.run(["keys", "rotate"], environment: environment)
            let secondKid = try #require(second.stdout.split(separator: " ").dropFirst().first.map { String($0.dropLast()) })
            #expect(second.stdout.contains("\(firstKid)  signing"), "\(second.stdout)")
            #expect(second.stdout.contains("\(secondKid)  published, signs from"), "\(second.stdout)")
            #expect(!second.stdout.contains("retired"), "the first key still signs: \(second.stdout)")

            // Two hours on, the second has signed for more than a token's lifetime: the first goes.
            _ = try await db.scalar("WITH moved AS (UPDATE identity_signing_keys SET signs_from = signs_from - interval '3 hours' RETURNING 1) SELECT count(*)::int FROM moved", Int.self)
            let third = try await InboxCLI.run(["keys", "rotate"], environment: environment)
            #expect(third.stdout.contains("retired \(firstKid)"), "\(third.stdout)")
            #expect(third.stdout.contains("\(secondKid)  signing"), "\(third.stdout)")
            #expect(try await db.scalar("SELECT count(*)::int FROM identity_signing_keys WHERE retired_at IS NULL", Int.self) == 2)
        }
    }

    @Test(arguments: [
        ["INBOX_IDENTITY_CLIENTS": "no scopes here"], ["INBOX_PASSWORD_HASH_MEMORY_KIB": "8"], ["INBOX_SIGN_IN_ADDRESS_LIMIT": "ten"],
        ["INBOX_APPLE_KEYS_URL": "ftp://apple"],
    ])
    func aBadIdentitySettingIsRefusedNamingIt(setting: [String: String]) async throws {
        let result = try await InboxCLI.run(["identity"], environment: setting)
        #expect(result.status == 2, "stderr: \(result.stderr)")
        #expect(result.stderr.contains(setting.keys.first!))
    }

    @Test func anAccountsPasswordIsReadFromStandardInputNeverFromTheArguments() async throws {
        let result = try await InboxCLI.run(["account", "create", "--email", "anna@example.com"], stdin: "")
        #expect(result.status == 2)
        #expect(result.stderr.contains("standard input"), "\(result.stderr)")
    }
}
