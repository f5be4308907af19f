import Crypto
import Foundation

/// Why a saved test signer could not be written or read back.
public struct TestSignerStorageError: Error, CustomStringConvertible {
    public let description: String
}

extension TestAppleSigner {
    /// The files of a saved signer, PEM each: certificates readable by anyone who can enter the
    /// directory, keys by the owner only.
    enum StoredFile: String, CaseIterable {
        case root = "root.pem"
        case rootKey = "root-key.pem"
        case intermediate = "intermediate.pem"
        case intermediateKey = "intermediate-key.pem"
        case leaf = "leaf.pem"
        case leafKey = "leaf-key.pem"

        var isPrivateKey: Bool { rawValue.hasSuffix("-key.pem") }
    }

    /// Path of the root certificate of a signer saved in `directory` (for APPLE_IAP_ROOT_CERTS).
    public static func rootCertificatePath(in directory: URL) -> String {
        directory.appendingPathComponent(StoredFile.root.rawValue).path
    }

    /// Whether `directory` holds every file of a saved signer.
    public static func isSaved(in directory: URL) -> Bool {
        StoredFile.allCases.allSatisfy { FileManager.default.fileExists(atPath: directory.appendingPathComponent($0.rawValue).path) }
    }

    /// Writes keys and certificates as PEM files into `directory`, created with mode 0700. An
    /// existing directory must already be private (no group or other access): private keys are
    /// never written where others could read them, and a shared directory is not silently
    /// re-permissioned. Key files are 0600.
    public func save(to directory: URL) throws {
        let manager = FileManager.default
        var isDirectory: ObjCBool = false
        if manager.fileExists(atPath: directory.path, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw TestSignerStorageError(description: "\(directory.path) is not a directory") }
            let mode = (try manager.attributesOfItem(atPath: directory.path)[.posixPermissions] as? NSNumber)?.intValue ?? 0o777
            guard mode & 0o077 == 0 else {
                throw TestSignerStorageError(
                    description: "\(directory.path) is accessible to others (mode \(String(mode, radix: 8))): use a private directory")
            }
        } else {
            try manager.createDirectory(at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        let contents: [StoredFile: String] = [
            .root: root.pem, .rootKey: rootKey.pemPKCS8(), .intermediate: intermediate.pem,
            .intermediateKey: intermediateKey.pemPKCS8(), .leaf: leaf.pem, .leafKey: leafKey.pemPKCS8(),
        ]
        for file in StoredFile.allCases {
            let path = directory.appendingPathComponent(file.rawValue).path
            // The directory is private already, so a key is never readable by others even in the
            // moment between the file's creation and its chmod.
            guard manager.createFile(atPath: path, contents: Data(contents[file]!.utf8)) else {
                throw TestSignerStorageError(description: "cannot write \(path)")
            }
            try manager.setAttributes([.posixPermissions: file.isPrivateKey ? 0o600 : 0o644], ofItemAtPath: path)
        }
    }

    /// Reads a signer written by `save(to:)`; each key must match its certificate and the
    /// certificates must form one chain.
    public convenience init(loadingFrom directory: URL) throws {
        func read(_ file: StoredFile) throws -> String {
            let path = directory.appendingPathComponent(file.rawValue).path
            guard let data = FileManager.default.contents(atPath: path) else {
                throw TestSignerStorageError(description: "cannot read \(path)")
            }
            return String(decoding: data, as: UTF8.self)
        }
        func pair(_ certificateFile: StoredFile, _ keyFile: StoredFile) throws -> (X509Certificate, P256PrivateKey) {
            let certificate = try X509Certificate(pem: try read(certificateFile))
            let key = try P256PrivateKey(pem: try read(keyFile))
            guard certificate.publicKey?.derRepresentation == key.publicKey.derRepresentation else {
                throw TestSignerStorageError(
                    description: "\(keyFile.rawValue) is not the key of \(certificateFile.rawValue) in \(directory.path)")
            }
            return (certificate, key)
        }
        let (root, rootKey) = try pair(.root, .rootKey)
        let (intermediate, intermediateKey) = try pair(.intermediate, .intermediateKey)
        let (leaf, leafKey) = try pair(.leaf, .leafKey)
        // Files from two different signers would pair up one by one yet sign nothing that verifies.
        // Checked while the leaf was valid, so an expired leaf still loads (and can be renewed by `variant`).
        _ = try X509ChainVerifier(trustedRoots: [root]).verify(leaf: leaf, intermediates: [intermediate], at: leaf.notBefore + 1)
        self.init(
            rootKey: rootKey, intermediateKey: intermediateKey, leafKey: leafKey, root: root, intermediate: intermediate,
            leaf: leaf)
    }
}
