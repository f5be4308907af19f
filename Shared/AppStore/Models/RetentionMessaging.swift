import Foundation

/// The approval state of an uploaded retention message or image, as Apple reports it: an open
/// set, so a state Apple adds later is kept as sent.
///
/// [messageState](https://developer.apple.com/documentation/retentionmessaging/messagestate),
/// [imageState](https://developer.apple.com/documentation/retentionmessaging/imagestate)
public struct RetentionReviewState: RawRepresentable, Codable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(from decoder: any Decoder) throws { rawValue = try decoder.singleValueContainer().decode(String.self) }
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    /// Uploaded, waiting for Apple's review.
    public static let pending = Self(rawValue: "PENDING")
    /// Apple shows it; only an approved message (and image) may be answered or be a default.
    public static let approved = Self(rawValue: "APPROVED")
    public static let rejected = Self(rawValue: "REJECTED")

    public var description: String { rawValue }
}

/// Where an uploaded image may appear: above a message's body, or as a bullet point's icon.
///
/// [imageSize](https://developer.apple.com/documentation/retentionmessaging/imagesize)
public enum RetentionImageSize: String, Codable, Hashable, Sendable, CaseIterable {
    case fullSize = "FULL_SIZE"
    case bulletPoint = "BULLET_POINT"
}

/// Where a message's header goes.
///
/// [headerPosition](https://developer.apple.com/documentation/retentionmessaging/headerposition)
public enum RetentionHeaderPosition: String, Codable, Hashable, Sendable, CaseIterable {
    case aboveBody = "ABOVE_BODY"
    case aboveImage = "ABOVE_IMAGE"
}

/// An uploaded image shown with a message, with its alternative text (at most 150 characters).
///
/// [UploadMessageImage](https://developer.apple.com/documentation/retentionmessaging/uploadmessageimage)
public struct UploadMessageImage: Codable, Hashable, Sendable {
    /// The image's UUID (lowercase), as given to Upload Image.
    public var imageIdentifier: String
    public var altText: String

    public init(imageIdentifier: UUID, altText: String) {
        self.imageIdentifier = imageIdentifier.uuidString.lowercased()
        self.altText = altText
    }
}

/// One bullet point of a message: its text (at most 66 characters) and its icon image.
///
/// [BulletPoint](https://developer.apple.com/documentation/retentionmessaging/bulletpoint)
public struct RetentionBulletPoint: Codable, Hashable, Sendable {
    public var text: String
    public var imageIdentifier: String
    public var altText: String

    public init(text: String, imageIdentifier: UUID, altText: String) {
        self.text = text
        self.imageIdentifier = imageIdentifier.uuidString.lowercased()
        self.altText = altText
    }
}

/// The text of a retention message: a header (at most 66 characters), a body (at most 144),
/// optionally an image and up to five bullet points.
///
/// [UploadMessageRequestBody](https://developer.apple.com/documentation/retentionmessaging/uploadmessagerequestbody)
public struct UploadMessageRequestBody: Codable, Hashable, Sendable {
    public var header: String
    public var body: String
    public var image: UploadMessageImage?
    public var headerPosition: RetentionHeaderPosition?
    public var bulletPoints: [RetentionBulletPoint]?

    /// Apple's documented limits, in characters.
    public static let maxHeaderLength = 66
    public static let maxBodyLength = 144
    public static let maxAltTextLength = 150
    public static let maxBulletPoints = 5
    public static let maxBulletPointTextLength = 66

    public init(
        header: String, body: String, image: UploadMessageImage? = nil, headerPosition: RetentionHeaderPosition? = nil,
        bulletPoints: [RetentionBulletPoint]? = nil
    ) {
        self.header = header
        self.body = body
        self.image = image
        self.headerPosition = headerPosition
        self.bulletPoints = bulletPoints
    }
}

/// Every uploaded message with its approval state.
///
/// [GetMessageListResponse](https://developer.apple.com/documentation/retentionmessaging/getmessagelistresponse)
public struct GetMessageListResponse: Codable, Hashable, Sendable {
    public var messageIdentifiers: [GetMessageListResponseItem]?

    public init(messageIdentifiers: [GetMessageListResponseItem]? = nil) { self.messageIdentifiers = messageIdentifiers }
}

/// One uploaded message and its state.
///
/// [GetMessageListResponseItem](https://developer.apple.com/documentation/retentionmessaging/getmessagelistresponseitem)
public struct GetMessageListResponseItem: Codable, Hashable, Sendable {
    public var messageIdentifier: String?
    public var messageState: RetentionReviewState?

    public init(messageIdentifier: String? = nil, messageState: RetentionReviewState? = nil) {
        self.messageIdentifier = messageIdentifier
        self.messageState = messageState
    }
}

/// Every uploaded image with its approval state and size.
///
/// [GetImageListResponse](https://developer.apple.com/documentation/retentionmessaging/getimagelistresponse)
public struct GetImageListResponse: Codable, Hashable, Sendable {
    public var imageIdentifiers: [GetImageListResponseItem]?

    public init(imageIdentifiers: [GetImageListResponseItem]? = nil) { self.imageIdentifiers = imageIdentifiers }
}

/// One uploaded image, its state and size.
///
/// [GetImageListResponseItem](https://developer.apple.com/documentation/retentionmessaging/getimagelistresponseitem)
public struct GetImageListResponseItem: Codable, Hashable, Sendable {
    public var imageIdentifier: String?
    public var imageState: RetentionReviewState?
    /// Kept as sent (`FULL_SIZE`, `BULLET_POINT`).
    public var imageSize: String?

    public init(imageIdentifier: String? = nil, imageState: RetentionReviewState? = nil, imageSize: String? = nil) {
        self.imageIdentifier = imageIdentifier
        self.imageState = imageState
        self.imageSize = imageSize
    }
}

/// The message Apple shows for a product and locale when our endpoint gives no usable answer.
///
/// [DefaultConfigurationRequest](https://developer.apple.com/documentation/retentionmessaging/defaultconfigurationrequest),
/// [DefaultConfigurationResponse](https://developer.apple.com/documentation/retentionmessaging/defaultconfigurationresponse)
public struct DefaultConfiguration: Codable, Hashable, Sendable {
    public var messageIdentifier: String?

    public init(messageIdentifier: UUID) { self.messageIdentifier = messageIdentifier.uuidString.lowercased() }
    public init(rawMessageIdentifier: String?) { self.messageIdentifier = rawMessageIdentifier }
}
