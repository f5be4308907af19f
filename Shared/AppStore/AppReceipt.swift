import Crypto
import Foundation
import ServiceRuntime

/// What a StoreKit 1 app receipt's payload says (only after `AppReceiptVerifier` has checked
/// its signature is any of it trusted). The attributes the import needs; others are skipped.
public struct AppReceipt: Sendable, Hashable {
    /// Attribute 0 as written: `Production`, `ProductionSandbox`, `Xcode`, …
    public var receiptType: String?
    /// The environment `receiptType` names, nil for a type Apple does not document.
    public var environment: AppStoreEnvironment? { receiptType.flatMap(Self.environment(receiptType:)) }
    /// Attribute 2.
    public var bundleId: String
    /// Attribute 3 (CFBundleVersion of the app that asked for the receipt).
    public var applicationVersion: String?
    /// Attribute 12: when the receipt was made; its chain is checked at this date.
    public var creationDate: Date?
    /// Attribute 17, one per purchase, in the receipt's order.
    public var inAppPurchases: [InAppPurchaseReceipt]

    public init(
        receiptType: String?, bundleId: String, applicationVersion: String?, creationDate: Date?,
        inAppPurchases: [InAppPurchaseReceipt]
    ) {
        self.receiptType = receiptType
        self.bundleId = bundleId
        self.applicationVersion = applicationVersion
        self.creationDate = creationDate
        self.inAppPurchases = inAppPurchases
    }

    /// The transaction id Apple's libraries extract from an app receipt (their
    /// `ReceiptUtility.extractTransactionIdFromAppReceipt` and the validating
    /// `AppReceiptVerifier.verifyAndExtractTransactionId`): the transaction id (1703) of the first
    /// in-app purchase, in receipt order, that has one, or else that purchase's original
    /// transaction id (1705); nil when the receipt holds no purchase with either. (The Java and
    /// Python libraries take this first one; the Swift ReceiptUtility keeps the last it meets.
    /// Any id of a chain serves Get Transaction History, which returns the whole chain.)
    public var transactionId: String? {
        for purchase in inAppPurchases {
            if let id = purchase.transactionId ?? purchase.originalTransactionId { return id }
        }
        return nil
    }

    /// Apple's receipt types by environment (VPP is volume purchase, same stores).
    static func environment(receiptType: String) -> AppStoreEnvironment? {
        switch receiptType {
        case "Production", "ProductionVPP": .production
        case "ProductionSandbox", "ProductionVPPSandbox": .sandbox
        case "Xcode": .xcode
        case "LocalTesting": .localTesting
        default: nil
        }
    }
}

/// One in-app purchase record of an app receipt (the attributes the import needs).
public struct InAppPurchaseReceipt: Sendable, Hashable {
    /// Attribute 1702.
    public var productId: String?
    /// Attribute 1703.
    public var transactionId: String?
    /// Attribute 1705.
    public var originalTransactionId: String?

    public init(productId: String?, transactionId: String?, originalTransactionId: String?) {
        self.productId = productId
        self.transactionId = transactionId
        self.originalTransactionId = originalTransactionId
    }
}

extension AppReceipt {
    static let receiptTypeAttribute: Int64 = 0
    static let bundleIdAttribute: Int64 = 2
    static let applicationVersionAttribute: Int64 = 3
    static let creationDateAttribute: Int64 = 12
    static let inAppPurchaseAttribute: Int64 = 17
    static let productIdAttribute: Int64 = 1702
    static let transactionIdAttribute: Int64 = 1703
    static let originalTransactionIdAttribute: Int64 = 1705

