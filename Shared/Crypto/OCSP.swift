import COpenSSL
import Foundation

/// The revocation status an OCSP responder gives for one certificate.
public enum OCSPCertificateStatus: Sendable, Hashable {
    case good
    case revoked(at: Date?)
    /// The responder does not know the certificate.
    case unknown
}

/// A checked OCSP answer for one certificate: its status and the window it holds for.
public struct OCSPResult: Sendable, Hashable {
    public let status: OCSPCertificateStatus
    public let thisUpdate: Date
    /// When the responder will have newer information; nil when it did not say (do not cache).
    public let nextUpdate: Date?
}

/// An OCSP request (RFC 6960) for one certificate, and the checks of its answer.
///
/// No nonce is sent: large CAs, Apple's among them, serve pre-signed responses and ignore
/// nonces; freshness comes from thisUpdate/nextUpdate, which `check` enforces instead.
///
/// `@unchecked Sendable`: the OCSP_CERTID is built in `init` and only read afterwards
/// (OCSP_resp_find_status and OCSP_id_cmp do not modify it).
public final class OCSPRequest: @unchecked Sendable {
    public let certificate: X509Certificate
    public let issuer: X509Certificate
    /// The DER request to POST (Content-Type application/ocsp-request).
    public let der: [UInt8]
    private let certificateID: OpaquePointer

    /// How far thisUpdate may lie ahead of, and nextUpdate behind, `now` (clock skew).
    public static let clockSkew: TimeInterval = 5 * 60

    public init(certificate: X509Certificate, issuer: X509Certificate) throws(CryptoError) {
        // SHA-1 CertID hashes: what RFC 5019 responders, Apple's included, index by.
        guard let id = OCSP_cert_to_id(nil, certificate.handle, issuer.handle) else {
            throw .openSSL(.invalidInput, "cannot build the OCSP certificate id")
        }
        guard let request = OCSP_REQUEST_new() else {
            OCSP_CERTID_free(id)
            throw .openSSL(.internalFailure, "OCSP_REQUEST_new failed")
        }
        defer { OCSP_REQUEST_free(request) }
        // add0 hands the request its own copy; ours stays for matching the answer.
        guard let copy = OCSP_CERTID_dup(id), OCSP_request_add0_id(request, copy) != nil else {
            OCSP_CERTID_free(id)
            throw .openSSL(.internalFailure, "cannot add the certificate id to the OCSP request")
        }
        guard let der = derBytes({ i2d_OCSP_REQUEST(request, $0) }) else {
            OCSP_CERTID_free(id)
            throw .openSSL(.internalFailure, "cannot encode the OCSP request")
        }
        self.certificate = certificate
        self.issuer = issuer
        self.der = der
        certificateID = id
    }

    deinit { OCSP_CERTID_free(certificateID) }

    /// Checks a DER OCSP response to this request: a successful response, signed by the issuer
    /// or by a responder the issuer authorised (id-kp-OCSPSigning) whose chain ends in a root
    /// of `trust`, holding a status for exactly this certificate that is current at `now`.
    /// Any failure throws; a revoked or unknown status is a result, not an error.
    public func check(responseDER: [UInt8], trust: X509ChainVerifier, now: Date) throws(CryptoError) -> OCSPResult {
        let response: OpaquePointer? = responseDER.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let parsed = d2i_OCSP_RESPONSE(nil, &cursor, buffer.count) else { return nil }
            guard cursor == buffer.baseAddress.map({ $0 + buffer.count }) else {
                OCSP_RESPONSE_free(parsed)
                return nil
            }
            return parsed
        }
        guard let response else { throw .openSSL(.invalidInput, "not one DER OCSP response") }
        defer { OCSP_RESPONSE_free(response) }
        let responseStatus = OCSP_response_status(response)
        guard responseStatus == OCSP_RESPONSE_STATUS_SUCCESSFUL else {
            throw CryptoError(.invalidInput, "OCSP responder answered status \(responseStatus), not successful")
        }
        guard let basic = OCSP_response_get1_basic(response) else { throw .openSSL(.invalidInput, "OCSP response has no basic response") }
        defer { OCSP_BASICRESP_free(basic) }

        guard let untrusted = OPENSSL_sk_new_null() else { throw .openSSL(.internalFailure, "stack allocation failed") }
        defer { OPENSSL_sk_free(untrusted) }
        // Borrowed (no up-ref): `issuer` outlives this call.
        guard OPENSSL_sk_push(untrusted, UnsafeRawPointer(issuer.handle)) > 0 else { throw .openSSL(.internalFailure, "stack push failed") }
        guard OCSP_basic_verify(basic, untrusted, trust.store, 0) == 1 else {
            throw .openSSL(.chainVerificationFailed, "OCSP response signature or responder authorisation does not verify")
        }

        var status: Int32 = -1
        var reason: Int32 = -1
        var revoked: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var thisUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        var nextUpdate: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?
        guard OCSP_resp_find_status(basic, certificateID, &status, &reason, &revoked, &thisUpdate, &nextUpdate) == 1 else {
            OpenSSLErrorQueue.clear()
            throw CryptoError(.invalidInput, "OCSP response holds no status for \(certificate.subject)")
        }
        guard let thisDate = asn1Date(thisUpdate) else { throw CryptoError(.invalidInput, "OCSP response lacks a readable thisUpdate") }
        let nextDate = nextUpdate.flatMap { asn1Date($0) }
        if nextUpdate != nil && nextDate == nil { throw CryptoError(.invalidInput, "OCSP response nextUpdate does not parse") }
        guard thisDate <= now + Self.clockSkew else { throw CryptoError(.invalidInput, "OCSP response thisUpdate \(thisDate) lies in the future") }
        if let nextDate {
            guard nextDate >= thisDate else { throw CryptoError(.invalidInput, "OCSP response nextUpdate precedes thisUpdate") }
            guard nextDate + Self.clockSkew >= now else { throw CryptoError(.invalidInput, "OCSP response expired at \(nextDate)") }
        }
        let result: OCSPCertificateStatus =
            switch status {
            case V_OCSP_CERTSTATUS_GOOD: .good
            case V_OCSP_CERTSTATUS_REVOKED: .revoked(at: revoked.flatMap { asn1Date($0) })
            default: .unknown
            }
        return OCSPResult(status: result, thisUpdate: thisDate, nextUpdate: nextDate)
    }

    private func asn1Date(_ time: UnsafeMutablePointer<ASN1_GENERALIZEDTIME>?) -> Date? {
        var parts = tm()
        guard let time, ASN1_TIME_to_tm(time, &parts) == 1 else {
            OpenSSLErrorQueue.clear()
            return nil
        }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
    }
}

extension X509Certificate {
    /// The OCSP responder URLs of the Authority Information Access extension, in order.
    public var ocspResponderURLs: [String] {
        guard let list = X509_get1_ocsp(handle) else { return [] }
        defer { X509_email_free(list) }
        return (0..<OPENSSL_sk_num(list)).compactMap { index in
            OPENSSL_sk_value(list, index).map { String(cString: $0.assumingMemoryBound(to: CChar.self)) }
        }
    }
}
