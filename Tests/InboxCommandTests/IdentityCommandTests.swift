import Foundation
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

    @Test func inboxRunVerifiesTheTokensItsIdentityRoleSignsWithNoSetting() async throws {
        try await withTestDatabase { db in
            let dataDirectory = NSTemporaryDirectory() + "inbox-run-identity-\(UUID().uuidString)"
            defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
            let environment = InboxCLI.databaseEnvironment(db.url, ["INBOX_HTTP_PORT": "0", "INBOX_DATA_DIR": dataDirectory].merging(Self.cheapHashes) { $1 })
            let made = try await InboxCLI.run(["account", "create", "--email", "anna@example.com"], environment: environment, stdin: "correct horse battery\n")
            #expect(made.status == 0, "\(made.stderrHead)")
            let server = try InboxCLI.start(["run"], environment: environment)
            defer { server.cleanUp() }
            let line = try await server.waitForStdoutLine(timeout: .seconds(60)) { $0.hasPrefix("The API listens on ") }
            let url = try #require(line.split(separator: " ").first { $0.hasPrefix("http://") }.map(String.init))
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
