import Foundation
import InboxDomain

/// A release version in dotted digits (`2.4.0`), compared part by part as numbers: `2.10.0` is
/// above `2.9.1`, and `2.4` equals `2.4.0`.
public struct AppVersion: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let parts: [Int]

    /// Nil unless `text` is 1 to 4 dot-separated numbers of at most 6 digits each.
    public init?(_ text: String) {
        let pieces = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...4).contains(pieces.count) else { return nil }
        var parts: [Int] = []
        for piece in pieces {
            guard (1...6).contains(piece.count), piece.allSatisfy({ $0.isASCII && $0.isNumber }), let number = Int(piece) else { return nil }
            parts.append(number)
        }
        self.parts = parts
    }

    public var description: String { parts.map(String.init).joined(separator: ".") }

    private func padded(to count: Int) -> [Int] { parts + Array(repeating: 0, count: max(0, count - parts.count)) }

    public static func < (lhs: AppVersion, rhs: AppVersion) -> Bool {
        let count = max(lhs.parts.count, rhs.parts.count)
        return lhs.padded(to: count).lexicographicallyPrecedes(rhs.padded(to: count))
    }

    public static func == (lhs: AppVersion, rhs: AppVersion) -> Bool {
        let count = max(lhs.parts.count, rhs.parts.count)
        return lhs.padded(to: count) == rhs.padded(to: count)
    }

    public func hash(into hasher: inout Hasher) {
        var trimmed = parts
        while trimmed.count > 1 && trimmed.last == 0 { trimmed.removeLast() }
        hasher.combine(trimmed)
    }
}

/// Who is calling: the app on a platform with its version (`X-Wristler-App: ios/2.4.0`), or an
/// integration (no header). Recorded as the origin of everything the request creates.
public struct AppIdentity: Sendable, Hashable {
    public enum Platform: String, Sendable, Hashable, CaseIterable {
        case ios
        case android
    }

    public static let headerName = "X-Wristler-App"

    /// Nil for a request without the header (an integration).
    public let platform: Platform?
    public let version: AppVersion?

    /// An integration: no app header.
    public static let integration = AppIdentity(platform: nil, version: nil)

    private init(platform: Platform?, version: AppVersion?) {
        self.platform = platform
        self.version = version
    }

    /// Reads the header's value (nil: no header; an empty value, which HTTP allows, is none
    /// either). A value that is not `ios/<version>` or `android/<version>` is a 400 naming the header.
    public static func parse(_ value: String?) throws(APIError) -> AppIdentity {
        guard let value else { return .integration }
        let trimmed = value.trimmingSpaces
        if trimmed.isEmpty { return .integration }
        let parts = trimmed.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2, let platform = Platform(rawValue: String(parts[0])), let version = AppVersion(String(parts[1])) else {
            throw APIError(
                status: 400, code: .invalidAppHeader,
                detail: "\(headerName) must be ios/<version> or android/<version> with a version in dotted digits, such as ios/2.4.0.",
                source: .header(headerName))
        }
        return AppIdentity(platform: platform, version: version)
    }

    /// The origin recorded in the metadata of events the request creates.
    public var metadata: EventMetadata {
        switch platform {
        case .ios: EventMetadata(origin: .appIOS, appVersion: version?.description, service: "inbox")
        case .android: EventMetadata(origin: .appAndroid, appVersion: version?.description, service: "inbox")
        case nil: EventMetadata(origin: .api, service: "inbox")
        }
    }
}