    /// Parses the signed payload: a SET of SEQUENCE { type INTEGER, version INTEGER, value
    /// OCTET STRING }, where the value holds one DER element. Unknown types are skipped; a
    /// known one that repeats or does not decode is refused (never guessed at).
    init(payload: [UInt8]) throws(AppReceiptError) {
        var values = try Self.attributes(payload, "receipt payload")
        guard let bundleId = try Self.single(Self.bundleIdAttribute, &values, Self.string) else {
            throw AppReceiptError(.invalid, "the receipt has no bundle id (attribute 2)")
        }
        self.bundleId = bundleId
        receiptType = try Self.single(Self.receiptTypeAttribute, &values, Self.string)
        applicationVersion = try Self.single(Self.applicationVersionAttribute, &values, Self.string)
        // Apple writes an empty string for a date it does not set.
        creationDate = try Self.single(Self.creationDateAttribute, &values, Self.date) ?? nil
        var purchases: [InAppPurchaseReceipt] = []
        for value in values[Self.inAppPurchaseAttribute] ?? [] {
            var fields = try Self.attributes(try Self.octets(value), "in-app purchase")
            purchases.append(
                InAppPurchaseReceipt(
                    productId: try Self.single(Self.productIdAttribute, &fields, Self.string),
                    transactionId: try Self.single(Self.transactionIdAttribute, &fields, Self.string),
                    originalTransactionId: try Self.single(Self.originalTransactionIdAttribute, &fields, Self.string)))
        }
        inAppPurchases = purchases
    }

    /// The values (OCTET STRING elements) of a SET of attributes, by type, in order.
    private static func attributes(_ bytes: [UInt8], _ what: String) throws(AppReceiptError) -> [Int64: [BERElement]] {
        do throws(CryptoError) {
            var set = try BERElement(parsing: bytes[...])
            // Xcode wraps its payload in one more OCTET STRING (Apple's libraries unwrap it too).
            if set.isUniversal(BERElement.octetStringTag) { set = try BERElement(parsing: try set.octets()[...]) }
            guard set.isUniversal(BERElement.setTag), set.isConstructed else {
                throw CryptoError(.invalidInput, "not a SET")
            }
            var values: [Int64: [BERElement]] = [:]
            for attribute in try set.children() {
                let fields = attribute.isUniversal(BERElement.sequenceTag) ? try attribute.children() : []
                guard fields.count == 3, fields[2].isUniversal(BERElement.octetStringTag) else {
                    throw CryptoError(.invalidInput, "an attribute is not SEQUENCE { INTEGER, INTEGER, OCTET STRING }")
                }
                _ = try fields[1].integer()
                values[try fields[0].integer(), default: []].append(fields[2])
            }
            return values
        } catch {
            throw AppReceiptError(.invalid, "the \(what) is not an attribute set: \(error.reason)")
        }
    }

    /// The decoded value of attribute `type`, nil when absent; refused when it repeats.
    private static func single<T>(
        _ type: Int64, _ values: inout [Int64: [BERElement]], _ decode: (BERElement) throws(CryptoError) -> T
    ) throws(AppReceiptError) -> T? {
        guard let found = values.removeValue(forKey: type) else { return nil }
        guard found.count == 1 else { throw AppReceiptError(.invalid, "attribute \(type) appears \(found.count) times") }
        do throws(CryptoError) {
            return try decode(try BERElement(parsing: try found[0].octets()[...]))
        } catch {
            throw AppReceiptError(.invalid, "attribute \(type) does not decode: \(error.reason)")
        }
    }

    private static func octets(_ value: BERElement) throws(AppReceiptError) -> [UInt8] {
        do throws(CryptoError) { return try value.octets() } catch { throw AppReceiptError(.invalid, error.reason) }
    }

    private static func string(_ element: BERElement) throws(CryptoError) -> String { try element.string() }

    /// An RFC 3339 date in an IA5String; empty means not set.
    private static func date(_ element: BERElement) throws(CryptoError) -> Date? {
        let text = try element.string()
        if text.isEmpty { return nil }
        guard let date = RFC3339.date(from: text) else { throw CryptoError(.invalidInput, "'\(text)' is not an RFC 3339 date") }
        return date
    }
}
