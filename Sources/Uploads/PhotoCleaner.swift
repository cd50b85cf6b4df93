import CVips
import Foundation

/// Photos as they are served: upright, without their metadata, and of a size that can be decoded.
///
/// A phone's photo carries where it was taken (EXIF GPS), the device and often the owner's name;
/// a file of a few kilobytes can declare a picture of a billion pixels, which a viewer then tries
/// to decode. libvips (Debian's) reads the header and refuses more than `maximumPixels`; otherwise
/// it turns the picture upright by its EXIF orientation (the only piece of metadata that changes
/// how it looks) and writes it again in its own format without any metadata (`strip`: EXIF, XMP,
/// IPTC, ICC, comments). JPEG, WebP, HEIC and AVIF are encoded again at quality 90; PNG losslessly;
/// an animated WebP keeps its frames. GIF carries no photo metadata and is only checked for size.
/// Called on the API's blocking threads: it may wait for a slot (`slots`).
public enum PhotoCleaner {
    /// 100 megapixels: more than any phone's photo (a 48-megapixel sensor's is 8064 x 6048), far
    /// below a decompression bomb's (a 30,000 x 30,000 PNG is 900).
    public static let maximumPixels = 100_000_000

    public enum Refusal: Error, Equatable, CustomStringConvertible {
        /// The picture declares more pixels than `maximumPixels`.
        case tooManyPixels(width: Int, height: Int)
        /// libmagic named it an image, but it cannot be decoded.
        case unreadable(String)

        public var description: String {
            switch self {
            case .tooManyPixels(let width, let height):
                "The picture is \(width) x \(height) pixels; at most \(PhotoCleaner.maximumPixels / 1_000_000) megapixels are taken."
            case .unreadable(let reason): "The file says it is a picture, but it cannot be read as one (\(reason))."
            }
        }
    }

    /// How each image type is read and written again; nil: left as it is (not a photo format).
    static func formats(_ contentType: String) -> (load: String, save: String)? {
        switch contentType {
        case "image/jpeg": ("[access=sequential]", ".jpg[Q=90,strip,optimize_coding]")
        case "image/png": ("[access=sequential]", ".png[strip]")
        case "image/webp": ("[n=-1]", ".webp[Q=90,strip]")
        case "image/heic", "image/heif": ("", ".heic[Q=90,strip]")
        case "image/avif": ("", ".avif[Q=90,strip,compression=av1]")
        case "image/gif": ("[n=-1]", "")
        default: nil
        }
    }

    static let started: Bool = {
        guard vips_init("inbox") == 0 else { return false }
        // Nothing kept between uploads: each is decoded once.
        vips_cache_set_max(0)
        return true
    }()

    /// Photos cleaned at once per process, one a core: turning a 100-megapixel photo holds it
    /// whole (about 300 MB), so their number, not the clients', bounds that memory. Others wait.
    static let slots = DispatchSemaphore(value: max(1, ProcessInfo.processInfo.activeProcessorCount))

    /// `bytes` of `contentType` cleaned, or the same bytes for a type that is not a photo format.
    public static func clean(_ bytes: [UInt8], contentType: String) throws(Refusal) -> [UInt8] {
        guard let (load, save) = formats(contentType) else { return bytes }
        guard started else { throw .unreadable("libvips did not start") }
        slots.wait()
        defer { slots.signal() }
        let image = bytes.withUnsafeBytes { wristler_vips_load($0.baseAddress, $0.count, load) }
        guard let image else { throw .unreadable(lastError()) }
        defer { wristler_vips_unref(image) }
        let width = Int(vips_image_get_width(image))
        let height = Int(vips_image_get_height(image))
        guard width > 0, height > 0, width.multipliedReportingOverflow(by: height).partialValue <= maximumPixels, width <= maximumPixels / height
        else { throw .tooManyPixels(width: width, height: height) }
        if save.isEmpty { return bytes }
        var upright: OpaquePointer?
        // An animation is left as it is turned; a still picture is turned upright.
        if wristler_vips_pages(image) == 1 {
            guard wristler_vips_autorot(image, &upright) == 0, upright != nil else { throw .unreadable(lastError()) }
        }
        defer { if let upright { wristler_vips_unref(upright) } }
        var output: UnsafeMutableRawPointer?
        var length = 0
        guard wristler_vips_save(upright ?? image, save, &output, &length) == 0, let output else { throw .unreadable(lastError()) }
        defer { g_free(output) }
        return Array(UnsafeRawBufferPointer(start: output, count: length))
    }

    /// libvips' last error, its buffer then cleared.
    static func lastError() -> String {
        let text = String(cString: vips_error_buffer()).trimmingCharacters(in: .whitespacesAndNewlines)
        vips_error_clear()
        return text.isEmpty ? "libvips gave no reason" : String(text.prefix(200))
    }
}
