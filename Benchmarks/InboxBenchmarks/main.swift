// inbox-bench: throughput benchmarks of the inbox tier against a real PostgreSQL.
//
//   inbox-bench [append] [--rounds N] [--scale X] [--json PATH]
//   inbox-bench release [--baseline PATH] [--baseline-binary PATH] [--report DIR] [--write-baseline PATH]
//   inbox-bench gate --baseline-binary PATH [--paths NAME,NAME]
//
// See docs/benchmarks.md for what each figure measures and the figures of the last run.

import Foundation

let exitCode = await BenchmarkCommand.run(arguments: Array(CommandLine.arguments.dropFirst()))
exit(exitCode)
