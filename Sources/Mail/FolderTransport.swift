import Crypto
import Encodings
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Writes each mail into a folder as `<UTC time>-<hash of the Message-ID>.eml`, the embedded
/// default when no relay is set: development and tests read what would have been sent.
///
/// A file appears whole or not at all: it is written under a hidden temporary name, flushed to
/// disk (fsync), renamed into place and the folder flushed, so a reader never sees half a mail
/// and a crash leaves at most a `.tmp-` file. The same mail sent again (same Message-ID, same
/// millisecond) replaces its file rather than adding a second. Safe from any number of threads.
public struct FolderTransport: MailTransport {
    public let folder: String

    public init(folder: String) {
        self.folder = folder
    }

    /// The name the mail is written under: `20261201T014801.123Z-<16 hex digits>.eml`.
    public static func fileName(for message: MailMessage) -> String {
        let seconds = message.date.timeIntervalSince1970.rounded(.down)
        let milliseconds = min(999, max(0, Int(((message.date.timeIntervalSince1970 - seconds) * 1000 + 1e-6).rounded(.down))))
        let fraction = String(milliseconds)
        let stamp = UTCTime.format(message.date, "%Y%m%dT%H%M%S") + "." + String(repeating: "0", count: 3 - fraction.count) + fraction + "Z"
        return "\(stamp)-\(SHA256.hexDigest(message.messageID).prefix(16)).eml"
    }

    public func send(_ message: MailMessage) -> MailOutcome {
        do {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let name = Self.fileName(for: message)
            let final = (folder as NSString).appendingPathComponent(name)
            let temporary = (folder as NSString).appendingPathComponent(".tmp-\(UUID().uuidString)-\(name)")
            try write(message.rendered(), to: temporary)
            guard rename(temporary, final) == 0 else {
                let reason = String(cString: strerror(errno))
                unlink(temporary)
                throw FolderFailure(description: "cannot rename \(temporary) to \(final): \(reason)")
            }
            let directory = open(folder, O_RDONLY | O_DIRECTORY)
            if directory >= 0 {
                _ = fsync(directory)
                close(directory)
            }
            return .sent
        } catch {
            return .temporary(code: 0, text: "the mail folder \(folder) cannot be written: \(error)")
        }
    }

    private func write(_ bytes: [UInt8], to path: String) throws {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
        guard descriptor >= 0 else { throw FolderFailure(description: "cannot create \(path): \(String(cString: strerror(errno)))") }
        var failure: String?
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let written = Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
                if written < 0 {
                    if errno == EINTR { continue }
                    failure = String(cString: strerror(errno))
                    return
                }
                offset += written
            }
        }
        if failure == nil && fsync(descriptor) != 0 { failure = String(cString: strerror(errno)) }
        close(descriptor)
        if let failure {
            unlink(path)
            throw FolderFailure(description: "cannot write \(path): \(failure)")
        }
    }
}

/// Why a file could not be written; it becomes the text of a temporary outcome.
private struct FolderFailure: Error, CustomStringConvertible {
    var description: String
}
