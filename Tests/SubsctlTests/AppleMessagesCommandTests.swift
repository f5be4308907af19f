import AppStore
import AppStoreTestSupport
import Foundation
import Postgres
import TestSupport
import Testing

/// `subsctl apple messages …` in process, against the App Store mock (Retention Messaging API)
/// and a real database for the audit rows and the catalogue.
@Suite(.timeLimit(.minutes(3)))
struct AppleMessagesCommandTests {
    static func json(_ run: SubsctlRun) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(run.stdout.utf8)) as? [String: Any], "\(run.stdout) \(run.stderr)")
    }

    static func audited(_ database: TestDatabase) async throws -> [String] {
        try await database.pool.query(
            "SELECT action || ':' || (after->>'accepted') AS row FROM audit_log WHERE action LIKE 'RETENTION_%' ORDER BY id"
        ).map { try $0.decode("row") }
    }

    /// A catalogue file of the mock's app whose monthly plan names `messages` in its rules.
    static func catalogue(_ messages: [UUID]) throws -> URL {
        let rules = messages.map { ["messageIdentifier": $0.uuidString.lowercased()] }
        let object: [String: Any] = [
            "appKey": AppleExtendAllCommandTests.bundleId,
            "products": [
                [
                    "productId": "com.example.monthly", "subscriptionGroupId": "g1", "planCode": "pro", "planLevel": 1,
                    "duration": "P1M", "creditsAmount": 10, "retentionMessages": rules,
                ]
            ],
        ]
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("catalogue-\(UUID().uuidString).json")
        try JSONSerialization.data(withJSONObject: object).write(to: url)
        return url
    }

    @Test func messagesAreUploadedListedCheckedAgainstTheCatalogueAndDeletedEachChangeAudited() async throws {
        try await AppleExtendAllCommandTests.with { mock, database, environment in
            let first = UUID()
            let second = UUID()
            let upload = [
                "apple", "messages", "upload", "--header", "Stay with Pro", "--body", "Your history stays.", "--message-id",
                first.uuidString, "--reason", "winter campaign", "--json",
            ]
            let uploaded = await SubsctlInProcess.run(upload, environment: environment)
            #expect(uploaded.status == 0, "\(uploaded.stderr)")
            let answer = try Self.json(uploaded)
            #expect(answer["messageIdentifier"] as? String == first.uuidString.lowercased() && answer["environment"] as? String == "Sandbox")
            #expect(mock.uploadedMessage(first) == UploadMessageRequestBody(header: "Stay with Pro", body: "Your history stays."))

            // Refused before anything is sent: no reason, a header past Apple's limit.
            let noReason = await SubsctlInProcess.run(Array(upload.dropLast(3)), environment: environment)
            #expect(noReason.status == 64 && noReason.stderr.contains("--reason is required"), "\(noReason.stderr)")
            let tooLong = await SubsctlInProcess.run(
                ["apple", "messages", "upload", "--header", String(repeating: "h", count: 67), "--body", "b", "--reason", "r"],
                environment: environment)
            #expect(tooLong.status == 64 && tooLong.stderr.contains("at most 66"), "\(tooLong.stderr)")
            // Apple's own refusal is shown with its code, and audited as refused.
            let again = await SubsctlInProcess.run(upload, environment: environment)
            #expect(again.status == 1 && again.stderr.contains("4090001"), "\(again.stderr)")

            let listed = await SubsctlInProcess.run(["apple", "messages", "list", "--json"], environment: environment)
            #expect(listed.status == 0, "\(listed.stderr)")
            let items = try #require(try Self.json(listed)["items"] as? [[String: Any]])
            #expect(items.map { $0["messageState"] as? String } == ["PENDING"])

            // The catalogue (applied to the database) names both messages: the second was never
            // uploaded and the first is still under review.
            let file = try Self.catalogue([first, second])
            defer { try? FileManager.default.removeItem(at: file) }
            let applied = await SubsctlInProcess.run(["catalog", "apply", file.path], environment: environment)
            #expect(applied.status == 0, "\(applied.stderr)")
            let unready = await SubsctlInProcess.run(["apple", "messages", "check"], environment: environment)
            #expect(unready.status == 1, "\(unready.stdout) \(unready.stderr)")
            #expect(unready.stdout.contains("messageIdentifier=\(first.uuidString.lowercased()) state=PENDING"), "\(unready.stdout)")
            #expect(unready.stdout.contains("messageIdentifier=\(second.uuidString.lowercased()) state=MISSING"), "\(unready.stdout)")
            #expect(unready.stdout.contains("checked=2 notReady=2"))
            mock.review(message: first, .approved)
            let secondUpload = await SubsctlInProcess.run(
                ["apple", "messages", "upload", "--header", "h", "--body", "b", "--message-id", second.uuidString, "--reason", "r"],
                environment: environment)
            #expect(secondUpload.status == 0, "\(secondUpload.stderr)")
            mock.review(message: second, .approved)
            let ready = await SubsctlInProcess.run(["apple", "messages", "check", "--json"], environment: environment)
            #expect(ready.status == 0, "\(ready.stderr)")
            #expect(try Self.json(ready)["ready"] as? Bool == true)
            // A catalogue file not applied yet is checked the same way.
            let unapplied = try Self.catalogue([UUID()])
            defer { try? FileManager.default.removeItem(at: unapplied) }
            let fromFile = await SubsctlInProcess.run(["apple", "messages", "check", "--catalogue", unapplied.path], environment: environment)
            #expect(fromFile.status == 1 && fromFile.stdout.contains("notReady=1"), "\(fromFile.stdout) \(fromFile.stderr)")

            let deleted = await SubsctlInProcess.run(
                ["apple", "messages", "delete", "--message-id", second.uuidString, "--reason", "campaign over"], environment: environment)
            #expect(deleted.status == 0, "\(deleted.stderr)")
            #expect(mock.uploadedMessage(second) == nil)
            #expect(
                try await Self.audited(database) == [
                    "RETENTION_MESSAGE_UPLOADED:true", "RETENTION_MESSAGE_UPLOADED:false", "RETENTION_MESSAGE_UPLOADED:true",
                    "RETENTION_MESSAGE_DELETED:true",
                ])
        }
    }

    @Test func defaultMessagesAndImages() async throws {
        try await AppleExtendAllCommandTests.with { mock, database, environment in
            let message = UUID()
            let id = message.uuidString.lowercased()
            let uploaded = await SubsctlInProcess.run(
                ["apple", "messages", "upload", "--header", "h", "--body", "b", "--message-id", id, "--reason", "r"], environment: environment)
            #expect(uploaded.status == 0, "\(uploaded.stderr)")
            let target = ["--product", "com.example.monthly", "--locale", "en-US"]
            let set = ["apple", "messages", "default", "set"] + target + ["--message-id", id, "--reason", "fallback"]
            let pending = await SubsctlInProcess.run(set, environment: environment)
            #expect(pending.status == 1 && pending.stderr.contains("4030017"), "an unapproved message cannot be the default: \(pending.stderr)")
            mock.review(message: message, .approved)
            let configured = await SubsctlInProcess.run(set, environment: environment)
            #expect(configured.status == 0, "\(configured.stderr)")
            #expect(mock.defaultMessage(productId: "com.example.monthly", locale: "en-US") == id)
            let shown = await SubsctlInProcess.run(["apple", "messages", "default", "show", "--json"] + target, environment: environment)
            #expect(shown.status == 0, "\(shown.stderr)")
            #expect(try Self.json(shown)["messageIdentifier"] as? String == id)
            let removed = await SubsctlInProcess.run(
                ["apple", "messages", "default", "delete"] + target + ["--reason", "r"], environment: environment)
            #expect(removed.status == 0, "\(removed.stderr)")
            let none = await SubsctlInProcess.run(["apple", "messages", "default", "show"] + target, environment: environment)
            #expect(none.status == 1 && none.stdout.contains("none configured"), "\(none.stdout)")

            let png = FileManager.default.temporaryDirectory.appendingPathComponent("image-\(UUID().uuidString).png")
            let bytes = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 1, 2, 3])
            try bytes.write(to: png)
            defer { try? FileManager.default.removeItem(at: png) }
            let image = UUID()
            let sent = await SubsctlInProcess.run(
                [
                    "apple", "messages", "image", "upload", "--file", png.path, "--size", "BULLET_POINT", "--image-id", image.uuidString, "--reason",
                    "r",
                ],
                environment: environment)
            #expect(sent.status == 0, "\(sent.stderr)")
            #expect(mock.uploadedImage(image) == Array(bytes))
            let images = await SubsctlInProcess.run(["apple", "messages", "image", "list"], environment: environment)
            #expect(images.stdout.contains("state=PENDING size=BULLET_POINT"), "\(images.stdout)")
            let text = FileManager.default.temporaryDirectory.appendingPathComponent("image-\(UUID().uuidString).png")
            try Data("not an image".utf8).write(to: text)
            defer { try? FileManager.default.removeItem(at: text) }
            let refused = await SubsctlInProcess.run(
                ["apple", "messages", "image", "upload", "--file", text.path, "--reason", "r"], environment: environment)
            #expect(refused.status == 64 && refused.stderr.contains("not a PNG"), "\(refused.stderr)")
            #expect(
                try await Self.audited(database) == [
                    "RETENTION_MESSAGE_UPLOADED:true", "RETENTION_DEFAULT_MESSAGE_SET:false", "RETENTION_DEFAULT_MESSAGE_SET:true",
                    "RETENTION_DEFAULT_MESSAGE_DELETED:true", "RETENTION_IMAGE_UPLOADED:true",
                ])
        }
    }
}
