import COpenSSL
import Foundation

/// A PKCS#7 SignedData with its content inside (a StoreKit 1 app receipt, say), parsed by
/// OpenSSL's CMS code from DER or BER (indefinite lengths, constructed OCTET STRINGs).
///
/// Parsing trusts nothing: `content` is what the signer claims until `verify(trust:at:)` (or,
/// without a trust decision, `verifySignature()`) passes.
///
/// Not Sendable: OpenSSL's CMS_verify records the signer certificates in the structure.
public final class PKCS7SignedData {
    private let handle: OpaquePointer
    /// The encapsulated content octets (the segments of a constructed OCTET STRING joined).
    public let content: [UInt8]
    /// Every certificate the structure carries, in its order.
    public let certificates: [X509Certificate]

    /// Parses one SignedData of `data` content with exactly one signer; trailing bytes are refused.
    public init(der: [UInt8]) throws(CryptoError) {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let cms = d2i_CMS_ContentInfo(nil, &cursor, buffer.count) else { return nil }
            guard cursor == buffer.baseAddress.map({ $0 + buffer.count }) else {
                CMS_ContentInfo_free(cms)
                return nil
            }
            return cms
        }
        guard let parsed else { throw .openSSL(.invalidInput, "not one DER or BER PKCS#7 structure") }
        handle = parsed
        guard OBJ_obj2nid(CMS_get0_type(parsed)) == NID_pkcs7_signed else {
            CMS_ContentInfo_free(parsed)
            throw CryptoError(.invalidInput, "PKCS#7 structure is not SignedData")
        }
        guard OBJ_obj2nid(CMS_get0_eContentType(parsed)) == NID_pkcs7_data, let slot = CMS_get0_content(parsed),
            let octets = slot.pointee, let bytes = ASN1_STRING_get0_data(octets)
        else {
            CMS_ContentInfo_free(parsed)
            throw CryptoError(.invalidInput, "PKCS#7 SignedData carries no data content")
        }
        content = Array(UnsafeBufferPointer(start: bytes, count: Int(ASN1_STRING_length(octets))))
        guard let signers = CMS_get0_SignerInfos(parsed), OPENSSL_sk_num(signers) == 1 else {
            CMS_ContentInfo_free(parsed)
            throw CryptoError(.invalidInput, "PKCS#7 SignedData does not have exactly one signer")
        }
        var certificates: [X509Certificate] = []
        if let stack = CMS_get1_certs(parsed) {
            // get1 up-refs every certificate; each X509Certificate takes one reference (and frees
            // it when it cannot wrap the certificate: one it cannot read cannot help a chain either).
            defer { OPENSSL_sk_free(stack) }
            for index in 0..<OPENSSL_sk_num(stack) {
                let element = OpaquePointer(OPENSSL_sk_value(stack, index))!
                if let certificate = try? X509Certificate(taking: element) { certificates.append(certificate) }
            }
        }
        OpenSSLErrorQueue.clear()
        self.certificates = certificates
    }

    deinit { CMS_ContentInfo_free(handle) }

    /// Checks the signature over `content` with the signer's certificate as carried in the
    /// structure, and returns that certificate. No trust decision: anyone can sign this way.
    public func verifySignature() throws(CryptoError) -> X509Certificate {
        // The chain is checked separately (with an explicit time) by X509ChainVerifier.
        let flags = UInt32(CMS_NO_SIGNER_CERT_VERIFY | CMS_BINARY)
        guard CMS_verify(handle, nil, nil, nil, nil, flags) == 1 else {
            throw .openSSL(.signatureVerificationFailed, "PKCS#7 signature does not verify with its signer certificate")
        }
        guard let signers = CMS_get0_signers(handle) else { throw .openSSL(.internalFailure, "signer certificate unavailable") }
        // get0: the stack is ours to free, its certificate is not; the new reference is the X509Certificate's.
        defer { OPENSSL_sk_free(signers) }
        guard OPENSSL_sk_num(signers) == 1, let signer = OPENSSL_sk_value(signers, 0) else {
            throw CryptoError(.signatureVerificationFailed, "PKCS#7 signer certificate not found")
        }
        let x509 = OpaquePointer(signer)
        X509_up_ref(x509)
        return try X509Certificate(taking: x509)
    }

    /// The signature verifies with the signer's certificate, and that certificate chains to one
    /// of `trust`'s roots at `date` through the carried certificates. Returns the chain, signer
    /// first and the trusted root last.
    public func verify(trust: X509ChainVerifier, at date: Date) throws(CryptoError) -> [X509Certificate] {
        let signer = try verifySignature()
        return try trust.verify(leaf: signer, intermediates: certificates.filter { $0 != signer }, at: date)
    }
}
