import Foundation
import InboxTesting
import Testing

/// `inbox token`: development tokens for local use and tests.
@Suite struct TokenCommandTests {
    static func claims(of token: String) throws -> [String: Any] {
        let parts = token.split(separator: ".")
        try #require(parts.count == 3, "\(token)")
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        let data = try #require(Data(base64Encoded: base64))
        return try #require(JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test func aTokenForAPersonCarriesTheAppsScopesAndTheSameKeySignsTheNext() async throws {
        let directory = NSTemporaryDirectory() + "inbox-token-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ["INBOX_DATA_DIR": directory]
        let first = try await InboxCLI.run(["token", "--person", "p7"], environment: environment)
        #expect(first.status == 0, "stderr: \(first.stderr)")
        let claims = try Self.claims(of: first.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(claims["sub"] as? String == "p7")
        #expect((claims["scope"] as? String)?.split(separator: " ").contains("account:write") == true)
        #expect(claims["guest"] == nil)
        let exp = try #require(claims["exp"] as? Int)
        let iat = try #require(claims["iat"] as? Int)
        #expect(exp - iat == 3600)
        let key = try String(contentsOfFile: directory + "/dev-token-key.pem", encoding: .utf8)
        #expect(key.contains("PRIVATE KEY"))
        let attributes = try FileManager.default.attributesOfItem(atPath: directory + "/dev-token-key.pem")
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)

        let guest = try await InboxCLI.run(["token", "--guest", "--ttl", "60"], environment: environment)
        #expect(guest.status == 0, "stderr: \(guest.stderr)")
        let guestClaims = try Self.claims(of: guest.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(guestClaims["guest"] as? Bool == true)
        #expect(guestClaims["scope"] as? String == "catalogue:read content:read")
        #expect(try String(contentsOfFile: directory + "/dev-token-key.pem", encoding: .utf8) == key, "the key is made once")
    }

    @Test(arguments: [["token"], ["token", "--guest", "--person", "p1"], ["token", "--person"], ["token", "--person", "p1", "--ttl", "0"], ["token", "--admin"]])
    func aBadTokenRequestIsAUsageError(arguments: [String]) async throws {
        let result = try await InboxCLI.run(arguments, environment: ["INBOX_DATA_DIR": NSTemporaryDirectory() + "inbox-token-unused"])
        #expect(result.status == 2, "stderr: \(result.stderr)")
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.hasPrefix("inbox: "))
    }
}
