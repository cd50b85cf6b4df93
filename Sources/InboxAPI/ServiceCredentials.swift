import Crypto
import Foundation

/// The credentials other tiers (orders, catalogue, identity) present on `/internal` routes, as
/// `Authorization: Bearer <secret>`, from configuration (`INBOX_SERVICE_CREDENTIALS`:
/// `orders=secret,catalogue=secret`). A person's token is never one of them.
public struct ServiceCredentials: Sendable {
    /// SHA-256 of each secret, by service name: compared digest to digest, so the time a wrong
    /// secret takes says nothing about the right one.
    private let digests: [(name: String, digest: [UInt8])]

    public init(secrets: [String: String] = [:]) {
        digests = secrets.sorted { $0.key < $1.key }.map { ($0.key, SHA256.digest(Array($0.value.utf8))) }
    }

    /// Parses `name=secret,name=secret`; a secret shorter than 16 characters is refused.
    public static func parse(_ text: String) throws -> ServiceCredentials {
        var secrets: [String: String] = [:]
        for pair in text.split(separator: ",") {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, !parts[0].isEmpty, parts[1].count >= 16 else {
                throw CryptoError("Each service credential is name=secret, with a secret of 16 characters or more.")
            }
            secrets[parts[0]] = parts[1]
        }
        return ServiceCredentials(secrets: secrets)
    }

    public var isEmpty: Bool { digests.isEmpty }

    /// The name of the service whose secret the header carries; 401 otherwise.
    func authenticate(_ authorization: String?) throws(APIError) -> String {
        let parts = authorization?.split(separator: " ", maxSplits: 1) ?? []
        guard parts.count == 2, parts[0].lowercased() == "bearer" else {
            throw TokenVerifier.unauthorized(.missingToken, "This route is for other tiers: Authorization: Bearer <service credential>.")
        }
        let presented = SHA256.digest(Array(parts[1].utf8))
        var match: String?
        for (name, digest) in digests {
            var difference: UInt8 = 0
            for (a, b) in zip(digest, presented) { difference |= a ^ b }
            if difference == 0 { match = name }
        }
        guard let match else { throw TokenVerifier.unauthorized(.invalidToken, "The service credential is not one this server knows.") }
        return match
    }
}
