import CCurl
import CShims
import Encodings
import Foundation
import Threads

/// Sends mails to one SMTP relay with libcurl's easy interface.
///
/// Security: `smtp://` upgrades with STARTTLS and refuses a relay that does not offer it
/// (CURLUSESSL_ALL), unless `allowPlain` is set for a relay on the same machine or network, which
/// then uses STARTTLS only when offered; `smtps://` is TLS from the first byte. Certificates are
/// always verified (the system's CAs, or `caFile` instead). Only the smtp and smtps protocols are
/// enabled, no proxy is taken from the environment, and the username and password are sent only
/// over TLS unless `allowPlain`.
///
/// Threads: `send` may be called from any number of threads at once. Each send takes an easy
/// handle of its own from a small pool (or makes one), so sends never share a handle, and puts it
/// back after a mail the relay accepted: the next send on that handle reuses the open connection
/// (libcurl's connection cache sends RSET/MAIL FROM on it instead of connecting and
/// authenticating again). A handle is closed after any failure, so a confused connection is never
/// reused.
public final class SMTPTransport: MailTransport {
    public struct Settings: Sendable, Equatable, CustomStringConvertible {
        /// `smtp://host[:port][/ehlo-name]` (STARTTLS; port 587 for submission) or
        /// `smtps://host[:port]` (implicit TLS, port 465).
        public var url: String
        public var username: String?
        public var password: String?
        /// PEM certificates trusted instead of the system's (a test's own CA, a private relay's).
        public var caFile: String?
        /// Whether an `smtp://` relay that offers no STARTTLS may be used in plain text.
        public var allowPlain: Bool
        public var connectTimeout: Duration
        /// The longest one mail may take, connecting included.
        public var totalTimeout: Duration

        public init(
            url: String, username: String? = nil, password: String? = nil, caFile: String? = nil, allowPlain: Bool = false,
            connectTimeout: Duration = .seconds(10), totalTimeout: Duration = .seconds(60)
        ) {
            self.url = url
            self.username = username
            self.password = password
            self.caFile = caFile
            self.allowPlain = allowPlain
            self.connectTimeout = connectTimeout
            self.totalTimeout = totalTimeout
        }

        /// For logs: the password is never written out.
        public var description: String {
            "\(url)\(username.map { " as \($0)" } ?? "")\(password == nil ? "" : " (password set)")\(caFile.map { ", CA file \($0)" } ?? "")"
                + "\(allowPlain ? ", plain allowed" : ""), connect timeout \(connectTimeout), timeout \(totalTimeout)"
        }
    }

    public let settings: Settings
    /// Idle easy handles, each possibly holding an open connection to the relay.
    private let idle = Locked<[UnsafeMutableRawPointer]>([])
    private static let maximumIdleHandles = 4

    /// Throws when the URL is not smtp:// or smtps:// with a host (`MailConfiguration` says the
    /// same about the setting).
    public init(settings: Settings) throws {
        guard Self.isSupported(settings.url) else {
            throw MailError(.invalidSetting, "The SMTP relay must be an smtp:// or smtps:// URL with a host, not \"\(MailAddress.printable(settings.url))\".")
        }
        self.settings = settings
    }

    deinit {
        for handle in idle.withLock({ $0 }) { curl_easy_cleanup(handle) }
    }

    static func isSupported(_ url: String) -> Bool {
        guard url.utf8.count <= 2048, let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            scheme == "smtp" || scheme == "smtps", let host = components.host, !host.isEmpty,
            components.user == nil, components.password == nil, components.query == nil, components.fragment == nil
        else { return false }
        return true
    }

