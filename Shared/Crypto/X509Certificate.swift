import COpenSSL
import Foundation

/// An X.509 certificate, parsed once; its DER, fingerprint and validity are read at load time.
///
/// `@unchecked Sendable`: the X509 handle is never modified after construction. OpenSSL caches
/// decoded extensions inside the X509 object lazily but guards that cache with the object's own
/// lock (since 1.1.0), so concurrent read-only use, including chain verification, is safe.
public final class X509Certificate: @unchecked Sendable, Hashable, CustomStringConvertible {
    package let handle: OpaquePointer
    /// The exact DER bytes.
    public let der: [UInt8]
    /// SHA-256 of the DER bytes, the identity used for pinning and caching.
    public let sha256Fingerprint: [UInt8]
    public let notBefore: Date
    public let notAfter: Date
    /// The subject distinguished name in OpenSSL's one-line form (for logs and errors).
    public let subject: String

    /// Takes ownership of `handle` (freed by this object, also when this initializer throws).
    package init(taking handle: OpaquePointer) throws(CryptoError) {
        self.handle = handle
        guard let der = derBytes({ i2d_X509(handle, $0) }) else {
            X509_free(handle)
            throw .openSSL(.invalidInput, "certificate does not re-encode")
        }
        guard let notBefore = Self.date(X509_get0_notBefore(handle)), let notAfter = Self.date(X509_get0_notAfter(handle)) else {
            X509_free(handle)
            throw CryptoError(.invalidInput, "certificate validity dates do not parse")
        }
        self.der = der
        self.sha256Fingerprint = SHA256.hash(der)
        self.notBefore = notBefore
        self.notAfter = notAfter
        self.subject = Self.name(X509_get_subject_name(handle))
    }

    deinit { X509_free(handle) }

    /// Parses one DER certificate; trailing bytes are refused.
    public convenience init(der: [UInt8]) throws(CryptoError) {
        let parsed: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            guard let x509 = d2i_X509(nil, &cursor, buffer.count) else { return nil }
            guard cursor == buffer.baseAddress.map({ $0 + buffer.count }) else {
                X509_free(x509)
                return nil
            }
            return x509
        }
        guard let parsed else { throw .openSSL(.invalidInput, "not one DER X.509 certificate") }
        try self.init(taking: parsed)
    }

    /// Parses the first `BEGIN CERTIFICATE` block of `pem`.
    public convenience init(pem: String) throws(CryptoError) {
        guard let first = try Self.parsePEM(Array(pem.utf8)).first else {
            throw CryptoError(.invalidInput, "no PEM certificate found")
        }
        try self.init(taking: first.take())
    }

    /// Every certificate in a file: DER (one certificate) or PEM (one or more blocks).
    public static func loadAll(path: String) throws(CryptoError) -> [X509Certificate] {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw CryptoError(.invalidInput, "cannot read certificate file \(path)")
        }
        return try parseAll(Array(data))
    }

    /// Every certificate in `bytes`: DER (one certificate) or PEM (one or more blocks).
    public static func parseAll(_ bytes: [UInt8]) throws(CryptoError) -> [X509Certificate] {
        guard bytes.starts(with: [0x30]) else {
            let blocks = try parsePEM(bytes)
            guard !blocks.isEmpty else { throw CryptoError(.invalidInput, "neither DER nor PEM certificates") }
            var certificates: [X509Certificate] = []
            for block in blocks { certificates.append(try X509Certificate(taking: block.take())) }
            return certificates
        }
        return [try X509Certificate(der: bytes)]
    }

    /// Holds a parsed X509 until an `X509Certificate` takes it; frees it otherwise.
    private final class Pending {
        private var handle: OpaquePointer?
        init(_ handle: OpaquePointer) { self.handle = handle }
        func take() -> OpaquePointer {
            defer { handle = nil }
            return handle!
        }
        deinit { if let handle { X509_free(handle) } }
    }

    private static func parsePEM(_ bytes: [UInt8]) throws(CryptoError) -> [Pending] {
        withReadOnlyBIO(bytes) { bio in
            var blocks: [Pending] = []
            while let x509 = PEM_read_bio_X509(bio, nil, nil, nil) { blocks.append(Pending(x509)) }
            // The loop ends on "no start line" at the end of input; that is not an error.
            OpenSSLErrorQueue.clear()
            return blocks
        }
    }

    /// The certificate as one `BEGIN CERTIFICATE` PEM block.
    public var pem: String {
        guard let text = collectingBIO({ PEM_write_bio_X509($0, handle) == 1 }) else {
            fatalError("PEM_write_bio_X509 failed: out of memory")
        }
        return String(decoding: text, as: UTF8.self)
    }

    /// Whether the certificate carries an extension with this dotted OID, critical or not.
    public func hasExtension(oid: String) -> Bool {
        guard let object = OBJ_txt2obj(oid, 1) else {
            OpenSSLErrorQueue.clear()
            return false
        }
        defer { ASN1_OBJECT_free(object) }
        return X509_get_ext_by_OBJ(handle, object, -1) >= 0
    }

    /// Whether basicConstraints says CA:TRUE.
    public var isCA: Bool { X509_get_extension_flags(handle) & UInt32(EXFLAG_CA) != 0 }

    /// The subject key if it is an EC P-256 key, else nil.
    public var publicKey: P256PublicKey? {
        guard let key = subjectKey else { return nil }
        return try? P256PublicKey(checked: key)
    }

    /// The subject key as a general public key (P-256, RSA ≥ 2048 or Ed25519), else nil.
    public var anyPublicKey: PublicKey? {
        guard let key = subjectKey else { return nil }
        return try? PublicKey(derSubjectPublicKeyInfo: key.subjectPublicKeyInfo)
    }

    private var subjectKey: EVPKey? {
        // X509_get_pubkey returns a new reference, owned by the EVPKey.
        guard let pkey = X509_get_pubkey(handle) else {
            OpenSSLErrorQueue.clear()
            return nil
        }
        return EVPKey(taking: pkey)
    }

    public var description: String { "X509Certificate(\(subject))" }

    public static func == (lhs: X509Certificate, rhs: X509Certificate) -> Bool { lhs.der == rhs.der }
    public func hash(into hasher: inout Hasher) { hasher.combine(sha256Fingerprint) }

    private static func date(_ time: UnsafePointer<ASN1_TIME>?) -> Date? {
        var parts = tm()
        guard let time, ASN1_TIME_to_tm(time, &parts) == 1 else {
            OpenSSLErrorQueue.clear()
            return nil
        }
        return Date(timeIntervalSince1970: TimeInterval(timegm(&parts)))
    }

    private static func name(_ name: OpaquePointer?) -> String {
        guard let name, let text = X509_NAME_oneline(name, nil, 0) else { return "" }
        defer { CRYPTO_free(text, #file, #line) }
        return String(cString: text)
    }
}
