import COpenSSL

/// The public numbers of a key as a JSON Web Key carries them (RFC 7518 §6, RFC 8037 §2):
/// unsigned big-endian bytes, decoded from base64url by the caller.
public enum PublicKeyComponents: Sendable, Hashable {
    /// `kty: RSA`: `n` and `e`.
    case rsa(modulus: [UInt8], exponent: [UInt8])
    /// `kty: EC`, `crv: P-256`: `x` and `y`, 32 bytes each.
    case p256(x: [UInt8], y: [UInt8])
    /// `kty: OKP`, `crv: Ed25519`: `x`, 32 bytes.
    case ed25519([UInt8])

    /// The DER SubjectPublicKeyInfo holding these numbers, which OpenSSL then parses and checks
    /// (a point off the curve, a malformed modulus) like any other key: the numbers are framed
    /// here, never interpreted.
    func subjectPublicKeyInfo() throws(CryptoError) -> [UInt8] {
        switch self {
        case .p256(let x, let y):
            guard x.count == 32, y.count == 32 else { throw CryptoError(.invalidKey, "P-256 x and y must be 32 bytes each") }
            // SEQUENCE { SEQUENCE { id-ecPublicKey, prime256v1 }, BIT STRING { 04 || x || y } }
            return Self.p256Prefix + [0x04] + x + y
        case .ed25519(let x):
            guard x.count == 32 else { throw CryptoError(.invalidKey, "an Ed25519 key must be 32 bytes") }
            // SEQUENCE { SEQUENCE { id-Ed25519 }, BIT STRING { x } } (RFC 8410)
            return Self.ed25519Prefix + x
        case .rsa(let modulus, let exponent):
            guard let n = DER.unsignedInteger(modulus), let e = DER.unsignedInteger(exponent) else {
                throw CryptoError(.invalidKey, "an RSA modulus and exponent must not be empty")
            }
            let rsaPublicKey = DER.element(0x30, n + e)
            // AlgorithmIdentifier { rsaEncryption, NULL }
            let algorithm = DER.element(0x30, [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01, 0x05, 0x00])
            return DER.element(0x30, algorithm + DER.element(0x03, [0x00] + rsaPublicKey))
        }
    }

    private static let p256Prefix: [UInt8] = [
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01, 0x06, 0x08, 0x2A, 0x86, 0x48, 0xCE,
        0x3D, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ]
    private static let ed25519Prefix: [UInt8] = [0x30, 0x2A, 0x30, 0x05, 0x06, 0x03, 0x2B, 0x65, 0x70, 0x03, 0x21, 0x00]
}

/// The few DER encodings a SubjectPublicKeyInfo needs.
private enum DER {
    /// Tag, definite length (short or long form), contents.
    static func element(_ tag: UInt8, _ contents: [UInt8]) -> [UInt8] {
        var length: [UInt8] = []
        if contents.count < 0x80 {
            length = [UInt8(contents.count)]
        } else {
            var remaining = contents.count
            while remaining > 0 {
                length.insert(UInt8(remaining & 0xFF), at: 0)
                remaining >>= 8
            }
            length.insert(0x80 | UInt8(length.count), at: 0)
        }
        return [tag] + length + contents
    }

    /// A positive INTEGER from unsigned big-endian bytes: leading zeros dropped, one put back
    /// when the top bit is set. Nil for no bytes at all.
    static func unsignedInteger(_ bytes: [UInt8]) -> [UInt8]? {
        guard !bytes.isEmpty else { return nil }
        var significant = Array(bytes.drop(while: { $0 == 0 }))
        if significant.isEmpty || significant[0] & 0x80 != 0 { significant.insert(0, at: 0) }
        return element(0x02, significant)
    }
}

extension PublicKey {
    /// A key from its JWK numbers; the same type and size limits as every `PublicKey`.
    public convenience init(components: PublicKeyComponents) throws(CryptoError) {
        try self.init(derSubjectPublicKeyInfo: components.subjectPublicKeyInfo())
    }

    /// SubjectPublicKeyInfo DER (the body of a `BEGIN PUBLIC KEY` PEM block).
    public var derRepresentation: [UInt8] { key.subjectPublicKeyInfo }

    /// The numbers a JWK of this key publishes.
    public var components: PublicKeyComponents {
        switch algorithm {
        case .es256:
            return .p256(x: key.bigNumber("qx", width: 32), y: key.bigNumber("qy", width: 32))
        case .rs256:
            return .rsa(modulus: key.bigNumber("n"), exponent: key.bigNumber("e"))
        case .edDSA:
            var raw = [UInt8](repeating: 0, count: 32)
            var length = raw.count
            guard EVP_PKEY_get_raw_public_key(key.handle, &raw, &length) == 1, length == 32 else {
                fatalError("EVP_PKEY_get_raw_public_key failed on an Ed25519 key: \(OpenSSLErrorQueue.drain() ?? "no detail")")
            }
            return .ed25519(raw)
        }
    }
}

extension EVPKey {
    /// A BIGNUM parameter of the key (RSA `n`/`e`, EC `qx`/`qy`) as unsigned big-endian bytes,
    /// left-padded to `width` when given. The caller knows the key has it.
    func bigNumber(_ name: String, width: Int? = nil) -> [UInt8] {
        var number: OpaquePointer?
        guard EVP_PKEY_get_bn_param(handle, name, &number) == 1, let number else {
            fatalError("EVP_PKEY_get_bn_param(\(name)) failed: \(OpenSSLErrorQueue.drain() ?? "no detail")")
        }
        defer { BN_free(number) }
        let count = width ?? (Int(BN_num_bits(number)) + 7) / 8
        var bytes = [UInt8](repeating: 0, count: count)
        guard BN_bn2binpad(number, &bytes, Int32(count)) == Int32(count) else {
            fatalError("BN_bn2binpad(\(name)) failed: the number is wider than \(count) bytes")
        }
        return bytes
    }
}
