import Foundation

/// A `multipart/form-data` body (RFC 7578, RFC 2046 §5.1) read into its parts, over a body the
/// HTTP server has already received whole within its limit.
///
/// Not libmicrohttpd's post processor: that one runs inside the server's read loop, before the
/// request is routed and its token checked (so it would parse bodies nobody may send), calls back
/// per chunk and key, and passes over malformed input rather than saying what is wrong with it.
/// Here the body is already bounded; this reader only finds delimiters in it, with limits of its
/// own: a boundary of 1 to 70 characters of RFC 2046's set, at most `maximumParts` parts, at most
/// `maximumHeaderBytes` of headers per part, and no NUL or folded line in a header. A part's
/// content is a range of the body (never copied here), so any bytes, NUL included, may be in it.
public enum MultipartForm {
    public static let maximumParts = 8
    public static let maximumHeaderBytes = 8 * 1024

    public enum Failure: Error, Sendable, Equatable {
        /// The Content-Type has no usable boundary.
        case boundary
        /// The body is not a multipart body of that boundary; the text says where it fails.
        case malformed(String)
    }

    /// One part: its form name, its file name (nil when the part is a plain field), where its
    /// content is in the body, and its declared Content-Type (never trusted; for the record only).
    public struct Part: Sendable, Equatable {
        public var name: String
        public var filename: String?
        public var content: Range<Int>
        public var contentType: String?
    }

    /// The boundary of a `multipart/form-data` Content-Type header, or nil when it has none or
    /// one RFC 2046 does not allow (1 to 70 characters; letters, digits, `'()+_,-./:=?` and
    /// spaces, not last).
    public static func boundary(contentType: String) -> String? {
        let (type, parameters) = parameters(of: contentType)
        guard type.lowercased() == "multipart/form-data", let boundary = parameters["boundary"] else { return nil }
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789'()+_,-./:=? ".utf8)
        guard (1...70).contains(boundary.utf8.count), boundary.utf8.allSatisfy(allowed.contains), boundary.last != " " else { return nil }
        return boundary
    }

    /// The parts of `body`, in order.
    public static func parts(of body: [UInt8], boundary: String) throws(Failure) -> [Part] {
        let dashBoundary = Array(("--" + boundary).utf8)
        let delimiter = Array(("\r\n--" + boundary).utf8)
        // The first boundary: at the very start, or after a preamble ending in CRLF.
        var position: Int
        if body.starts(with: dashBoundary) {
            position = dashBoundary.count
        } else if let found = find(delimiter, in: body, from: 0) {
            position = found + delimiter.count
        } else {
            throw .malformed("The body has no boundary line.")
        }
        var parts: [Part] = []
        while true {
            if matches(body, at: position, Array("--".utf8)) { return parts }
            while position < body.count && (body[position] == 32 || body[position] == 9) { position += 1 }
            guard matches(body, at: position, crlf) else { throw .malformed("A boundary line does not end in CRLF.") }
            position += 2
            guard parts.count < maximumParts else { throw .malformed("The body has more than \(maximumParts) parts.") }
            // The part's headers, up to the blank line.
            let headerEnd: Int
            if matches(body, at: position, crlf) {
                headerEnd = position
            } else {
                guard let end = find(Array("\r\n\r\n".utf8), in: body, from: position, within: maximumHeaderBytes) else {
                    throw .malformed("A part's headers do not end within \(maximumHeaderBytes) bytes.")
                }
                headerEnd = end + 2
            }
            let headers = try readHeaders(body[position..<headerEnd])
            let contentStart = headerEnd + 2
            guard let contentEnd = find(delimiter, in: body, from: contentStart) else {
                throw .malformed("A part is not closed by a boundary line.")
            }
            guard let disposition = headers["content-disposition"] else { throw .malformed("A part has no Content-Disposition.") }
            let (kind, parameters) = Self.parameters(of: disposition)
            guard kind.lowercased() == "form-data", let name = parameters["name"] else {
                throw .malformed("A part's Content-Disposition is not form-data with a name.")
            }
            let filename = parameters["filename"] ?? parameters["filename*"]
            parts.append(Part(name: name, filename: filename, content: contentStart..<contentEnd, contentType: headers["content-type"]))
            position = contentEnd + delimiter.count
        }
    }

    private static let crlf = Array("\r\n".utf8)

