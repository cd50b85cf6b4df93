import Encodings
import Foundation
import Identity
import InboxAPI
import InboxTesting
import PasswordHashing
import Testing

/// The time a refused sign-in takes. A timed suite: `make test` runs it on its own after the
/// others (Makefile, TIMED_SUITES), so that it times the sign-in rather than a machine busy with
/// every other suite, and so that its hashes do not slow the other timed tests down.
@Suite struct SignInTimingTests {
    /// As far as a test on a shared machine can measure it: an unknown address costs a whole hash,
    /// as a wrong password does, rather than being answered at once.
    @Test func anUnknownAddressTakesAsLongAsAWrongPassword() async throws {
        try await IdentityHarness.with(configure: { configuration in
            configuration.passwordCost = .init(memoryKiB: 16 * 1024, iterations: 2)
            configuration.signInPerAddress = AttemptLimit(10_000, per: 1)
            configuration.signInPerAccount = AttemptLimit(10_000, per: 1)
        }) { identity in
            try await identity.account("anna@example.com")
            var known: [Double] = []
            var unknown: [Double] = []
            for round in 0..<12 {
                for target in [round % 2 == 0, round % 2 != 0] {
                    let started = ContinuousClock.now
                    let reply = try await identity.password(target ? "anna@example.com" : "nobody-\(round)@example.com", "wrong")
                    #expect(reply.status == 400)
                    let seconds = (ContinuousClock.now - started).inSeconds
                    if target { known.append(seconds) } else { unknown.append(seconds) }
                }
            }
            let started = ContinuousClock.now
            for _ in 0..<5 { _ = try Argon2id.hash("x", cost: .init(memoryKiB: 16 * 1024, iterations: 2)) }
            let hash = (ContinuousClock.now - started).inSeconds / 5
            func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
            #expect(median(unknown) >= 0.7 * hash, "unknown \(median(unknown)) s, a hash \(hash) s")
            #expect(median(unknown) / median(known) > 0.6 && median(unknown) / median(known) < 1.6, "known \(known), unknown \(unknown)")
        }
    }
}
