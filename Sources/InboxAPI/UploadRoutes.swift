import Foundation
import Lifecycle
import HTTPServer
import InboxDomain
import PostgresClient
import Synchronization
import Uploads

/// Where uploads go and how sources are fetched (`inbox serve` reads these from its settings).
public struct UploadSettings: Sendable {
    /// The folder the files are stored in (`INBOX_UPLOADS_DIR`).
    public var directory: URL
    /// Whether a `sourceUrl` may lead to loopback, private or link-local addresses
    /// (`INBOX_UPLOADS_ALLOW_PRIVATE_SOURCES=1`; the tests' local source needs it).
    public var allowPrivateSources: Bool
    public var fetchLimits: SourceFetcher.Limits
    /// Sources fetched at once per process: each holds one of the server's blocking threads (16
    /// by default) for up to `fetchLimits.totalTime`, so slow sources must not take them all.
    /// One more is `503 uploads_busy` with `Retry-After`.
    public var concurrentFetches: Int
    /// Who besides the uploader may read a file; nil: `ThreadsUploadAccess` on the routes' pool.
    public var access: (any UploadAccess)?
    /// The clock records are made and expire by.
    public var now: @Sendable () -> Date
    /// The object store every node keeps the files in (`INBOX_UPLOADS_S3_URL`); nil: the folder alone.
    public var bucket: S3Bucket?

    public init(
        directory: URL, bucket: S3Bucket? = nil, allowPrivateSources: Bool = false, fetchLimits: SourceFetcher.Limits = .init(), concurrentFetches: Int = 4,
        access: (any UploadAccess)? = nil, now: @escaping @Sendable () -> Date = { Date() }
    ) {
        self.bucket = bucket
        self.concurrentFetches = concurrentFetches
        self.directory = directory
        self.allowPrivateSources = allowPrivateSources
        self.fetchLimits = fetchLimits
        self.access = access
        self.now = now
    }

    /// The store of these settings on `client`: the one the upload routes use, and the one to
    /// hand the conversation routes for `attachmentHandles` (docs/uploads.md).
    public func store(client: PostgresClient) -> UploadStore {
        UploadStore(client: client, directory: directory, bucket: bucket, now: now)
    }

    /// A folder under the system's temporary folder: for tests and benchmarks that do not upload.
    /// `inbox serve` always passes its own (`INBOX_UPLOADS_DIR`, by default `<INBOX_DATA_DIR>/uploads`).
    public static var temporary: UploadSettings {
        UploadSettings(directory: FileManager.default.temporaryDirectory.appendingPathComponent("wristler-inbox-uploads", isDirectory: true))
    }
}

/// Files (app guide, section 6; docs/uploads.md): `POST /v1/uploads` (scope `uploads:write`)
/// takes one `file` part of a `multipart/form-data` body, or a JSON:API document naming a
/// `sourceUrl` to fetch it from, and answers 201 with the upload's `handle`. `GET
/// /v1/uploads/{handle}` (a signed-in person with `messages:read`: files are read as part of
/// conversations) serves the bytes to the uploader and to whoever may see a message the file is
/// attached to (`UploadAccess`); to anybody else it is a 404, as an unknown handle is.
///
/// Where a refusal points: `source.pointer` `/file` for the multipart part (a pointer into the
/// form's fields, as the OpenAPI document describes them), `/data/attributes/sourceUrl` for a
/// source.
public enum UploadRoutes {
    /// The server's body limit for `POST /v1/uploads`, above its limit for every other request,
    /// and the time such a request may take to arrive once its head is in: 10 MB in 60 s is about
    /// 1.4 Mbit/s, a slow mobile network (every other request keeps the server's deadline).
    public static let bodyLimit = HTTPServer.BodyLimit(
        method: .post, path: "/v1/uploads", maximumBytes: UploadLimits.maximumRequestBytes, requestDeadline: requestDeadline)
    public static let requestDeadline: Duration = .seconds(60)

