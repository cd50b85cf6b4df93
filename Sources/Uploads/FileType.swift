import CMagic
import Foundation
import Synchronization

/// What a file is, decided from its bytes by Debian's libmagic (the database `file(1)` uses),
/// never from its name or the type a client or a source claims.
///
/// Only images and video in `allowed` are taken. SVG is left out on purpose: it is a document
/// that can carry script, and would run as the tier's origin when opened from the file URL.
public enum FileType {
    /// The media types (as libmagic names them) that may be uploaded.
    public static let allowed: Set<String> = [
        "image/jpeg", "image/png", "image/gif", "image/webp", "image/heic", "image/heif", "image/avif",
        "video/mp4", "video/quicktime", "video/webm", "video/3gpp",
    ]

    /// libmagic looks at no more than this many leading bytes: every allowed format says what it
    /// is at its start, and a bound keeps the work per upload small whatever the file holds.
    static let bytesLooked = 1 << 20

    /// The media type of `bytes` as libmagic reads it (`image/png`, `application/octet-stream`),
    /// or nil when libmagic cannot be opened (its database missing).
    public static func sniff(_ bytes: [UInt8]) -> String? {
        guard let cookie = pool.take() else { return nil }
        defer { pool.give(cookie) }
        let count = min(bytes.count, bytesLooked)
        let type: String? = bytes.withUnsafeBytes { buffer in
            magic_buffer(cookie.pointer, buffer.baseAddress, count).map { String(cString: $0) }
        }
        return type
    }

    /// The type of `bytes` when it is one that may be uploaded, else nil.
    public static func allowedType(of bytes: [UInt8]) -> String? {
        guard let type = sniff(bytes), allowed.contains(type) else { return nil }
        return type
    }

    static let pool = CookiePool()

    /// Why files cannot be typed on this machine (libmagic or its database missing, or a PNG
    /// not read as one), or nil when they can: `inbox serve` refuses to start rather than answer
    /// every upload 422.
    public static var problem: String? {
        let png: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D, 0x49, 0x48, 0x44, 0x52, 0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0]
        guard let type = sniff(png) else { return "libmagic cannot be opened or cannot load its database (install libmagic1 and libmagic-mgc)" }
        guard type == "image/png" else { return "libmagic reads a PNG as \(type)" }
        return nil
    }
}

/// A libmagic handle, which one thread at a time may use.
struct MagicCookie: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// Opened handles, reused: loading the database costs far more than a look at a file.
final class CookiePool: Sendable {
    private let idle = Mutex<[MagicCookie]>([])

    func take() -> MagicCookie? {
        if let cookie = idle.withLock({ $0.popLast() }) { return cookie }
        // MIME type only; no looking inside compressed files (a small file could inflate to a
        // large one), no following of anything outside the buffer.
        let flags = MAGIC_MIME_TYPE | MAGIC_NO_CHECK_COMPRESS | MAGIC_NO_CHECK_TAR | MAGIC_NO_CHECK_ELF | MAGIC_NO_CHECK_CDF
        guard let pointer = magic_open(flags) else { return nil }
        guard magic_load(pointer, nil) == 0 else {
            magic_close(pointer)
            return nil
        }
        return MagicCookie(pointer: pointer)
    }

    func give(_ cookie: MagicCookie) {
        idle.withLock { $0.append(cookie) }
    }
}
