/// The server environment that signed the data.
///
/// [environment](https://developer.apple.com/documentation/appstoreserverapi/environment)
public enum AppStoreEnvironment: String, Codable, Hashable, Sendable, CaseIterable {
    case sandbox = "Sandbox"
    case production = "Production"
    /// Signed locally by Xcode's StoreKit testing; never chains to an Apple root.
    case xcode = "Xcode"
    /// Signed by StoreKit Test in unit tests; never chains to an Apple root.
    case localTesting = "LocalTesting"

    /// Environments whose data is signed locally rather than by the App Store.
    public var isLocal: Bool { self == .xcode || self == .localTesting }
}
