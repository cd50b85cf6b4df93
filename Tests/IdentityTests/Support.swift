import Crypto
import EventLog
import Foundation
import HTTPServer
import HTTPTesting
import Identity
import InboxAPI
import InboxDomain
import InboxTesting
import Lifecycle
import PasswordHashing
import PostgresClient
import Threads

/// A clock the tests move: the identity role's `now`, for expiries, TOTP steps and the rate
/// limits' refills. It runs with the wall clock until `stop()`; then only `advance` moves it.
final class TestNow: Sendable {
    private struct State {
        var offset: TimeInterval = 0
        var stopped: Date?
    }

    private let state = Locked(State())

    func now() -> Date {
        state.withLock { state in (state.stopped ?? Date()).addingTimeInterval(state.offset) }
    }

    func advance(_ seconds: TimeInterval) { state.withLock { $0.offset += seconds } }

    /// From now on the clock stands still between `advance`s: a test's own slowness refills nothing.
    func stop() {
        state.withLock { state in state.stopped = state.stopped ?? Date() }
    }
}

/// The identity role on a real socket in front of a test database, as `inbox identity` serves it
/// (plus, for end-to-end tests, the API's routes verifying its tokens), with a clock the test moves.
struct IdentityHarness: Sendable {
    let db: TestDatabase
    let role: IdentityRole
    let server: HTTPServer
    let clock: TestNow
    let log: RecordingLogHandler
    let providers: ProviderServer?

    static let client = "wristler-app"
    static let website = "website-secret-0123456789"
    /// Cheap hashes: the tests are about outcomes, not cost (the timing test sets its own).
    static let testCost = Argon2Cost(memoryKiB: 1024, iterations: 1)

    static func configuration() -> IdentityConfiguration {
        var configuration = IdentityConfiguration()
        configuration.passwordCost = testCost
        configuration.hashConcurrency = 4
        configuration.clients = OAuthClients([
            OAuthClient(id: client, scopes: Set(Scope.app)),
            OAuthClient(id: "seller-tools", scopes: [Scope("watches:read"), Scope("watches:write"), .catalogueRead]),
        ])
        return configuration
    }

    /// Runs `body` with a fresh database and identity role; `providers`: local Apple and Google.
    static func with(
        providers withProviders: Bool = false, configure: (inout IdentityConfiguration) -> Void = { _ in },
        extraRoutes: @Sendable (PostgresClient) -> [Route] = { _ in [] },
        socialRoutes: @Sendable (PostgresClient, SocialTokenVerifier?) -> [Route] = { _, _ in [] }, _ body: (IdentityHarness) async throws -> Void
    ) async throws {
        try await withTestDatabase { db in
            let providers = withProviders ? try ProviderServer() : nil
            defer { providers?.stop() }
            var configuration = Self.configuration()
            if let providers {
                configuration.apple = .apple(audiences: [ProviderServer.appleBundle, ProviderServer.appleServices], keysURL: providers.url("/apple/keys"))
                configuration.google = .google(audiences: [ProviderServer.googleClient], keysURL: providers.url("/google/keys"))
                configuration.appleReturnURL = "https://wristler.eu/app/apple-sign-in"
                configuration.appleCodeExchange = AppleCodeExchange(
                    tokenURL: providers.url("/apple/token"), revokeURL: providers.url("/apple/revoke"), teamId: ProviderServer.teamId, keyId: ProviderServer.appleKeyId,
                    keyPEM: providers.appleClientKey.pem, redirectURI: "https://api.wristler.test/oauth/apple/return")
            }
            configure(&configuration)
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("identity-keys-\(UUID().uuidString.prefix(8))").path
            defer { try? FileManager.default.removeItem(atPath: folder) }
            let clock = TestNow()
            let recording = RecordingLogHandler()
            let log = Logger(label: "identity-test", handler: recording)
            let pool = try InboxRoutes.requestPool(connection: db.configuration, size: 8)
            defer { pool.close() }
            let gate = AppVersionGate(client: pool, refreshInterval: .zero)
            let role = try IdentityRole.make(
                configuration: configuration, keysDirectory: folder, signingKid: nil, client: pool, gate: gate,
                validator: EventValidator(registry: InboxCatalogue.registry), log: log, now: { clock.now() })
            // Apple's and Google's keys as an API node reads them (the local providers' when set).
            let providerSettings = [configuration.apple, configuration.google].compactMap { $0 }
            let social = providerSettings.isEmpty ? nil : try SocialTokenVerifier(providers: providerSettings, caFile: configuration.caFile)
            let api = APIServer(
                routes: role.routes + extraRoutes(pool) + socialRoutes(pool, social), gate: gate, verifier: TokenVerifier(keys: role.keys.tokenKeys),
                services: ServiceCredentials(secrets: ["website": website]))
            let server = try HTTPServer(
                configuration: .init(port: 0, threads: 2, blockingThreads: 16, bodyLimits: IdentityRoutes.bodyLimits), replying: { api.reply($0) })
            defer { server.shutdown(gracePeriod: .seconds(2)) }
            try await body(IdentityHarness(db: db, role: role, server: server, clock: clock, log: recording, providers: providers))
        }
    }

