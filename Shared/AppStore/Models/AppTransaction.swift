import Foundation

/// The decoded payload of a signed app transaction (the app purchase itself).
///
/// [AppTransaction](https://developer.apple.com/documentation/storekit/apptransaction)
public struct AppTransaction: Codable, Hashable, Sendable {
    public var rawReceiptType: String?
    /// The environment that signed it (Apple calls the field `receiptType`).
    public var receiptType: AppStoreEnvironment? {
        get { rawReceiptType.flatMap(AppStoreEnvironment.init(rawValue:)) }
        set { rawReceiptType = newValue?.rawValue }
    }
    public var appAppleId: Int64?
    public var bundleId: String?
    public var applicationVersion: String?
    public var versionExternalIdentifier: Int64?
    /// When the app transaction was created; it plays the role of `signedDate` for verification.
    public var receiptCreationDate: Date?
    public var originalPurchaseDate: Date?
    public var originalApplicationVersion: String?
    public var deviceVerification: String?
    public var rawDeviceVerificationNonce: String?
    public var deviceVerificationNonce: UUID? {
        get { rawDeviceVerificationNonce.flatMap(UUID.init(uuidString:)) }
        set { rawDeviceVerificationNonce = newValue?.uuidString.lowercased() }
    }
    public var preorderDate: Date?
    public var appTransactionId: String?
    public var rawOriginalPlatform: String?
    /// [originalPlatform](https://developer.apple.com/documentation/storekit/apptransaction/originalplatform)
    public var originalPlatform: PurchasePlatform? {
        get { rawOriginalPlatform.flatMap(PurchasePlatform.init(rawValue:)) }
        set { rawOriginalPlatform = newValue?.rawValue }
    }

    public init() {}

    enum CodingKeys: String, CodingKey {
        case rawReceiptType = "receiptType"
        case appAppleId, bundleId, applicationVersion, versionExternalIdentifier
        case receiptCreationDate, originalPurchaseDate, originalApplicationVersion, deviceVerification
        case rawDeviceVerificationNonce = "deviceVerificationNonce"
        case preorderDate, appTransactionId
        case rawOriginalPlatform = "originalPlatform"
    }
}
