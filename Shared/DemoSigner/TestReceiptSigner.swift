import AppStore
import COpenSSL
import Crypto
import Foundation

/// PKCS#7 SignedData made by OpenSSL's CMS_sign, for test receipts only.
public enum TestPKCS7 {
    /// How the structure is written.
    public enum Encoding: String, Sendable, CaseIterable {
        /// Definite lengths throughout.
        case der
        /// OpenSSL's streaming output (i2d_CMS_bio_stream): indefinite lengths and the content
        /// in a constructed OCTET STRING, as Xcode writes its receipts.
        case berIndefinite
    }

    /// `content` signed by `key` (the key of `certificate`), carrying `certificate` and `chain`.
    public static func sign(
        _ content: [UInt8], certificate: X509Certificate, key: P256PrivateKey, chain: [X509Certificate], encoding: Encoding
    ) throws(CryptoError) -> [UInt8] {
        guard let extra = OPENSSL_sk_new_null() else { throw .openSSL(.internalFailure, "stack allocation failed") }
        // The stack borrows the certificates; CMS_sign up-refs what it keeps.
        defer { OPENSSL_sk_free(extra) }
        for other in chain where OPENSSL_sk_push(extra, UnsafeRawPointer(other.handle)) <= 0 {
            throw .openSSL(.internalFailure, "stack push failed")
        }
        // No signed attributes, like Apple's receipts; binary content, no S/MIME.
        var flags = UInt32(CMS_BINARY | CMS_NOATTR)
        if encoding == .berIndefinite { flags |= UInt32(CMS_STREAM) }
        let signed: [UInt8]? = withReadOnlyBIO(content) { input in
            guard let cms = CMS_sign(certificate.handle, key.key.handle, extra, input, flags) else { return nil }
            defer { CMS_ContentInfo_free(cms) }
            switch encoding {
            case .der: return derBytes { i2d_CMS_ContentInfo(cms, $0) }
            case .berIndefinite:
                // Streaming: the signature is computed while the content is written out.
                return collectingBIO { i2d_CMS_bio_stream($0, cms, input, Int32(flags)) == 1 }
            }
        }
        guard let signed else { throw .openSSL(.internalFailure, "CMS signing failed") }
        return signed
    }
}

/// An app receipt's payload as a test wants it: the attributes StoreKit 1 receipts carry that
/// verification reads, encoded like Apple's (a SET of SEQUENCE { type, version, OCTET STRING }).
public struct TestAppReceipt: Sendable {
    /// One in-app purchase record (attribute 17).
    public struct InAppPurchase: Sendable {
        public var productId: String
        public var transactionId: String?
        public var originalTransactionId: String?
        public var purchaseDate: Date

        public init(productId: String, transactionId: String?, originalTransactionId: String?, purchaseDate: Date = Date()) {
            self.productId = productId
            self.transactionId = transactionId
            self.originalTransactionId = originalTransactionId
            self.purchaseDate = purchaseDate
        }
    }

    public var bundleId: String
    /// Attribute 0: `Production`, `ProductionSandbox`, `Xcode`, …
    public var receiptType: String
    public var applicationVersion: String
    /// Attribute 12; nil leaves it out.
    public var creationDate: Date?
    public var inAppPurchases: [InAppPurchase]

    public init(
        bundleId: String, receiptType: String = "ProductionSandbox", applicationVersion: String = "1",
        creationDate: Date? = Date(), inAppPurchases: [InAppPurchase] = []
    ) {
        self.bundleId = bundleId
        self.receiptType = receiptType
        self.applicationVersion = applicationVersion
        self.creationDate = creationDate
        self.inAppPurchases = inAppPurchases
    }

    /// The DER payload that the receipt's PKCS#7 structure signs.
    public func payload() -> [UInt8] {
        var attributes = [
            Self.attribute(0, Self.utf8(receiptType)), Self.attribute(2, Self.utf8(bundleId)),
            Self.attribute(3, Self.utf8(applicationVersion)),
        ]
        if let creationDate { attributes.append(Self.attribute(12, Self.ia5(Self.rfc3339(creationDate)))) }
        for purchase in inAppPurchases {
            var fields = [
                Self.attribute(1701, Self.tlv(0x02, [1])), Self.attribute(1702, Self.utf8(purchase.productId)),
                Self.attribute(1704, Self.ia5(Self.rfc3339(purchase.purchaseDate))),
            ]
            if let id = purchase.transactionId { fields.append(Self.attribute(1703, Self.utf8(id))) }
            if let id = purchase.originalTransactionId { fields.append(Self.attribute(1705, Self.utf8(id))) }
            attributes.append(Self.attribute(17, Self.tlv(0x31, fields.flatMap { $0 })))
        }
        return Self.tlv(0x31, attributes.flatMap { $0 })
    }

    private static func rfc3339(_ date: Date) -> String { date.formatted(.iso8601) }

    private static func attribute(_ type: Int, _ value: [UInt8]) -> [UInt8] {
        tlv(0x30, integer(type) + tlv(0x02, [1]) + tlv(0x04, value))
    }

    private static func integer(_ value: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var rest = value
        repeat {
            bytes.insert(UInt8(rest & 0xff), at: 0)
            rest >>= 8
        } while rest > 0
        if bytes[0] & 0x80 != 0 { bytes.insert(0, at: 0) }
        return tlv(0x02, bytes)
    }

    private static func utf8(_ text: String) -> [UInt8] { tlv(0x0c, Array(text.utf8)) }
    private static func ia5(_ text: String) -> [UInt8] { tlv(0x16, Array(text.utf8)) }

    /// A DER element: definite length, short form below 128 bytes.
    private static func tlv(_ tag: UInt8, _ contents: [UInt8]) -> [UInt8] {
        var length: [UInt8] = []
        var rest = contents.count
        while rest > 0 {
            length.insert(UInt8(rest & 0xff), at: 0)
            rest >>= 8
        }
        let header = contents.count < 0x80 ? [UInt8(contents.count)] : [0x80 | UInt8(length.count)] + length
        return [tag] + header + contents
    }
}

extension TestAppleSigner {
    /// `receipt` as a base64 app receipt signed by this chain's leaf, carrying leaf,
    /// intermediate and root as Apple's receipts do.
    public func signReceipt(_ receipt: TestAppReceipt, encoding: TestPKCS7.Encoding = .der) throws -> String {
        let signed = try TestPKCS7.sign(
            receipt.payload(), certificate: leaf, key: leafKey, chain: [intermediate, root], encoding: encoding)
        return Data(signed).base64EncodedString()
    }
}
