import AppStore
import Crypto
import Foundation
import Testing

/// Apple's genuine signed samples in `<repo>/../shared/appstore-vectors` (third-party data, read
/// in place and never copied into the repository). A clone without that folder skips the tests
/// that need it, saying so; CI has it.
enum AppleVectors {
    /// The folder: `<repo>/../shared/appstore-vectors`, or the same path above a git worktree
    /// nested deeper than the main checkout (first ancestor that has it).
    static let directory: URL? = {
        var ancestor = URL(fileURLWithPath: #filePath).deletingLastPathComponent()  // Tests/AppStoreTests
            .deletingLastPathComponent().deletingLastPathComponent()  // repository root
        while ancestor.path != "/" {
            ancestor = ancestor.deletingLastPathComponent()
            let candidate = ancestor.appendingPathComponent("shared/appstore-vectors")
            if FileManager.default.fileExists(atPath: candidate.appendingPathComponent("manifest.json").path) {
                return candidate
            }
        }
        return nil
    }()

    static let isPresent = directory != nil
    static let skipComment: Comment =
        "SKIPPED: ../shared/appstore-vectors (Apple's signed samples) is absent from this checkout"

    /// One line of manifest.json, reduced to what the tests compare.
    struct Entry: Decodable, Sendable, CustomTestStringConvertible {
        let file: String
        let group: String
        let expect: String
        let kind: String?
        let notificationType: String?
        let subtype: String?
        let notificationUUID: String?
        let environment: String?
        let bundleId: String?
        let appAppleId: Int64?
        let signedDate: String?
        let effectiveDate: String?
        let transactionId: String?
        let originalTransactionId: String?
        let productId: String?
        let type: String?
        let parent: String?
        let request_body_file: String?

        var testDescription: String { file }
        var folder: String { String(file.split(separator: "/")[0]) }
    }

    private struct Manifest: Decodable { let files: [Entry] }

    static let entries: [Entry] = {
        guard let directory, let data = FileManager.default.contents(atPath: directory.appendingPathComponent("manifest.json").path)
        else { return [] }
        return (try? JSONDecoder().decode(Manifest.self, from: data).files) ?? []
    }()

    static func entries(folders: Set<String>, expect: String? = nil) -> [Entry] {
        entries.filter { folders.contains($0.folder) && (expect == nil || $0.expect == expect) }
    }

    static func entry(_ file: String) -> Entry? { entries.first { $0.file == file } }

    static func text(_ file: String) throws -> String {
        let directory = try #require(directory)
        let data = try #require(FileManager.default.contents(atPath: directory.appendingPathComponent(file).path))
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func root(_ name: String) throws -> X509Certificate {
        let directory = try #require(directory)
        return try #require(try X509Certificate.loadAll(path: directory.appendingPathComponent("roots/\(name)").path).first)
    }
}
