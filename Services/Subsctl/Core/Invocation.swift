import Foundation

/// What one run of `subsctl` reads and writes: its environment variables, its standard input and
/// its two output streams. `Subsctl.run` binds it as a task-local for the run (child tasks inherit
/// it), so runs side by side in one process, as the tests make them, each see only their own.
struct Invocation: Sendable {
    let environment: [String: String]
    let readInput: @Sendable () -> Data
    let writeOutput: @Sendable (String) -> Void
    let writeError: @Sendable (String) -> Void

    /// The run under way. Every command runs inside `Subsctl.run`, which binds it; the default,
    /// the process's own, only keeps the type total.
    @TaskLocal static var current = Invocation(
        environment: ProcessInfo.processInfo.environment, readInput: Subsctl.readStandardInput,
        writeOutput: Subsctl.writeStandardOutput, writeError: Subsctl.writeStandardError)
}