    /// The bucket could not be reached or refused: nothing was stored (or served), to send again.
    static func storageUnavailable(_ failure: S3Bucket.Failure) -> APIError {
        APIError(
            status: 503, code: .storageUnavailable, detail: "The files cannot be reached right now; the request can be retried.",
            headers: [("Retry-After", "1")], cause: failure.description)
    }

    static let filePointer = APIError.Source.pointer("/file")
    static let sourcePointer = Attributes.pointer("sourceUrl")

    public static func routes(client: PostgresClient, settings: UploadSettings) -> [Route] {
        let store = settings.store(client: client)
        let fetcher = SourceFetcher(limits: settings.fetchLimits, allowPrivate: settings.allowPrivateSources)
        let access = settings.access ?? ThreadsUploadAccess(client: client)
        let fetches = FetchSlots(limit: max(1, settings.concurrentFetches))
        return [
            Route(
                .post, "/v1/uploads", access: .signedIn(scope: .uploadsWrite), media: .jsonAPIOrMultipart,
                describedAs: RouteDescription(
                    "Uploads an image or video (up to 10 MB, its type read from its bytes): one file part of a multipart/form-data body, or a sourceUrl to fetch it from. Answers its handle.",
                    body: Schema.resourceDocument(
                        type: "uploads", attributes: ["sourceUrl": Schema.string(maximumLength: 2048, pattern: "^[hH][tT][tT][pP][sS]?://[^/?#@:]+")],
                        required: ["sourceUrl"]),
                    multipartBody: Schema.object(
                        ["file": .object(["type": .string("string"), "contentMediaType": .string("application/octet-stream")])], required: ["file"]),
                    responses: [201: .document(Schema.document)]).returning(Self.upload)
            ) { context in
                let (bytes, origin, pointer) = try Self.file(of: context, fetcher: fetcher, slots: fetches)
                guard let type = FileType.allowedType(of: bytes) else {
                    let sniffed = FileType.sniff(bytes) ?? "of a type that cannot be read"
                    throw APIError(
                        status: 422, code: .unsupportedFileType,
                        detail: "The file is \(sniffed), not an image or video this API takes (\(FileType.allowed.sorted().joined(separator: ", "))).",
                        source: pointer)
                }
                // A photo is kept upright and without its metadata (where it was taken), and one
                // that declares a picture too large to decode is refused.
                let cleaned: [UInt8]
                do {
                    cleaned = try PhotoCleaner.clean(bytes, contentType: type)
                } catch {
                    throw APIError(status: 422, code: .unsupportedFileType, detail: "\(error)", source: pointer)
                }
                let metadata = context.identity.metadata
                let upload: Upload
                do {
                    upload = try store.store(
                        cleaned, contentType: type, person: context.person, origin: metadata.origin.rawValue, appVersion: metadata.appVersion,
                        source: origin)
                } catch let failure as S3Bucket.Failure {
                    throw Self.storageUnavailable(failure)
                }
                // Expired handles are swept now and then, on the way out of an upload.
                try? store.sweepIfDue()
                return Documents.response(status: 201, ["data": resource(upload)]).locating("/v1/uploads/" + Documents.pathSegment(upload.handle))
            },
            Route(
                .get, "/v1/uploads/{handle}", access: .signedIn(scope: .messagesRead), media: .storedBytes,
                describedAs: RouteDescription(
                    "The bytes of an upload, to its uploader and to whoever may see a message it is attached to (anybody else: 404).",
                    responses: [200: .bytes(mediaTypes: FileType.allowed.sorted())])
            ) { context in
                let handle = context.parameters["handle"] ?? ""
                guard let upload = try store.upload(handle) else { throw notFound() }
                if upload.personId != context.person {
                    guard try access.mayRead(handle: upload.handle, person: context.person) else { throw notFound() }
                }
                // Sent from the file as the client reads it: a slow reader holds no copy in memory.
                let file: HTTPFileBody
                do {
                    file = try HTTPFileBody(path: try store.file(of: upload).path)
                } catch let failure as S3Bucket.Failure {
                    throw Self.storageUnavailable(failure)
                } catch {
                    throw APIError(status: 404, code: .notFound, detail: "There is no such upload.", cause: "the file of \(upload.sha256) cannot be read: \(error)")
                }
                guard file.size == upload.size else {
                    throw APIError(
                        status: 404, code: .notFound, detail: "There is no such upload.",
                        cause: "the file of \(upload.sha256) holds \(file.size) bytes, its record \(upload.size)")
                }
                return HTTPResponse(
                    status: 200,
                    headers: [
                        // libmicrohttpd writes Content-Length itself, from the file's size (it drops one set here).
                        ("Content-Type", upload.contentType), ("Content-Length", String(file.size)), ("Cache-Control", "private"),
                        ("X-Content-Type-Options", "nosniff"), ("Content-Disposition", "inline"),
                    ], file: file)
            },
        ]
    }

