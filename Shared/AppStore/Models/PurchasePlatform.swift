/// The platform on which the customer originally bought the app.
///
/// [originalPlatform](https://developer.apple.com/documentation/storekit/apptransaction/originalplatform)
public enum PurchasePlatform: String, Codable, Hashable, Sendable, CaseIterable {
    case iOS = "iOS"
    case macOS = "macOS"
    case tvOS = "tvOS"
    case visionOS = "visionOS"
}
