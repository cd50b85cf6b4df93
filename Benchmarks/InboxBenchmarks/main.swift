import Foundation
if ProcessInfo.processInfo.environment["IBX_PROBE"] != nil { try await Probe.run(); exit(0) }
let exitCode = await BenchmarkCommand.run(arguments: Array(CommandLine.arguments.dropFirst()))
exit(exitCode)