    public func send(_ message: MailMessage) -> MailOutcome {
        guard Self.globalInit == 0, let handle = idle.withLock({ $0.popLast() }) ?? curl_easy_init() else {
            return .temporary(code: 0, text: "libcurl cannot start")
        }
        let transfer = SMTPTransfer(message: message.rendered())
        let recipients: UnsafeMutablePointer<curl_slist>? = curl_slist_append(nil, message.to.address)
        defer { curl_slist_free_all(recipients) }
        var errorBuffer = [CChar](repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
        let context = Unmanaged.passUnretained(transfer).toOpaque()
        let code: CURLcode = withExtendedLifetime(transfer) {
            errorBuffer.withUnsafeMutableBufferPointer { errorText in
                func set(_ option: CURLoption, _ value: Int) { _ = wristler_curl_easy_setopt_long(handle, option, value) }
                func set(_ option: CURLoption, string: String?) { _ = wristler_curl_easy_setopt_string(handle, option, string) }
                func set(_ option: CURLoption, pointer: UnsafeMutableRawPointer?) { _ = wristler_curl_easy_setopt_pointer(handle, option, pointer) }
                set(CURLOPT_URL, string: settings.url)
                set(CURLOPT_PROTOCOLS_STR, string: "smtp,smtps")
                set(CURLOPT_PROXY, string: "")
                set(CURLOPT_NOSIGNAL, 1)
                set(CURLOPT_USE_SSL, Int(settings.allowPlain ? CURLUSESSL_TRY.rawValue : CURLUSESSL_ALL.rawValue))
                set(CURLOPT_SSL_VERIFYPEER, 1)
                set(CURLOPT_SSL_VERIFYHOST, 2)
                if let caFile = settings.caFile { set(CURLOPT_CAINFO, string: caFile) }
                if let username = settings.username { set(CURLOPT_USERNAME, string: username) }
                if let password = settings.password { set(CURLOPT_PASSWORD, string: password) }
                set(CURLOPT_CONNECTTIMEOUT_MS, Int(settings.connectTimeout.wholeMilliseconds))
                set(CURLOPT_TIMEOUT_MS, Int(settings.totalTimeout.wholeMilliseconds))
                set(CURLOPT_MAIL_FROM, string: "<\(message.from.address)>")
                set(CURLOPT_MAIL_RCPT, pointer: UnsafeMutableRawPointer(recipients))
                set(CURLOPT_UPLOAD, 1)
                _ = wristler_curl_easy_setopt_off_t(handle, CURLOPT_INFILESIZE_LARGE, curl_off_t(transfer.message.count))
                set(CURLOPT_READFUNCTION, pointer: unsafeBitCast(onReadMessage, to: UnsafeMutableRawPointer.self))
                set(CURLOPT_READDATA, pointer: context)
                set(CURLOPT_HEADERFUNCTION, pointer: unsafeBitCast(onReply, to: UnsafeMutableRawPointer.self))
                set(CURLOPT_HEADERDATA, pointer: context)
                set(CURLOPT_ERRORBUFFER, pointer: UnsafeMutableRawPointer(errorText.baseAddress))
                let code = curl_easy_perform(handle)
                // Nothing of this send may outlive it in a handle that is used again.
                set(CURLOPT_MAIL_RCPT, pointer: nil)
                set(CURLOPT_READDATA, pointer: nil)
                set(CURLOPT_HEADERDATA, pointer: nil)
                set(CURLOPT_ERRORBUFFER, pointer: nil)
                return code
            }
        }
        var reply = 0
        _ = wristler_curl_easy_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &reply)
        let failure = errorBuffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        let outcome = Self.classify(
            succeeded: code == CURLE_OK, reply: reply, replyText: transfer.replyText(code: reply), curlText: failure.isEmpty ? String(cString: curl_easy_strerror(code)) : failure)
        if outcome == .sent {
            let kept = idle.withLock { handles in
                guard handles.count < Self.maximumIdleHandles else { return false }
                handles.append(handle)
                return true
            }
            if !kept { curl_easy_cleanup(handle) }
        } else {
            curl_easy_cleanup(handle)
        }
        return outcome
    }

