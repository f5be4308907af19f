import COpenSSL
import Foundation

/// Verifies certificate chains (RFC 5280, OpenSSL's X509_verify_cert) against a fixed set of
/// trusted roots, never the system store, at a caller-chosen time.
///
/// Strict by construction: X509_V_FLAG_X509_STRICT, no partial chains (a chain must end in one
/// of the configured self-signed roots), and the validation time is always explicit.
///
/// `@unchecked Sendable`: the X509_STORE is filled in `init` and only read afterwards; OpenSSL
/// locks a store internally so concurrent X509_verify_cert calls may share it. Each `verify`
/// call uses its own X509_STORE_CTX.
public final class X509ChainVerifier: @unchecked Sendable {
    public let trustedRoots: [X509Certificate]
    let store: OpaquePointer

    public init(trustedRoots: [X509Certificate]) throws(CryptoError) {
        guard let store = X509_STORE_new() else { throw .openSSL(.internalFailure, "X509_STORE_new failed") }
        for root in trustedRoots where X509_STORE_add_cert(store, root.handle) != 1 {
            X509_STORE_free(store)
            throw .openSSL(.invalidInput, "cannot add trusted root \(root.subject)")
        }
        self.store = store
        self.trustedRoots = trustedRoots
    }

    deinit { X509_STORE_free(store) }

    /// The verified chain, leaf first and a trusted root last, valid at `date`.
    /// Throws `.chainVerificationFailed` with OpenSSL's verify error and the failing depth.
    public func verify(leaf: X509Certificate, intermediates: [X509Certificate], at date: Date) throws(CryptoError)
        -> [X509Certificate]
    {
        guard let time = unixTime(date) else {
            throw CryptoError(.invalidInput, "verification time \(date.timeIntervalSince1970) s is outside years 1...9999")
        }
        guard let untrusted = OPENSSL_sk_new_null() else { throw .openSSL(.internalFailure, "stack allocation failed") }
        // The stack borrows the certificates (no up-ref): they outlive this call via `intermediates`.
        defer { OPENSSL_sk_free(untrusted) }
        for certificate in intermediates where OPENSSL_sk_push(untrusted, UnsafeRawPointer(certificate.handle)) <= 0 {
            throw .openSSL(.internalFailure, "stack push failed")
        }
        guard let context = X509_STORE_CTX_new() else { throw .openSSL(.internalFailure, "X509_STORE_CTX_new failed") }
        defer { X509_STORE_CTX_free(context) }
        guard X509_STORE_CTX_init(context, store, leaf.handle, untrusted) == 1 else {
            throw .openSSL(.internalFailure, "X509_STORE_CTX_init failed")
        }
        let parameters = X509_STORE_CTX_get0_param(context)
        X509_VERIFY_PARAM_set_flags(parameters, UInt(X509_V_FLAG_X509_STRICT))
        X509_VERIFY_PARAM_clear_flags(parameters, UInt(X509_V_FLAG_PARTIAL_CHAIN))
        // set_time also turns on X509_V_FLAG_USE_CHECK_TIME.
        X509_VERIFY_PARAM_set_time(parameters, time)

        guard X509_verify_cert(context) == 1 else {
            let code = X509_STORE_CTX_get_error(context)
            let depth = X509_STORE_CTX_get_error_depth(context)
            OpenSSLErrorQueue.clear()
            let message = String(cString: X509_verify_cert_error_string(Int(code)))
            throw CryptoError(.chainVerificationFailed, "\(message) (verify error \(code) at depth \(depth))")
        }
        guard let chain = X509_STORE_CTX_get1_chain(context) else {
            throw .openSSL(.internalFailure, "verified chain unavailable")
        }
        var certificates: [X509Certificate] = []
        // get1_chain up-refs every element; each X509Certificate takes one reference, the
        // stack itself is freed without touching the elements.
        defer { OPENSSL_sk_free(chain) }
        let count = OPENSSL_sk_num(chain)
        var failure: CryptoError?
        for index in 0..<count {
            let element = OpaquePointer(OPENSSL_sk_value(chain, index))!
            if failure != nil {
                X509_free(element)
                continue
            }
            do throws(CryptoError) { certificates.append(try X509Certificate(taking: element)) } catch { failure = error }
        }
        if let failure { throw failure }
        return certificates
    }
}