    /// The file of the request, whether it came as a part or is fetched from a source now, with
    /// where the record says it came from and where a refusal of its bytes points.
    static func file(of context: RequestContext, fetcher: SourceFetcher, slots: FetchSlots) throws(APIError) -> ([UInt8], String, APIError.Source) {
        let contentType = context.request.header("Content-Type") ?? ""
        if contentType.split(separator: ";").first?.trimmingSpaces.lowercased() == "multipart/form-data" {
            return (try part(of: context.request.body, contentType: contentType), "file", filePointer)
        }
        let data = try context.resourceDocument()
        try Documents.requireType(data, "uploads", id: nil)
        let attributes = try Attributes(data, allowed: ["sourceUrl"])
        let url = try attributes.string(
            "sourceUrl", required: true, maximumLength: 2048, valid: SourceFetcher.isSupported, hint: "an http or https URL with a host")!
        guard slots.take() else {
            throw APIError(
                status: 503, code: .uploadsBusy, detail: "Too many sources are being fetched right now; the request can be retried.",
                headers: [("Retry-After", "1")])
        }
        defer { slots.give() }
        switch fetcher.fetch(url) {
        case .success(let bytes):
            guard !bytes.isEmpty else {
                throw APIError(status: 422, code: .unsupportedFileType, detail: "The file at sourceUrl is empty.", source: sourcePointer)
            }
            return (bytes, "url", sourcePointer)
        case .failure(let failure):
            let code: APIError.Code =
                switch failure {
                case .addressNotAllowed: .sourceNotAllowed
                case .tooLarge: .fileTooLarge
                case .unsupportedURL: .invalidField
                default: .sourceUnavailable
                }
            throw APIError(status: 422, code: code, detail: failure.description, source: sourcePointer)
        }
    }

    /// The one `file` part of a multipart body: a 400 when the body is not multipart as its
    /// Content-Type says, a 422 at `/file` when there is no such part, more than one, one
    /// without a file name, or an empty one, and a 413 when it is over the limit.
    static func part(of body: [UInt8], contentType: String) throws(APIError) -> [UInt8] {
        guard let boundary = MultipartForm.boundary(contentType: contentType) else {
            throw APIError(
                status: 400, code: .invalidMultipart, detail: "Content-Type must name a boundary of 1 to 70 characters (RFC 2046).",
                source: .header("Content-Type"))
        }
        let parts: [MultipartForm.Part]
        do {
            parts = try MultipartForm.parts(of: body, boundary: boundary)
        } catch {
            let reason = switch error {
                case .malformed(let reason): reason
                case .boundary: "The boundary is not usable."
                }
            throw APIError(status: 400, code: .invalidMultipart, detail: "The body is not multipart/form-data: \(reason)", source: .pointer(""))
        }
        if let other = parts.first(where: { $0.name != "file" }) {
            let escaped = other.name.replacingOccurrences(of: "~", with: "~0").replacingOccurrences(of: "/", with: "~1")
            throw APIError(
                status: 422, code: .unknownField, detail: "This form takes one part, file; not \(other.name.debugDescription).",
                source: .pointer("/" + escaped.replacingOccurrences(of: "\u{0}", with: "")))
        }
        guard let file = parts.first else {
            throw APIError(status: 422, code: .missingField, detail: "The form needs a file part.", source: filePointer)
        }
        guard parts.count == 1 else {
            throw APIError(status: 422, code: .invalidField, detail: "The form takes exactly one file part, not \(parts.count).", source: filePointer)
        }
        guard let name = file.filename, !name.isEmpty else {
            throw APIError(status: 422, code: .invalidField, detail: "The file part must be a file: it needs a filename.", source: filePointer)
        }
        guard file.content.count <= UploadLimits.maximumFileBytes else {
            throw APIError(
                status: 413, code: .bodyTooLarge, detail: "The file is larger than \(UploadLimits.maximumFileBytes) bytes.", source: filePointer)
        }
        guard !file.content.isEmpty else {
            throw APIError(status: 422, code: .unsupportedFileType, detail: "The file is empty.", source: filePointer)
        }
        return Array(body[file.content])
    }

