import Foundation
import ServiceRuntime
import Testing

/// `X_FILE`: any setting read from a mounted secret file, as Kubernetes and Docker provide them.
@Suite struct ConfigurationFileTests {
    /// A file of its own holding `text`, removed after `body`.
    func withFile<R>(_ text: String, _ body: (String) throws -> R) throws -> R {
        let path = NSTemporaryDirectory() + "subs-setting-\(UUID().uuidString)"
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try body(path)
    }

    @Test func aSettingIsReadFromTheFileItsFileVariantNames() throws {
        try withFile("k1:c2VjcmV0\n") { path in
            let reader = ConfigurationReader(environment: ["PAYLOAD_ENCRYPTION_KEYS_FILE": path, "SHUTDOWN_GRACE_SECONDS": "7"])
            // The trailing line break an editor or `echo` adds is not part of the value.
            #expect(reader.raw("PAYLOAD_ENCRYPTION_KEYS") == "k1:c2VjcmV0")
            #expect(reader.int("SHUTDOWN_GRACE_SECONDS", default: 20) == 7)
            #expect(reader.requiredString("PAYLOAD_ENCRYPTION_KEYS", expected: "keys") == "k1:c2VjcmV0")
            #expect(reader.problems.isEmpty)
        }
        // Typed settings too: the file's text is parsed like the variable's.
        try withFile("45\r\n") { path in
            let reader = ConfigurationReader(environment: ["SHUTDOWN_GRACE_SECONDS_FILE": path])
            #expect(reader.int("SHUTDOWN_GRACE_SECONDS", default: 20, range: 1...3600) == 45)
            #expect(reader.problems.isEmpty)
        }
    }

    @Test func bothOrAnUnreadableFileAreProblemsNamingTheFileVariant() throws {
        try withFile("from the file") { path in
            let reader = ConfigurationReader(environment: ["CURSOR_SIGNING_KEY": "direct", "CURSOR_SIGNING_KEY_FILE": path])
            _ = reader.raw("CURSOR_SIGNING_KEY")
            _ = reader.raw("CURSOR_SIGNING_KEY")
            #expect(reader.problems.map(\.name) == ["CURSOR_SIGNING_KEY_FILE"])
            #expect(reader.problems.first?.expected == "CURSOR_SIGNING_KEY or CURSOR_SIGNING_KEY_FILE, not both")
        }
        let missing = ConfigurationReader(environment: ["ADMIN_TOKENS_FILE": "/nonexistent/admin-tokens"])
        #expect(missing.raw("ADMIN_TOKENS") == nil)
        #expect(missing.problems.map(\.name) == ["ADMIN_TOKENS_FILE"])
        #expect(throws: ConfigurationError.self) { try missing.validate() }
    }

    /// What subsctl and the broker's pass-through properties use: only the names asked for are
    /// resolved, so an unrelated `SSL_CERT_FILE` in the environment is left alone.
    @Test func resolvingFilesFillsOnlyTheNamesAskedFor() throws {
        try withFile("postgresql://u:p@db/subs\n") { path in
            let (resolved, problems) = ConfigurationReader.resolvingFiles(
                ["DATABASE_URL_FILE": path, "SSL_CERT_FILE": "/nonexistent/cert.pem"]
            ) { ConfigurationReader.secretSettings.contains($0) }
            #expect(problems.isEmpty)
            #expect(resolved["DATABASE_URL"] == "postgresql://u:p@db/subs")
            #expect(resolved["DATABASE_URL_FILE"] == nil)
            #expect(resolved["SSL_CERT_FILE"] == "/nonexistent/cert.pem" && resolved["SSL_CERT"] == nil)
        }
        let (_, problems) = ConfigurationReader.resolvingFiles(["KAFKA_PROPERTY_SASL_PASSWORD_FILE": "/nonexistent/p"]) {
            $0.hasPrefix("KAFKA_PROPERTY_")
        }
        #expect(problems.map(\.name) == ["KAFKA_PROPERTY_SASL_PASSWORD_FILE"])
    }
}