    // MARK: Requests

    /// `POST /oauth/token` with `fields` form-encoded, from the loopback address `from` (each
    /// address of 127.0.0.0/8 is another client to the rate limits).
    func token(_ fields: [(String, String)], headers: [String: String] = [:], from: String = "127.0.0.1") async throws -> Reply {
        try await send(
            "POST", "/oauth/token", headers: ["Content-Type": "application/x-www-form-urlencoded"].merging(headers) { $1 },
            body: Array(FormBody.encode(fields).utf8), from: from)
    }

    func password(_ username: String, _ password: String, scope: String? = nil, headers: [String: String] = [:], from: String = "127.0.0.1") async throws -> Reply {
        var fields = [("grant_type", TokenEndpoint.grantPassword), ("client_id", Self.client), ("username", username), ("password", password)]
        if let scope { fields.append(("scope", scope)) }
        return try await token(fields, headers: headers, from: from)
    }

    func code(_ challenge: String, _ otp: String, headers: [String: String] = [:]) async throws -> Reply {
        try await token([("grant_type", TokenEndpoint.grantPassword), ("client_id", Self.client), ("challenge", challenge), ("otp", otp)], headers: headers)
    }

    func refresh(_ token: String) async throws -> Reply {
        try await self.token([("grant_type", "refresh_token"), ("client_id", Self.client), ("refresh_token", token)])
    }

    func send(_ method: String, _ path: String, headers: [String: String] = [:], body: [UInt8] = [], from: String = "127.0.0.1") async throws -> Reply {
        let port = server.port
        let reply = try await BlockingThread.run { try TestHTTP.exchange(port: port, method: method, path: path, headers: headers, body: body, from: from) }
        AnswerRecorder.record(method: method, path: path, status: reply.status, contentType: reply.header("Content-Type"), body: reply.body)
        return reply
    }

    // MARK: Accounts

    /// An account with a password, verified unless told otherwise.
    @discardableResult
    func account(_ email: String, password: String? = "correct horse battery", givenName: String = "", verified: Bool = true) async throws -> Account {
        let administration = role.administration
        return try await BlockingThread.run {
            try administration.create(email: email, password: password, givenName: givenName, emailVerified: verified)
        }
    }

    /// Turns the second factor on and answers its TOTP and recovery codes.
    func secondFactor(_ personId: String) async throws -> (TOTP, [String]) {
        let administration = role.administration
        return try await BlockingThread.run { try administration.enableSecondFactor(personId: personId) }
    }

    func block(_ personId: String) async throws {
        let administration = role.administration
        try await BlockingThread.run { try administration.block(personId: personId, reason: "test") }
    }

    /// The current TOTP code of `totp` by the role's clock.
    func currentCode(_ totp: TOTP) -> String { totp.code(step: TOTP.step(at: clock.now())) }

    /// The claims of a token the role signed, after checking it with the API's verifier.
    func verified(_ accessToken: String) throws -> AccessToken {
        try TokenVerifier(keys: role.keys.tokenKeys).verify(authorization: "Bearer \(accessToken)")
    }
}

/// An answer, read off the wire.
struct Reply: Sendable, CustomStringConvertible {
    var status: Int
    var headers: [String: String]
    var body: [UInt8]

    var text: String { String(decoding: body, as: UTF8.self) }
    var json: [String: Any] { ((try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any]) ?? [:] }
    subscript(key: String) -> String? { json[key] as? String }
    func header(_ name: String) -> String? { headers[name.lowercased()] }
    var description: String { "\(status) \(text)" }
}

/// HTTP/1.1 over a plain socket, one request per connection (`Connection: close`): exact bytes,
/// any source address of 127.0.0.0/8, and redirects left alone.
enum TestHTTP {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    static func exchange(
        port: UInt16, method: String, path: String, headers: [String: String], body: [UInt8], from source: String = "127.0.0.1"
    ) throws -> Reply {
        var head = "\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n"
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { head += "\(name): \(value)\r\n" }
        if !body.isEmpty || method == "POST" || method == "PATCH" { head += "Content-Length: \(body.count)\r\n" }
        head += "\r\n"
        let received = try RawHTTPClient.send(port: port, Array(head.utf8) + body, from: source, timeout: 30).received
        guard let end = received.firstRange(of: Array("\r\n\r\n".utf8)) else {
            throw Failure(description: "no answer: \(String(decoding: received, as: UTF8.self))")
        }
        let lines = String(decoding: received[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        guard let status = lines.first?.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) else {
            throw Failure(description: "no status line: \(lines.first ?? "")")
        }
        var answerHeaders: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            answerHeaders[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Reply(status: status, headers: answerHeaders, body: Array(received[end.upperBound...]))
    }
}
