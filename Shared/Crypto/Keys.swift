import COpenSSL
import Synchronization

/// Owns one EVP_PKEY, freed when the last reference goes.
///
/// `@unchecked Sendable`: the key is never modified after construction, and OpenSSL 3 allows
/// concurrent read-only use of one EVP_PKEY from several threads as long as every operation
/// uses its own EVP_MD_CTX (which `verify`/`sign` create per call).
package final class EVPKey: @unchecked Sendable {
    package let handle: OpaquePointer

    init(taking handle: OpaquePointer) { self.handle = handle }

    deinit { EVP_PKEY_free(handle) }

    /// An EC key on P-256 (named curve; explicit parameters are refused).
    var isP256: Bool {
        guard EVP_PKEY_is_a(handle, "EC") == 1 else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(handle, "group", &name, name.count, &length) == 1 else {
            OpenSSLErrorQueue.clear()
            return false
        }
        let group = String(decoding: name.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256"
    }

    var isRSA: Bool { EVP_PKEY_is_a(handle, "RSA") == 1 }

    var isEd25519: Bool { EVP_PKEY_is_a(handle, "ED25519") == 1 }

    var bits: Int { Int(EVP_PKEY_get_bits(handle)) }

    /// SubjectPublicKeyInfo DER of the public half.
    var subjectPublicKeyInfo: [UInt8] {
        guard let der = derBytes({ i2d_PUBKEY(handle, $0) }) else { fatalError("i2d_PUBKEY failed: out of memory") }
        return der
    }

    static func fromSubjectPublicKeyInfo(_ der: [UInt8]) throws(CryptoError) -> EVPKey {
        let key: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            let key = d2i_PUBKEY(nil, &cursor, buffer.count)
            // Trailing bytes after the structure mean the input was not one key.
            if let key, cursor != buffer.baseAddress.map({ $0 + buffer.count }) {
                EVP_PKEY_free(key)
                return nil
            }
            return key
        }
        guard let key else { throw .openSSL(.invalidKey, "not a DER SubjectPublicKeyInfo") }
        return EVPKey(taking: key)
    }

    static func fromPublicKeyPEM(_ pem: String) throws(CryptoError) -> EVPKey {
        let key = withReadOnlyBIO(Array(pem.utf8)) { PEM_read_bio_PUBKEY($0, nil, nil, nil) }
        guard let key else { throw .openSSL(.invalidKey, "no PEM public key (BEGIN PUBLIC KEY) found") }
        return EVPKey(taking: key)
    }

    /// Verifies a DER-encoded signature over SHA-256(message). Do not escape the pointer.
    func verify(derSignature: [UInt8], message: UnsafeRawBufferPointer) -> Bool {
        verify(signature: derSignature, message: message, digest: FetchedAlgorithms.shared.sha256)
    }

    /// Verifies `signature` over `message` hashed with `digest`; nil for the algorithms that take
    /// the whole message in one shot (Ed25519). Do not escape the pointer.
    func verify(signature: [UInt8], message: UnsafeRawBufferPointer, digest: OpaquePointer?) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestVerifyInit(context, nil, digest, nil, handle) == 1 else {
            OpenSSLErrorQueue.clear()
            return false
        }
        let result = EVP_DigestVerify(
            context, signature, signature.count,
            message.baseAddress?.assumingMemoryBound(to: UInt8.self), message.count)
        if result != 1 { OpenSSLErrorQueue.clear() }
        return result == 1
    }

    /// A DER signature over SHA-256(message).
    func sign(_ message: [UInt8]) throws(CryptoError) -> [UInt8] {
        try sign(message, digest: FetchedAlgorithms.shared.sha256)
    }

    /// A signature over `message` hashed with `digest` (nil: one-shot algorithms, Ed25519).
    func sign(_ message: [UInt8], digest: OpaquePointer?) throws(CryptoError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw .openSSL(.internalFailure, "EVP_MD_CTX_new failed") }
        defer { EVP_MD_CTX_free(context) }
        guard EVP_DigestSignInit(context, nil, digest, nil, handle) == 1 else {
            throw .openSSL(.invalidKey, "EVP_DigestSignInit failed")
        }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, message, message.count) == 1 else {
            throw .openSSL(.internalFailure, "EVP_DigestSign (size) failed")
        }
        var signature = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &signature, &length, message, message.count) == 1 else {
            throw .openSSL(.internalFailure, "EVP_DigestSign failed")
        }
        return Array(signature.prefix(length))
    }
}

