import COpenSSL
import Crypto
import Foundation

/// What a `TestOCSPResponder` answers for a certificate.
public enum TestOCSPStatus: Sendable, Hashable {
    case good
    case revoked
    case unknown
}

/// Builds signed OCSP responses (RFC 6960) as a CA's responder would, for test signers only.
public enum TestOCSPResponder {
    /// A DER OCSP response answering every certificate id of `requestDER` with `status`,
    /// signed by `issuer` (the CA itself acting as responder). Throws when the request does not parse.
    public static func response(
        to requestDER: [UInt8], issuer: X509Certificate, issuerKey: P256PrivateKey, status: TestOCSPStatus,
        thisUpdate: Date = Date(), nextUpdate: Date? = Date() + 3600
    ) throws(CryptoError) -> [UInt8] {
        let request: OpaquePointer? = requestDER.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_OCSP_REQUEST(nil, &cursor, buffer.count)
        }
        guard let request else { throw .openSSL(.invalidInput, "not a DER OCSP request") }
        defer { OCSP_REQUEST_free(request) }
        guard let basic = OCSP_BASICRESP_new() else { throw .openSSL(.internalFailure, "OCSP_BASICRESP_new failed") }
        defer { OCSP_BASICRESP_free(basic) }
        guard let thisTime = unixTime(thisUpdate), let this = ASN1_TIME_set(nil, thisTime) else {
            throw CryptoError(.invalidInput, "thisUpdate not representable")
        }
        defer { ASN1_TIME_free(this) }
        var next: UnsafeMutablePointer<ASN1_TIME>?
        if let nextUpdate {
            guard let nextTime = unixTime(nextUpdate), let made = ASN1_TIME_set(nil, nextTime) else {
                throw CryptoError(.invalidInput, "nextUpdate not representable")
            }
            next = made
        }
        defer { if let next { ASN1_TIME_free(next) } }
        let code: Int32 =
            switch status {
            case .good: V_OCSP_CERTSTATUS_GOOD
            case .revoked: V_OCSP_CERTSTATUS_REVOKED
            case .unknown: V_OCSP_CERTSTATUS_UNKNOWN
            }
        for index in 0..<OCSP_request_onereq_count(request) {
            guard let one = OCSP_request_onereq_get0(request, index), let id = OCSP_onereq_get0_id(one),
                OCSP_basic_add1_status(
                    basic, id, code, status == .revoked ? OCSP_REVOKED_STATUS_KEYCOMPROMISE : -1,
                    status == .revoked ? this : nil, this, next) != nil
            else { throw .openSSL(.internalFailure, "cannot add an OCSP single response") }
        }
        guard OCSP_basic_sign(basic, issuer.handle, issuerKey.key.handle, FetchedAlgorithms.shared.sha256, nil, 0) == 1 else {
            throw .openSSL(.internalFailure, "OCSP_basic_sign failed")
        }
        guard let response = OCSP_response_create(OCSP_RESPONSE_STATUS_SUCCESSFUL, basic) else {
            throw .openSSL(.internalFailure, "OCSP_response_create failed")
        }
        defer { OCSP_RESPONSE_free(response) }
        guard let der = derBytes({ i2d_OCSP_RESPONSE(response, $0) }) else { throw .openSSL(.internalFailure, "cannot encode the OCSP response") }
        return der
    }

    /// A DER OCSP response with an unsuccessful status (e.g. 2 internalError, 3 tryLater).
    public static func failure(status: Int32) throws(CryptoError) -> [UInt8] {
        guard let response = OCSP_response_create(status, nil) else { throw .openSSL(.internalFailure, "OCSP_response_create failed") }
        defer { OCSP_RESPONSE_free(response) }
        guard let der = derBytes({ i2d_OCSP_RESPONSE(response, $0) }) else { throw .openSSL(.internalFailure, "cannot encode the OCSP response") }
        return der
    }
}
