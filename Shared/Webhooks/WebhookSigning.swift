import Crypto
import Foundation
import Storage

/// Standard Webhooks (standardwebhooks.com) secrets and signatures: a secret is `whsec_` and the
/// base64 of random bytes; a message's signature is `v1,` and the base64 of
/// HMAC-SHA256(secret bytes, "{webhook-id}.{webhook-timestamp}.{body}").
public enum WebhookSigning {
    static let prefix = "whsec_"

    /// A new secret: 32 random bytes.
    public static func newSecret() -> String {
        prefix + Data(SecureRandom.bytes(32)).base64EncodedString()
    }

    /// The key bytes of a `whsec_…` secret; nil when it is not one.
    public static func key(ofSecret secret: String) -> [UInt8]? {
        guard secret.hasPrefix(prefix), let bytes = Data(base64Encoded: String(secret.dropFirst(prefix.count))), !bytes.isEmpty
        else { return nil }
        return Array(bytes)
    }

    /// The `webhook-signature` header's value: one `v1,…` per key, space-separated (during a
    /// rotation's overlap a receiver holding either secret finds its own).
    public static func signature(id: String, timestamp: Int64, body: [UInt8], keys: [[UInt8]]) -> String {
        let content = Array("\(id).\(timestamp).".utf8) + body
        return keys.map { "v1," + Data(HMACSHA256.authenticate(key: $0, message: content)).base64EncodedString() }
            .joined(separator: " ")
    }

    /// Seals a secret for `webhook_endpoint`, bound to the endpoint's id.
    public static func seal(_ secret: String, endpointID: String, cipher: PayloadCipher) throws -> WebhookStore.SealedSecret {
        let (keyID, sealed) = try cipher.seal(Array(secret.utf8), context: "webhook:" + endpointID)
        return WebhookStore.SealedSecret(keyID: keyID, sealed: sealed)
    }

    /// The key bytes of a sealed secret.
    public static func openKey(_ sealed: WebhookStore.SealedSecret, endpointID: String, cipher: PayloadCipher) throws -> [UInt8] {
        let secret = String(decoding: try cipher.open(sealed.sealed, keyID: sealed.keyID, context: "webhook:" + endpointID), as: UTF8.self)
        guard let key = key(ofSecret: secret) else { throw CorruptWebhookSecret(endpointID: endpointID) }
        return key
    }
}

/// A sealed secret that opened to something other than a `whsec_` secret.
public struct CorruptWebhookSecret: Error, Sendable {
    public let endpointID: String
}