/// ECDSA signature encodings: JOSE's fixed 64-byte r||s (RFC 7518 §3.4) and X9.62 DER.
enum ECDSASignatureEncoding {
    static let rawByteCount = 64

    /// DER `ECDSA-Sig-Value` for a raw r||s, or nil when it is not exactly 64 bytes. Encoded
    /// here (two minimal positive INTEGERs in a SEQUENCE, always short-form lengths) rather
    /// than through BIGNUMs: it runs once per verification.
    static func der(fromRaw raw: [UInt8]) -> [UInt8]? {
        guard raw.count == rawByteCount else { return nil }
        func integer(_ bytes: ArraySlice<UInt8>) -> ArraySlice<UInt8> {
            var start = bytes.startIndex
            while start < bytes.endIndex - 1 && bytes[start] == 0 { start += 1 }
            return bytes[start...]
        }
        let r = integer(raw[0..<32])
        let s = integer(raw[32..<64])
        let rPad = r.first! & 0x80 != 0 ? 1 : 0
        let sPad = s.first! & 0x80 != 0 ? 1 : 0
        var der = [UInt8]()
        der.reserveCapacity(72)
        der += [0x30, UInt8(4 + r.count + rPad + s.count + sPad), 0x02, UInt8(r.count + rPad)]
        if rPad == 1 { der.append(0) }
        der += r
        der += [0x02, UInt8(s.count + sPad)]
        if sPad == 1 { der.append(0) }
        der += s
        return der
    }

    /// Raw r||s (each left-padded to 32 bytes) of a DER `ECDSA-Sig-Value`.
    static func raw(fromDER der: [UInt8]) -> [UInt8]? {
        let signature: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var cursor: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &cursor, buffer.count)
        }
        guard let signature else {
            OpenSSLErrorQueue.clear()
            return nil
        }
        defer { ECDSA_SIG_free(signature) }
        var r: OpaquePointer?
        var s: OpaquePointer?
        ECDSA_SIG_get0(signature, &r, &s)
        var out = [UInt8](repeating: 0, count: rawByteCount)
        let ok = out.withUnsafeMutableBufferPointer { buffer in
            BN_bn2binpad(r, buffer.baseAddress, 32) == 32 && BN_bn2binpad(s, buffer.baseAddress! + 32, 32) == 32
        }
        return ok ? out : nil
    }
}

/// A P-256 private key (ES256 signing), e.g. an App Store Connect `.p8` key.
///
/// Sendable: it only holds an immutable `EVPKey` (see there for the thread-safety argument).
public final class P256PrivateKey: Sendable {
    package let key: EVPKey

    private init(key: EVPKey) { self.key = key }

    /// A fresh random key.
    public static func generate() -> P256PrivateKey {
        guard let context = EVP_PKEY_CTX_new_from_name(nil, "EC", nil) else { fatalError("EC key context: out of memory") }
        defer { EVP_PKEY_CTX_free(context) }
        var pkey: OpaquePointer?
        guard EVP_PKEY_keygen_init(context) == 1, EVP_PKEY_CTX_set_group_name(context, "P-256") == 1,
            EVP_PKEY_generate(context, &pkey) == 1, let pkey
        else { fatalError("P-256 key generation failed: \(OpenSSLErrorQueue.drain() ?? "no detail")") }
        return P256PrivateKey(key: EVPKey(taking: pkey))
    }

