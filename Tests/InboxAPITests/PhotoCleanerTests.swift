import Foundation
import Testing
import Uploads

/// Photos as they are kept: upright, without their metadata, and never a picture too large to decode.
@Suite struct PhotoCleanerTests {
    /// A 64 x 48 black JPEG without metadata (libvips wrote it).
    static let jpeg = [UInt8](Data(base64Encoded: "/9j/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERXRTc4UG1RV19iZ2hnPk1xeXBkeFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/wAARCAAwAEADASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEAPwDz+iiigAooooAKKKKACiiigAooooAKKKKACiiigAooooAKKKKACiiigAooooAKKKKAP//Z")!)

    /// An EXIF segment (APP1) that says "turn me 90 degrees" (orientation 6) and where the photo
    /// was taken (GPS 46 deg 12 min N, Geneva), as a phone writes it: TIFF little-endian, IFD0 with
    /// the orientation and the GPS IFD's offset, the GPS IFD with its latitude.
    static func exif() -> [UInt8] {
        var tiff: [UInt8] = Array("II".utf8) + le16(42) + le32(8)
        // IFD0 at 8: two entries, then no next IFD.
        tiff += le16(2)
        tiff += le16(0x0112) + le16(3) + le32(1) + le16(6) + le16(0)  // Orientation, SHORT: 6
        tiff += le16(0x8825) + le16(4) + le32(1) + le32(38)  // GPSInfo, LONG: the GPS IFD at 38
        tiff += le32(0)
        // GPS IFD at 38: latitude ref "N", latitude 46/1, 12/1, 0/1 (its rationals at 68).
        tiff += le16(2)
        tiff += le16(0x0001) + le16(2) + le32(2) + Array("N".utf8) + [0, 0, 0]
        tiff += le16(0x0002) + le16(5) + le32(3) + le32(68)
        tiff += le32(0)
        tiff += le32(46) + le32(1) + le32(12) + le32(1) + le32(0) + le32(1)
        let body = Array("Exif".utf8) + [0, 0] + tiff
        return [0xFF, 0xE1] + be16(body.count + 2) + body
    }

    static func le16(_ value: Int) -> [UInt8] { [UInt8(value & 0xFF), UInt8(value >> 8 & 0xFF)] }
    static func le32(_ value: Int) -> [UInt8] { le16(value & 0xFFFF) + le16(value >> 16 & 0xFFFF) }
    static func be16(_ value: Int) -> [UInt8] { [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)] }

    /// The width and height a JPEG's frame header (SOF0 or SOF2) declares.
    static func size(ofJPEG bytes: [UInt8]) -> (width: Int, height: Int)? {
        var index = 2
        while index + 9 < bytes.count, bytes[index] == 0xFF {
            let marker = bytes[index + 1]
            let length = Int(bytes[index + 2]) << 8 | Int(bytes[index + 3])
            if marker == 0xC0 || marker == 0xC2 {
                return (Int(bytes[index + 7]) << 8 | Int(bytes[index + 8]), Int(bytes[index + 5]) << 8 | Int(bytes[index + 6]))
            }
            index += 2 + length
        }
        return nil
    }

    static func contains(_ bytes: [UInt8], _ text: String) -> Bool {
        let needle = Array(text.utf8)
        return bytes.indices.contains { bytes[$0...].starts(with: needle) }
    }

    @Test func aPhotoLosesWhereItWasTakenAndIsTurnedUpright() throws {
        let sent = Array(Self.jpeg.prefix(2)) + Self.exif() + Array(Self.jpeg.dropFirst(2))
        #expect(Self.contains(sent, "Exif"))
        #expect(Self.size(ofJPEG: sent)?.width == 64)
        let kept = try PhotoCleaner.clean(sent, contentType: "image/jpeg")
        #expect(!Self.contains(kept, "Exif"), "no EXIF segment is left")
        #expect(!kept.contains(0xE1) || !Self.contains(kept, "http://ns.adobe.com/xap"), "nor XMP")
        let size = try #require(Self.size(ofJPEG: kept))
        #expect(size.width == 48 && size.height == 64, "turned by its orientation before the tag went: \(size)")
        // Cleaning what was cleaned changes nothing more.
        #expect(try PhotoCleaner.clean(kept, contentType: "image/jpeg").count > 0)
    }

    /// A PNG that declares 30,000 x 30,000 pixels in a few bytes (its IHDR, a tiny IDAT) is refused
    /// on its header, before anything is decoded.
    @Test func aPictureTooLargeToDecodeIsRefusedOnItsHeader() throws {
        func chunk(_ type: String, _ data: [UInt8]) -> [UInt8] {
            let typed = Array(type.utf8) + data
            return Self.be32(data.count) + typed + Self.be32(Int(Self.crc32(typed)))
        }
        let header = Self.be32(30_000) + Self.be32(30_000) + [1, 0, 0, 0, 0]
        let bomb: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + chunk("IHDR", header) + chunk("IDAT", [0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01])
            + chunk("IEND", [])
        #expect(throws: PhotoCleaner.Refusal.tooManyPixels(width: 30_000, height: 30_000)) {
            try PhotoCleaner.clean(bomb, contentType: "image/png")
        }
        #expect(throws: PhotoCleaner.Refusal.self) { try PhotoCleaner.clean(Array("GIF89a-not-really".utf8), contentType: "image/gif") }
        // A video is kept as it is.
        #expect(try PhotoCleaner.clean(UploadRoutesTests.mp4, contentType: "video/mp4") == UploadRoutesTests.mp4)
        // The tests' PNG is kept as it is stored.
        #expect(try PhotoCleaner.clean(UploadRoutesTests.png, contentType: "image/png") == UploadRoutesTests.png)
    }

    static func be32(_ value: Int) -> [UInt8] { be16(value >> 16 & 0xFFFF) + be16(value & 0xFFFF) }

    /// CRC-32 (ISO 3309, PNG's), bit by bit: only for building the test's PNG.
    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 == 1 ? (crc >> 1) ^ 0xEDB8_8320 : crc >> 1 }
        }
        return ~crc
    }
}
