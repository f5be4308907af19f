import COpenSSL
import Crypto
import Foundation

// The demo's and the tests' Apple-like chains are built at run time with these; the services
// never issue certificates, and never link this module.

/// A certificate extension with an arbitrary OID, for test signers.
public struct TestCertificateExtension: Sendable, Hashable {
    public var oid: String
    public var critical: Bool
    /// The DER contents of extnValue; Apple's marker extensions hold an ASN.1 NULL.
    public var value: [UInt8]

    public init(oid: String, critical: Bool = false, value: [UInt8] = [0x05, 0x00]) {
        self.oid = oid
        self.critical = critical
        self.value = value
    }
}

/// What to put in a certificate made by `TestCertificateIssuer`, for test signers.
public struct TestCertificateSpec: Sendable {
    public var commonName: String
    public var organization: String
    public var serialNumber: UInt64
    public var notBefore: Date
    public var notAfter: Date
    /// basicConstraints CA:TRUE with keyCertSign, or CA:FALSE with digitalSignature.
    public var isCA: Bool
    public var extensions: [TestCertificateExtension]
    /// Written as the Authority Information Access OCSP URI, as Apple's certificates carry one.
    public var ocspResponderURL: String?

    public init(
        commonName: String, organization: String = "Test Signer", serialNumber: UInt64 = .random(in: 1...UInt64(Int64.max)),
        notBefore: Date, notAfter: Date, isCA: Bool, extensions: [TestCertificateExtension] = [], ocspResponderURL: String? = nil
    ) {
        self.ocspResponderURL = ocspResponderURL
        self.commonName = commonName
        self.organization = organization
        self.serialNumber = serialNumber
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.isCA = isCA
        self.extensions = extensions
    }
}

/// Issues P-256/SHA-256 X.509 v3 certificates that pass OpenSSL's strict verification, for test
/// signers only.
public enum TestCertificateIssuer {
    /// A self-signed (root) certificate for `key`.
    public static func selfSigned(_ spec: TestCertificateSpec, key: P256PrivateKey) throws(CryptoError) -> X509Certificate {
        try issue(spec, subjectKey: key.key, issuer: nil, issuerKey: key.key)
    }

    /// A certificate for `subjectKey` signed by `issuer`/`issuerKey`.
    public static func issue(
        _ spec: TestCertificateSpec, subjectKey: P256PublicKey, issuer: X509Certificate, issuerKey: P256PrivateKey
    ) throws(CryptoError) -> X509Certificate {
        try issue(spec, subjectKey: subjectKey.key, issuer: issuer, issuerKey: issuerKey.key)
    }

    private static func issue(_ spec: TestCertificateSpec, subjectKey: EVPKey, issuer: X509Certificate?, issuerKey: EVPKey)
        throws(CryptoError) -> X509Certificate
    {
        guard let notBefore = unixTime(spec.notBefore), let notAfter = unixTime(spec.notAfter) else {
            throw CryptoError(.invalidInput, "validity dates outside years 1...9999")
        }
        guard let x509 = X509_new() else { throw .openSSL(.internalFailure, "X509_new failed") }
        var handedOver = false
        defer { if !handedOver { X509_free(x509) } }

        guard let name = X509_NAME_new() else { throw .openSSL(.internalFailure, "X509_NAME_new failed") }
        defer { X509_NAME_free(name) }
        guard X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, spec.organization, -1, -1, 0) == 1,
            X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, spec.commonName, -1, -1, 0) == 1
        else { throw .openSSL(.invalidInput, "bad subject name") }

        guard X509_set_version(x509, 2) == 1,  // v3
            ASN1_INTEGER_set_uint64(X509_get_serialNumber(x509), spec.serialNumber) == 1,
            X509_set_subject_name(x509, name) == 1,
            X509_set_issuer_name(x509, issuer.map { X509_get_subject_name($0.handle) } ?? name) == 1,
            ASN1_TIME_set(X509_getm_notBefore(x509), notBefore) != nil,
            ASN1_TIME_set(X509_getm_notAfter(x509), notAfter) != nil,
            X509_set_pubkey(x509, subjectKey.handle) == 1
        else { throw .openSSL(.internalFailure, "cannot fill certificate fields") }

        var context = X509V3_CTX()
        X509V3_set_ctx(&context, issuer?.handle ?? x509, x509, nil, nil, 0)
        var standard: [(Int32, String)] = [
            (NID_basic_constraints, spec.isCA ? "critical,CA:TRUE" : "critical,CA:FALSE"),
            (NID_key_usage, spec.isCA ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature"),
            (NID_subject_key_identifier, "hash"),
            (NID_authority_key_identifier, "keyid:always"),
        ]
        if let url = spec.ocspResponderURL { standard.append((NID_info_access, "OCSP;URI:\(url)")) }
        for (nid, value) in standard {
            guard let ext = X509V3_EXT_nconf_nid(nil, &context, nid, value) else {
                throw .openSSL(.internalFailure, "cannot build extension \(value)")
            }
            defer { X509_EXTENSION_free(ext) }
            guard X509_add_ext(x509, ext, -1) == 1 else { throw .openSSL(.internalFailure, "cannot add extension") }
        }
        for custom in spec.extensions { try add(custom, to: x509) }

        guard X509_sign(x509, issuerKey.handle, FetchedAlgorithms.shared.sha256) > 0 else {
            throw .openSSL(.invalidKey, "certificate signing failed")
        }
        handedOver = true
        return try X509Certificate(taking: x509)
    }

    private static func add(_ custom: TestCertificateExtension, to x509: OpaquePointer) throws(CryptoError) {
        guard let object = OBJ_txt2obj(custom.oid, 1) else { throw .openSSL(.invalidInput, "bad OID \(custom.oid)") }
        defer { ASN1_OBJECT_free(object) }
        guard let value = ASN1_OCTET_STRING_new() else { throw .openSSL(.internalFailure, "ASN1_OCTET_STRING_new failed") }
        defer { ASN1_OCTET_STRING_free(value) }
        guard ASN1_OCTET_STRING_set(value, custom.value, Int32(custom.value.count)) == 1,
            let ext = X509_EXTENSION_create_by_OBJ(nil, object, custom.critical ? 1 : 0, value)
        else { throw .openSSL(.internalFailure, "cannot build extension \(custom.oid)") }
        defer { X509_EXTENSION_free(ext) }
        guard X509_add_ext(x509, ext, -1) == 1 else { throw .openSSL(.internalFailure, "cannot add extension \(custom.oid)") }
    }
}