    /// Parses an unencrypted PEM private key: PKCS#8 (`BEGIN PRIVATE KEY`, Apple's `.p8`) or SEC1.
    /// Encrypted keys are refused rather than prompting for a passphrase on the terminal.
    public convenience init(pem: String) throws(CryptoError) {
        let refusePassphrase: @convention(c) (UnsafeMutablePointer<CChar>?, Int32, Int32, UnsafeMutableRawPointer?) -> Int32 = {
            _, _, _, _ in -1
        }
        let pkey = withReadOnlyBIO(Array(pem.utf8)) { PEM_read_bio_PrivateKey($0, nil, refusePassphrase, nil) }
        guard let pkey else { throw .openSSL(.invalidKey, "no unencrypted PEM private key found") }
        let key = EVPKey(taking: pkey)
        guard key.isP256 else { throw CryptoError(.invalidKey, "private key is not an EC P-256 key") }
        self.init(key: key)
    }

    public var publicKey: P256PublicKey {
        // Re-imported from its encoding so the public object never holds the private scalar.
        try! P256PublicKey(derSubjectPublicKeyInfo: key.subjectPublicKeyInfo)
    }

    /// ES256 signature of `message`: raw 64-byte r||s as JOSE wants it.
    public func signature(for message: [UInt8]) throws(CryptoError) -> [UInt8] {
        let der = try key.sign(message)
        guard let raw = ECDSASignatureEncoding.raw(fromDER: der) else {
            throw CryptoError(.internalFailure, "OpenSSL produced an unparsable ECDSA signature")
        }
        return raw
    }

    /// Unencrypted PKCS#8 PEM (`BEGIN PRIVATE KEY`), the `.p8` layout.
    public func pemPKCS8() -> String {
        guard let pem = collectingBIO({ PEM_write_bio_PKCS8PrivateKey($0, key.handle, nil, nil, 0, nil, nil) == 1 }) else {
            fatalError("PEM_write_bio_PKCS8PrivateKey failed: \(OpenSSLErrorQueue.drain() ?? "no detail")")
        }
        return String(decoding: pem, as: UTF8.self)
    }
}

/// A P-256 public key that checks ES256 signatures.
///
/// Sendable: it only holds an immutable `EVPKey` (see there for the thread-safety argument).
public final class P256PublicKey: Sendable {
    package let key: EVPKey
    /// Verification contexts initialised for this key, reused across calls: setting one up
    /// (EVP_PKEY_CTX_new + EVP_PKEY_verify_init) costs several microseconds per verification.
    private let contexts = Mutex<[VerifyContext]>([])
    private static let pooledContexts = 8

    init(checked key: EVPKey) throws(CryptoError) {
        guard key.isP256 else { throw CryptoError(.invalidKey, "public key is not an EC P-256 key") }
        self.key = key
    }

    public convenience init(derSubjectPublicKeyInfo der: [UInt8]) throws(CryptoError) {
        try self.init(checked: EVPKey.fromSubjectPublicKeyInfo(der))
    }

    /// Parses a `BEGIN PUBLIC KEY` PEM block.
    public convenience init(pem: String) throws(CryptoError) {
        try self.init(checked: EVPKey.fromPublicKeyPEM(pem))
    }

    /// SubjectPublicKeyInfo DER.
    public var derRepresentation: [UInt8] { key.subjectPublicKeyInfo }

    /// Whether `rawRS` (JOSE r||s, exactly 64 bytes) is a valid ECDSA/SHA-256 signature of
    /// `message`. Any other length, including DER, is refused; both low and high S are accepted
    /// (ECDSA itself does not forbid either and Apple does not normalise).
    public func isValidSignature(_ rawRS: [UInt8], for message: [UInt8]) -> Bool {
        message.withUnsafeBytes { isValidSignature(rawRS, for: $0) }
    }

    /// As `isValidSignature(_:for:)` over raw bytes. Do not escape the pointer.
    public func isValidSignature(_ rawRS: [UInt8], for message: UnsafeRawBufferPointer) -> Bool {
        isValidSignature(rawRS, digest: SHA256.hash(message))
    }

