import COpenSSL

/// A private key that signs JWS with one algorithm (RS256, ES256 or EdDSA), made fresh: what
/// tests use to play an identity provider whose keys exist only while they run.
///
/// Sendable: it only holds an immutable `EVPKey` (see there for the thread-safety argument).
public final class JWSSigningKey: Sendable {
    public let algorithm: JWSAlgorithm
    private let key: EVPKey

    private init(algorithm: JWSAlgorithm, key: EVPKey) {
        self.algorithm = algorithm
        self.key = key
    }

    /// A fresh random key for `algorithm` (RSA keys have `PublicKey.minimumRSABits` bits).
    public static func generate(_ algorithm: JWSAlgorithm) -> JWSSigningKey {
        let type =
            switch algorithm {
            case .es256: "EC"
            case .rs256: "RSA"
            case .edDSA: "ED25519"
            }
        guard let context = EVP_PKEY_CTX_new_from_name(nil, type, nil) else { fatalError("\(type) key context: out of memory") }
        defer { EVP_PKEY_CTX_free(context) }
        var ready = EVP_PKEY_keygen_init(context) == 1
        switch algorithm {
        case .es256: ready = ready && EVP_PKEY_CTX_set_group_name(context, "P-256") == 1
        case .rs256: ready = ready && EVP_PKEY_CTX_set_rsa_keygen_bits(context, Int32(PublicKey.minimumRSABits)) == 1
        case .edDSA: break
        }
        var pkey: OpaquePointer?
        guard ready, EVP_PKEY_generate(context, &pkey) == 1, let pkey else {
            fatalError("\(type) key generation failed: \(OpenSSLErrorQueue.drain() ?? "no detail")")
        }
        return JWSSigningKey(algorithm: algorithm, key: EVPKey(taking: pkey))
    }

    /// The public half, re-imported from its encoding so it never holds the private numbers.
    public var publicKey: PublicKey {
        // A key this class generated is always one PublicKey accepts.
        try! PublicKey(derSubjectPublicKeyInfo: key.subjectPublicKeyInfo)
    }

    /// The signature of `message` in its JWS encoding (ES256: raw r||s).
    public func signature(for message: [UInt8]) throws(CryptoError) -> [UInt8] {
        switch algorithm {
        case .rs256:
            return try key.sign(message)
        case .edDSA:
            return try key.sign(message, digest: nil)
        case .es256:
            guard let raw = ECDSASignatureEncoding.raw(fromDER: try key.sign(message)) else {
                throw CryptoError(.internalFailure, "OpenSSL produced an unparsable ECDSA signature")
            }
            return raw
        }
    }
}