    /// The SMTP reply codes that mean the relay refused the transport's own credentials or
    /// wants them: a configuration problem, not a problem of the mail, so it is kept and retried.
    static let configurationReplies: Set<Int> = [530, 534, 535, 538]

    /// The outcome of a transfer that ended after the reply `reply` (0: none); `curlText` is
    /// libcurl's own account of the failure.
    static func classify(succeeded: Bool, reply: Int, replyText: String?, curlText: String) -> MailOutcome {
        if succeeded { return .sent }
        let text = replyText.flatMap { $0.isEmpty ? nil : $0 } ?? curlText
        switch reply {
        case 400..<500: return .temporary(code: reply, text: text)
        case _ where configurationReplies.contains(reply): return .temporary(code: reply, text: text)
        case 500..<600: return .permanent(code: reply, text: text)
        default:
            // No refusal from the relay: it could not be reached, TLS failed or was not offered,
            // or time ran out. Nothing says the mail is wrong.
            return .temporary(code: 0, text: curlText)
        }
    }

    private static let globalInit: Int32 = Int32(curl_global_init(Int(CURL_GLOBAL_DEFAULT)).rawValue)
}

/// One send's state, touched only by the thread running it (curl calls back on that thread).
final class SMTPTransfer {
    let message: [UInt8]
    var offset = 0
    /// Every reply of the relay: its code and text (the lines of a multi-line reply joined).
    var replies: [(code: Int, text: String)] = []
    private var replyComplete = true

    init(message: [UInt8]) { self.message = message }

    /// The text of the last reply with `code`: after a refusal libcurl still says QUIT, so the
    /// last reply of all is the relay's 221.
    func replyText(code: Int) -> String? { replies.last { $0.code == code }?.text }

    /// Keeps each reply: `250-...` lines continue it, `250 ...` ends it.
    func record(_ line: String) {
        let trimmed = line.trimmingCharacters(in: .whitespacesAndNewlines)
        let bytes = Array(trimmed.utf8)
        guard bytes.count >= 3, bytes[0..<3].allSatisfy({ (48...57).contains($0) }), let code = Int(String(decoding: bytes[0..<3], as: UTF8.self))
        else { return }
        let text = String(trimmed.dropFirst(4)).trimmingCharacters(in: .whitespaces)
        if replyComplete || replies.isEmpty {
            replies.append((code, text))
        } else {
            replies[replies.count - 1].text += " " + text
        }
        replyComplete = bytes.count == 3 || bytes[3] != UInt8(ascii: "-")
        // A long session (many EHLO lines) must not grow without bound.
        if replies.count > 64 { replies.removeFirst(replies.count - 64) }
    }
}

/// CURLOPT_READFUNCTION: the next piece of the message (curl dot-stuffs it and ends it with CRLF.CRLF).
private let onReadMessage: curl_read_callback = { buffer, size, count, state in
    guard let buffer, let state else { return 0 }
    let transfer = Unmanaged<SMTPTransfer>.fromOpaque(state).takeUnretainedValue()
    let length = min(size * count, transfer.message.count - transfer.offset)
    guard length > 0 else { return 0 }
    transfer.message.withUnsafeBufferPointer { message in
        UnsafeMutableRawPointer(buffer).copyMemory(from: message.baseAddress! + transfer.offset, byteCount: length)
    }
    transfer.offset += length
    return length
}

/// CURLOPT_HEADERFUNCTION: for SMTP, libcurl hands over every reply line of the relay here.
private let onReply: curl_write_callback = { data, size, count, state in
    let length = size * count
    guard let data, let state else { return length }
    let transfer = Unmanaged<SMTPTransfer>.fromOpaque(state).takeUnretainedValue()
    let line = data.withMemoryRebound(to: UInt8.self, capacity: length) { String(decoding: UnsafeBufferPointer(start: $0, count: length), as: UTF8.self) }
    transfer.record(line)
    return length
}
