import AppStore
import AppStoreTestSupport
import Crypto
import Foundation
import Testing

/// The test signer saved to a directory and loaded back (the local demo keeps one across runs).
@Suite struct TestSignerStorageTests {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("signer-\(UUID().uuidString)")

    func mode(_ path: String) throws -> Int {
        try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? NSNumber).intValue & 0o777
    }

    @Test func aSavedSignerLoadsBackAndSignsWhatTheOriginalRootTrusts() async throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let original = try TestAppleSigner()
        #expect(!TestAppleSigner.isSaved(in: directory))
        try original.save(to: directory)
        #expect(TestAppleSigner.isSaved(in: directory))

        let loaded = try TestAppleSigner(loadingFrom: directory)
        #expect(loaded.x5c == original.x5c)
        #expect(loaded.leafKey.publicKey.derRepresentation == original.leafKey.publicKey.derRepresentation)
        let transaction = TestPayloads.transaction(bundleId: "com.example.app", environment: .sandbox)
        #expect(try await makeVerifier(trusting: original).verifyTransaction(try loaded.sign(transaction)) == transaction)
        // The root file on its own is what APPLE_IAP_ROOT_CERTS points at.
        let roots = try X509Certificate.loadAll(path: TestAppleSigner.rootCertificatePath(in: directory))
        #expect(roots == [original.root])
    }

    @Test func theDirectoryIsPrivateAndKeysAreOwnerOnly() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let nested = directory.appendingPathComponent("secrets/signer")
        try TestAppleSigner().save(to: nested)
        #expect(try mode(nested.path) == 0o700)
        for key in ["root-key.pem", "intermediate-key.pem", "leaf-key.pem"] {
            #expect(try mode(nested.appendingPathComponent(key).path) == 0o600, "\(key)")
        }
        #expect(try mode(TestAppleSigner.rootCertificatePath(in: nested)) == 0o644)
    }

    @Test func anExistingDirectoryMustBePrivateAndIsOverwrittenThen() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        #expect(throws: TestSignerStorageError.self) { try TestAppleSigner().save(to: directory) }
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("leaf-key.pem").path))

        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: directory.path)
        try TestAppleSigner().save(to: directory)
        let second = try TestAppleSigner()
        try second.save(to: directory)
        #expect(try TestAppleSigner(loadingFrom: directory).x5c == second.x5c)
    }

    @Test func mixedOrMissingFilesAreRefused() throws {
        defer { try? FileManager.default.removeItem(at: directory) }
        let other = directory.appendingPathComponent("other")
        let mine = directory.appendingPathComponent("mine")
        try TestAppleSigner().save(to: other)
        try TestAppleSigner().save(to: mine)
        func copy(_ name: String) throws {
            let target = mine.appendingPathComponent(name)
            try FileManager.default.removeItem(at: target)
            try FileManager.default.copyItem(at: other.appendingPathComponent(name), to: target)
        }

        // A leaf key that is not the leaf certificate's.
        try copy("leaf-key.pem")
        #expect(throws: TestSignerStorageError.self) { try TestAppleSigner(loadingFrom: mine) }
        // Leaf and its key from another signer: each pair matches, the chain does not.
        try copy("leaf.pem")
        #expect(throws: CryptoError.self) { try TestAppleSigner(loadingFrom: mine) }

        try FileManager.default.removeItem(at: mine.appendingPathComponent("intermediate.pem"))
        #expect(!TestAppleSigner.isSaved(in: mine))
        let error = try #require(throws: TestSignerStorageError.self) { try TestAppleSigner(loadingFrom: mine) }
        #expect(error.description.contains("intermediate.pem"))
    }
}
