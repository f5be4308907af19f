/// The form of Apple's transaction ids (`transactionId`, `originalTransactionId`): decimal strings.
///
/// The one check every entry point uses (client uploads, imports, the admin chain actions, the
/// worker): an id in another form never came from the App Store, and letting it through would carry
/// markup or path characters into pages, logs and App Store Server API paths.
public enum AppleTransactionID {
    /// The longest id accepted. Apple's are 15 to 16 digits today; the admin chain actions always
    /// took up to 64 characters, so no chain they could name is cut off.
    public static let maxLength = 64

    /// True for 1 to `maxLength` ASCII digits.
    public static func isValid(_ id: String) -> Bool {
        (1...maxLength).contains(id.utf8.count) && id.utf8.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
    }
}