    /// Header lines `Name: value` by lower-case name. NUL, bare CR or LF, and folded lines are refused.
    static func readHeaders(_ bytes: ArraySlice<UInt8>) throws(Failure) -> [String: String] {
        var headers: [String: String] = [:]
        guard !bytes.contains(0) else { throw .malformed("A part's headers hold a NUL byte.") }
        let text = Array(bytes)
        var lines: [ArraySlice<UInt8>] = []
        var start = 0
        var index = 0
        while index + 1 < text.count {
            if text[index] == 13 && text[index + 1] == 10 {
                lines.append(text[start..<index])
                index += 2
                start = index
            } else {
                index += 1
            }
        }
        if start < text.count { lines.append(text[start..<text.count]) }
        for line in lines where !line.isEmpty {
            guard !line.contains(13), !line.contains(10) else { throw .malformed("A part's header has a bare CR or LF.") }
            guard let first = line.first, first != 32, first != 9 else { throw .malformed("A part's header is folded.") }
            guard let colon = line.firstIndex(of: 58) else { throw .malformed("A part's header has no colon.") }
            let name = String(decoding: line[line.startIndex..<colon], as: UTF8.self).lowercased()
            let value = String(decoding: line[(colon + 1)...], as: UTF8.self).trimmingCharacters(in: .whitespaces)
            guard !name.isEmpty, !name.contains(" ") else { throw .malformed("A part's header has no name.") }
            guard headers[name] == nil else { throw .malformed("A part repeats the header \(name).") }
            headers[name] = value
        }
        return headers
    }

    /// `type; a=b; c="d e"` as the type and its parameters by lower-case name (a quoted value
    /// with its backslash escapes undone). A parameter given twice keeps its first value.
    static func parameters(of header: String) -> (String, [String: String]) {
        let characters = Array(header.unicodeScalars)
        var index = 0
        func skipSpaces() { while index < characters.count && (characters[index] == " " || characters[index] == "\t") { index += 1 } }
        func token(until stops: Set<Unicode.Scalar>) -> String {
            var text = String.UnicodeScalarView()
            while index < characters.count && !stops.contains(characters[index]) {
                text.append(characters[index])
                index += 1
            }
            return String(text).trimmingCharacters(in: .whitespaces)
        }
        skipSpaces()
        let type = token(until: [";"])
        var parameters: [String: String] = [:]
        while index < characters.count {
            index += 1  // the ";"
            skipSpaces()
            let name = token(until: ["=", ";"]).lowercased()
            guard index < characters.count, characters[index] == "=" else { continue }
            index += 1
            skipSpaces()
            var value = String.UnicodeScalarView()
            if index < characters.count && characters[index] == "\"" {
                index += 1
                while index < characters.count && characters[index] != "\"" {
                    if characters[index] == "\\" && index + 1 < characters.count { index += 1 }
                    value.append(characters[index])
                    index += 1
                }
                index += 1  // the closing quote
                _ = token(until: [";"])
            } else {
                value = token(until: [";"]).unicodeScalars
            }
            if !name.isEmpty && parameters[name] == nil { parameters[name] = String(value) }
        }
        return (type, parameters)
    }

    static func matches(_ body: [UInt8], at position: Int, _ bytes: [UInt8]) -> Bool {
        guard position >= 0, position + bytes.count <= body.count else { return false }
        return body[position..<(position + bytes.count)].elementsEqual(bytes)
    }

    /// The first index of `needle` in `body` at or after `start` (and starting within `within`
    /// bytes of it, when given): memchr to each place the first byte is, then a comparison.
    static func find(_ needle: [UInt8], in body: [UInt8], from start: Int, within: Int? = nil) -> Int? {
        guard let first = needle.first, start >= 0, start <= body.count else { return nil }
        let end = within.map { min(body.count, start + $0 + needle.count) } ?? body.count
        return body.withUnsafeBytes { haystack -> Int? in
            guard let base = haystack.baseAddress else { return nil }
            var position = start
            while end - position >= needle.count {
                guard let found = memchr(base + position, Int32(first), end - position - needle.count + 1) else { return nil }
                let index = base.distance(to: UnsafeRawPointer(found))
                if memcmp(found, needle, needle.count) == 0 { return index }
                position = index + 1
            }
            return nil
        }
    }
}
