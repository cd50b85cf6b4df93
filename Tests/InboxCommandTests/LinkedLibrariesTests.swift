import Crypto
import Foundation
import LinkedLibraries
import Testing

/// The C libraries the binary runs on: libcurl must speak HTTP/2 over OpenSSL, and the shims that
/// reach the variadic C functions must work.
@Suite struct LinkedLibrariesTests {
    @Test func versionPrintsLibcurlWithHTTP2AndAnOpenSSLBackend() async throws {
        let result = try await InboxCLI.run(["version"])
        #expect(result.status == 0, "stderr: \(result.stderr)")
        #expect(result.stderr.isEmpty, "stderr: \(result.stderr)")
        let curl = try #require(result.stdoutLines.first { $0.hasPrefix("libcurl ") }, "stdout: \(result.stdout)")
        #expect(curl.contains("HTTP/2 yes"), "\(curl)")
        #expect(curl.contains("OpenSSL"), "\(curl)")
        #expect(result.stdoutLines.first?.hasPrefix("inbox 0.1.0 (commit ") == true, "\(result.stdout)")
        for library in ["libpq ", "OpenSSL ", "libmicrohttpd "] {
            #expect(result.stdoutLines.contains { $0.hasPrefix(library) }, "no \(library)line in \(result.stdout)")
        }
    }

    @Test func libcurlSupportsHTTP2OnOpenSSL() {
        let curl = LinkedLibraries.curl
        #expect(curl.supportsHTTP2)
        #expect(curl.sslBackend.contains("OpenSSL"), "\(curl.sslBackend)")
        #expect(curl.version != "unknown")
    }

    @Test func nghttp2AndLibmagicAreLinkedAndSayTheirVersions() {
        // 1.52 is bookworm's; the engine needs nghttp2_session_mem_send, there since 1.0.
        #expect(LinkedLibraries.nghttp2Version.hasPrefix("1."), "\(LinkedLibraries.nghttp2Version)")
        #expect(LinkedLibraries.magicVersion >= 500, "libmagic \(LinkedLibraries.magicVersion)")
    }

    @Test func libjanssonIsLinkedAndSaysItsVersion() {
        // 2.14 is bookworm's; JSON parsing needs json_object_iter_key_len, there since 2.14.
        #expect(LinkedLibraries.janssonVersion.hasPrefix("2."), "\(LinkedLibraries.janssonVersion)")
    }

    @Test func theCurlShimReachesLibcurl() {
        #expect(LinkedLibraries.curlShimWorks)
    }

    @Test func theMicrohttpdShimStartsAndStopsADaemon() {
        #expect(LinkedLibraries.microhttpdShimWorks)
    }

    @Test func openSSLOfTheCryptoModuleIsTheOneLinkedLibrariesReports() {
        #expect(OpenSSLLibrary.version.hasPrefix("OpenSSL "), "\(OpenSSLLibrary.version)")
        #expect(OpenSSLLibrary.version == LinkedLibraries.openSSLVersion)
    }

    @Test func sha256OfAbcIsTheKnownDigest() {
        #expect(Crypto.SHA256.hexDigest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test func sha256OfNothingIsTheKnownDigest() {
        #expect(Crypto.SHA256.hexDigest("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(Crypto.SHA256.digest([UInt8]()).count == 32)
    }

    @Test func sha256OfBytesMatchesSHA256OfTheirText() {
        let text = "The quick brown fox jumps over the lazy dog"
        #expect(Crypto.SHA256.hexDigest(Array(text.utf8)) == Crypto.SHA256.hexDigest(text))
        #expect(Crypto.SHA256.hexDigest(text) == "d7a8fbb307d7809469ca9abcb0082e4f8d5651e46d3cdb762d02d0bf37c9e592")
    }
}
