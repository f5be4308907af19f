import AppStore
import AppStoreTestSupport
import Foundation
import TestSupport
import Testing

/// The Retention Messaging API's message, image and default-message endpoints, against the mock
/// speaking Apple's paths, fields and error codes.
@Suite struct RetentionMessagingClientTests {
    /// The smallest PNG signature plus filler: the mock, like Apple, looks at what the bytes are.
    static let png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A] + Array(repeating: 0, count: 24))

    @Test func aMessageIsUploadedListedWithItsReviewStateAndDeleted() async throws {
        try await APIFixture.with { fixture in
            let client = fixture.client()
            let identifier = UUID()
            let id = identifier.uuidString.lowercased()
            let message = UploadMessageRequestBody(header: "Stay with Pro", body: "Your exports and history stay with you.")
            try await client.uploadMessage(messageIdentifier: identifier, message)
            let sent = try #require(fixture.mock.requests.last)
            #expect(sent.method == "PUT" && sent.path == "/inApps/v1/messaging/message/\(id)")
            #expect(sent.contentType == "application/json")
            let body = try #require(try JSONSerialization.jsonObject(with: Data(sent.body)) as? [String: Any])
            #expect(body.keys.sorted() == ["body", "header"], "absent options are left out: \(body)")
            #expect(fixture.mock.uploadedMessage(identifier) == message)

            var listed = try await client.getMessageList()
            #expect(listed.messageIdentifiers == [GetMessageListResponseItem(messageIdentifier: id, messageState: .pending)])
            #expect(fixture.mock.requests.last?.path == "/inApps/v1/messaging/message/list")
            fixture.mock.review(message: identifier, .approved)
            listed = try await client.getMessageList()
            #expect(listed.messageIdentifiers?.first?.messageState == .approved)

            let twice = await #expect(throws: AppStoreAPIError.self) { try await client.uploadMessage(messageIdentifier: identifier, message) }
            #expect(twice?.apiError == .messageAlreadyExists && twice?.statusCode == 409)
            try await client.deleteMessage(messageIdentifier: identifier)
            #expect(fixture.mock.requests.last?.method == "DELETE")
            let left = try await client.getMessageList().messageIdentifiers
            #expect(left == [])
            let gone = await #expect(throws: AppStoreAPIError.self) { try await client.deleteMessage(messageIdentifier: identifier) }
            #expect(gone?.apiError == .messageNotFound && gone?.statusCode == 404)
        }
    }

    @Test func appleLimitsOnAMessageComeBackAsItsErrorCodes() async throws {
        try await APIFixture.with { fixture in
            let client = fixture.client()
            let cases: [(UploadMessageRequestBody, AppStoreAPIErrorCode)] = [
                (UploadMessageRequestBody(header: String(repeating: "h", count: 67), body: "b"), .headerTooLong),
                (UploadMessageRequestBody(header: "h", body: String(repeating: "b", count: 145)), .bodyTooLong),
                (
                    UploadMessageRequestBody(
                        header: "h", body: "b", image: UploadMessageImage(imageIdentifier: UUID(), altText: String(repeating: "a", count: 151))),
                    .altTextTooLong
                ),
                (UploadMessageRequestBody(header: "h", body: "b", headerPosition: .aboveImage), .aboveImageRequiresAnImage),
                (
                    UploadMessageRequestBody(
                        header: "h", body: "b",
                        bulletPoints: Array(repeating: RetentionBulletPoint(text: "t", imageIdentifier: UUID(), altText: "a"), count: 6)),
                    .tooManyBulletPoints
                ),
            ]
            for (message, code) in cases {
                let refused = await #expect(throws: AppStoreAPIError.self) { try await client.uploadMessage(messageIdentifier: UUID(), message) }
                #expect(refused?.apiError == code && refused?.statusCode == 400 && refused?.isRetryable == false, "\(code)")
            }
            let kept = try await client.getMessageList().messageIdentifiers
            #expect(kept == [], "no refused message is kept")
        }
    }

    @Test func anImageIsSentAsPNGBytesWithItsSize() async throws {
        try await APIFixture.with { fixture in
            let client = fixture.client()
            let identifier = UUID()
            try await client.uploadImage(imageIdentifier: identifier, png: Self.png, imageSize: .bulletPoint)
            let sent = try #require(fixture.mock.requests.last)
            #expect(sent.method == "PUT" && sent.path == "/inApps/v1/messaging/image/\(identifier.uuidString.lowercased())")
            #expect(sent.contentType == "image/png" && sent.query == ["imageSize": "BULLET_POINT"])
            #expect(fixture.mock.uploadedImage(identifier) == Array(Self.png))
            let images = try await client.getImageList().imageIdentifiers ?? []
            #expect(images.map(\.imageSize) == ["BULLET_POINT"] && images.map(\.imageState) == [.pending])

            let jpeg = await #expect(throws: AppStoreAPIError.self) {
                try await client.uploadImage(imageIdentifier: UUID(), png: Data([0xFF, 0xD8, 0xFF, 0xE0]))
            }
            #expect(jpeg?.apiError == .invalidImage)
            // An image a message shows cannot be deleted until the message is.
            let message = UUID()
            try await client.uploadMessage(
                messageIdentifier: message,
                UploadMessageRequestBody(header: "h", body: "b", image: UploadMessageImage(imageIdentifier: identifier, altText: "a")))
            let inUse = await #expect(throws: AppStoreAPIError.self) { try await client.deleteImage(imageIdentifier: identifier) }
            #expect(inUse?.apiError == .imageInUse)
            try await client.deleteMessage(messageIdentifier: message)
            try await client.deleteImage(imageIdentifier: identifier)
            let remaining = try await client.getImageList().imageIdentifiers
            #expect(remaining == [])
        }
    }

    @Test func aDefaultMessageMustBeApprovedAndIsKeptPerProductAndLocale() async throws {
        try await APIFixture.with { fixture in
            let client = fixture.client()
            let identifier = UUID()
            let id = identifier.uuidString.lowercased()
            let missing = await #expect(throws: AppStoreAPIError.self) {
                try await client.configureDefaultMessage(productId: "com.example.monthly", locale: "en-US", messageIdentifier: identifier)
            }
            #expect(missing?.apiError == .messageNotFound)
            try await client.uploadMessage(messageIdentifier: identifier, UploadMessageRequestBody(header: "h", body: "b"))
            let pending = await #expect(throws: AppStoreAPIError.self) {
                try await client.configureDefaultMessage(productId: "com.example.monthly", locale: "en-US", messageIdentifier: identifier)
            }
            #expect(pending?.apiError == .messageNotApproved && pending?.statusCode == 403)
            fixture.mock.review(message: identifier, .approved)
            try await client.configureDefaultMessage(productId: "com.example.monthly", locale: "en-US", messageIdentifier: identifier)
            let sent = try #require(fixture.mock.requests.last)
            #expect(sent.method == "PUT" && sent.path == "/inApps/v1/messaging/default/com.example.monthly/en-US")
            #expect(try JSONSerialization.jsonObject(with: Data(sent.body)) as? [String: String] == ["messageIdentifier": id])
            let configured = try await client.getDefaultMessage(productId: "com.example.monthly", locale: "en-US")
            #expect(configured.messageIdentifier == id)
            let otherLocale = await #expect(throws: AppStoreAPIError.self) {
                try await client.getDefaultMessage(productId: "com.example.monthly", locale: "de-DE")
            }
            #expect(otherLocale?.apiError == .defaultMessageNotFound)
            try await client.deleteDefaultMessage(productId: "com.example.monthly", locale: "en-US")
            #expect(fixture.mock.defaultMessage(productId: "com.example.monthly", locale: "en-US") == nil)
            let invalid = await #expect(throws: AppStoreAPIError.self) {
                try await client.getDefaultMessage(productId: "com.example.monthly", locale: "english")
            }
            #expect(invalid?.apiError == .invalidLocale)
        }
    }
}
