import Crypto
import Encodings
import Testing

/// `HMAC.mac` against the test vectors of RFC 4231 (HMAC-SHA256) and RFC 2202 (HMAC-SHA1), and an
/// empty key, which RFC 2104 allows.
@Suite struct HMACTests {
    @Test(arguments: [
        (HMAC.Hash.sha256, [UInt8](repeating: 0x0B, count: 20), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (.sha256, Array("Jefe".utf8), "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        (
            .sha256, [UInt8](repeating: 0xAA, count: 131), "Test Using Larger Than Block-Size Key - Hash Key First",
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        ),
        (.sha256, [], "", "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad"),
        (.sha1, [UInt8](repeating: 0x0B, count: 20), "Hi There", "b617318655057264e28bc0b6fb378c8ef146be00"),
    ])
    func matchesThePublishedVectors(hash: HMAC.Hash, key: [UInt8], data: String, expected: String) {
        #expect(Hex.encode(HMAC.mac(hash, key: key, data: Array(data.utf8))) == expected)
    }

    @Test func concurrentMACsFromTheSharedTemplateAgree() async {
        let expected = Hex.encode(HMAC.mac(.sha256, key: Array("Jefe".utf8), data: Array("what do ya want for nothing?".utf8)))
        let results = await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    (0..<500).allSatisfy { _ in
                        Hex.encode(HMAC.mac(.sha256, key: Array("Jefe".utf8), data: Array("what do ya want for nothing?".utf8))) == expected
                    }
                }
            }
            return await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results == Array(repeating: true, count: 8))
    }
}