    static func resource(_ upload: Upload) -> JSONValue {
        .object([
            "type": .string("uploads"), "id": .string(upload.handle),
            "attributes": .object([
                "handle": .string(upload.handle), "contentType": .string(upload.contentType), "size": .integer(Int64(upload.size)),
                "createdAt": Documents.timestamp(upload.createdAt), "expiresAt": Documents.timestamp(upload.expiresAt),
            ]),
            "links": .object(["self": .string("/v1/uploads/\(upload.handle)")]),
        ])
    }

    static func notFound() -> APIError { APIError(status: 404, code: .notFound, detail: "There is no such upload.") }
}

/// How many sources are being fetched, up to a limit.
final class FetchSlots: Sendable {
    let limit: Int
    private let taken = Atomic<Int>(0)

    init(limit: Int) { self.limit = limit }

    /// Takes a slot when one is free.
    func take() -> Bool {
        if taken.wrappingAdd(1, ordering: .acquiringAndReleasing).newValue <= limit { return true }
        taken.wrappingSubtract(1, ordering: .releasing)
        return false
    }

    func give() { taken.wrappingSubtract(1, ordering: .releasing) }
}

extension UploadRoutes {
    static let upload = Schema.single(
        Schema.resource(
            "Upload", type: "uploads",
            attributes: [
                "handle": Schema.text, "contentType": Schema.text, "size": Schema.wholeNumber, "createdAt": Schema.timestamp,
                "expiresAt": Schema.timestamp,
            ], links: true))
}

/// The upload sweep of one API node, every `interval` (`UploadStore.sweep`): unattached handles
/// past their day and an erased person's uploads leave the records, the bucket and this node's
/// folder even when nobody uploads (the upload route's own `sweepIfDue` only runs on an upload).
/// Any number of nodes may run it: each digest is deleted under its advisory lock.
public struct UploadSweeper: Service {
    let store: UploadStore
    let interval: Duration
    let logger: Logger

    public init(store: UploadStore, interval: Duration = .seconds(600), logger: Logger = .silent) {
        self.store = store
        self.interval = interval
        self.logger = logger
    }

    public func run() async throws {
        while !Task.isCancelled {
            let store = self.store
            // The sweep blocks on PostgreSQL, the bucket and the folder: a thread of its own, not the pool's.
            let outcome: Result<Int, any Error> = await withCheckedContinuation { continuation in
                Thread { continuation.resume(returning: Result { try store.sweep() }) }.start()
            }
            switch outcome {
            case .success(let swept) where swept > 0: logger.info("swept uploads", metadata: ["records": "\(swept)"])
            case .success: break
            case .failure(let error): logger.warning("the upload sweep failed; it runs again later", metadata: ["error": "\(error)"])
            }
            do { try await Task.sleep(for: interval) } catch { return }
        }
    }
}
