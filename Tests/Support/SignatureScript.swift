import Foundation

/// A checker of `Tests/Signatures/` run with the project's venv Python (deploy/local/install.sh
/// installs it with `cryptography`), so a signature is verified by code other than the service's.
public enum SignatureScript {
    /// What `script` (a file name under Tests/Signatures) printed with `arguments`, trimmed.
    public static func run(_ script: String, _ arguments: [String]) throws -> String {
        let python = ServiceProcess.localState.appendingPathComponent("venv/bin/python")
        guard FileManager.default.isExecutableFile(atPath: python.path) else {
            throw MissingServiceError(variable: "\(python.path) (deploy/local/install.sh installs the venv with cryptography)")
        }
        let process = Process()
        process.executableURL = python
        process.arguments = [ServiceProcess.packageRoot.appendingPathComponent("Tests/Signatures/\(script)").path] + arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
