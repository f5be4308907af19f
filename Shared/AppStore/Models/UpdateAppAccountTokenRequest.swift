import Foundation

/// Sets the app account token of a purchase made outside the app's own account flow.
///
/// [UpdateAppAccountTokenRequest](https://developer.apple.com/documentation/appstoreserverapi/updateappaccounttokenrequest)
public struct UpdateAppAccountTokenRequest: Codable, Hashable, Sendable {
    public var appAccountToken: UUID

    public init(appAccountToken: UUID) { self.appAccountToken = appAccountToken }
}