    /// Whether `rawRS` (JOSE r||s, exactly 64 bytes) signs a message whose SHA-256 is `digest`
    /// (for callers that hash the message themselves, e.g. with `SHA256Prefix`).
    public func isValidSignature(_ rawRS: [UInt8], digest: [UInt8]) -> Bool {
        guard digest.count == SHA256.byteCount, let der = ECDSASignatureEncoding.der(fromRaw: rawRS) else { return false }
        guard let context = contexts.withLock({ $0.popLast() }) ?? VerifyContext(key) else { return false }
        let valid = EVP_PKEY_verify(context.handle, der, der.count, digest, digest.count) == 1
        if !valid { OpenSSLErrorQueue.clear() }
        contexts.withLock { if $0.count < Self.pooledContexts { $0.append(context) } }
        return valid
    }
}

/// One EVP_PKEY_CTX initialised for verification with one key, used by one thread at a time.
///
/// `@unchecked Sendable`: it only moves between threads through `P256PublicKey`'s locked pool,
/// which hands it to one caller at a time; it holds its own reference to the key.
private final class VerifyContext: @unchecked Sendable {
    let handle: OpaquePointer
    private let key: EVPKey

    init?(_ key: EVPKey) {
        guard let handle = EVP_PKEY_CTX_new_from_pkey(nil, key.handle, nil) else {
            OpenSSLErrorQueue.clear()
            return nil
        }
        guard EVP_PKEY_verify_init(handle) == 1 else {
            EVP_PKEY_CTX_free(handle)
            OpenSSLErrorQueue.clear()
            return nil
        }
        self.handle = handle
        self.key = key
    }

    deinit { EVP_PKEY_CTX_free(handle) }
}

/// JWS signature algorithms this project verifies (RFC 7518 §3.1 names).
public enum JWSAlgorithm: String, Sendable, CaseIterable {
    /// ECDSA P-256 with SHA-256, raw r||s signature.
    case es256 = "ES256"
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    case rs256 = "RS256"
    /// Ed25519 (RFC 8037: `EdDSA` with the curve named by the key).
    case edDSA = "EdDSA"
}

/// A public key of any supported type (EC P-256, RSA ≥ 2048 bits or Ed25519), e.g. an identity
/// provider's token-signing key.
///
/// Sendable: it only holds an immutable `EVPKey` (see there for the thread-safety argument).
public final class PublicKey: Sendable {
    let key: EVPKey

    /// Smallest RSA modulus accepted: shorter keys are factorable today.
    public static let minimumRSABits = 2048

    private init(checked key: EVPKey) throws(CryptoError) {
        guard key.isP256 || key.isEd25519 || (key.isRSA && key.bits >= Self.minimumRSABits) else {
            throw CryptoError(
                .invalidKey, "only EC P-256, Ed25519 and RSA keys of at least \(Self.minimumRSABits) bits are supported")
        }
        self.key = key
    }

    /// Parses a `BEGIN PUBLIC KEY` PEM block.
    public convenience init(pem: String) throws(CryptoError) {
        try self.init(checked: EVPKey.fromPublicKeyPEM(pem))
    }

    public convenience init(derSubjectPublicKeyInfo der: [UInt8]) throws(CryptoError) {
        try self.init(checked: EVPKey.fromSubjectPublicKeyInfo(der))
    }

    /// The algorithm this key can verify.
    public var algorithm: JWSAlgorithm { key.isP256 ? .es256 : key.isEd25519 ? .edDSA : .rs256 }

    /// Whether `signature` (in its JWS encoding) signs `message` under `algorithm`; false when
    /// the algorithm does not match the key type, so a token cannot pick a weaker check.
    public func isValidSignature(_ signature: [UInt8], for message: [UInt8], algorithm: JWSAlgorithm) -> Bool {
        guard algorithm == self.algorithm else { return false }
        return message.withUnsafeBytes { message in
            switch algorithm {
            case .es256:
                guard let der = ECDSASignatureEncoding.der(fromRaw: signature) else { return false }
                return key.verify(derSignature: der, message: message)
            case .rs256:
                return key.verify(derSignature: signature, message: message)
            case .edDSA:
                return key.verify(signature: signature, message: message, digest: nil)
            }
        }
    }
}
