import Foundation
import ServiceRuntime

/// Seals signed payloads at rest with AES-256-GCM under rotating keys.
///
/// The first key seals; every listed key opens, so keys rotate by prepending a new one and
/// dropping the old one once no row sealed with it is retained. The key id is stored beside each
/// ciphertext and bound into it (as associated data, with the row's identity).
public struct PayloadCipher: Sendable {
    public struct Key: Sendable {
        public var id: String
        fileprivate var bytes: [UInt8]
    }
    public let keys: [Key]

    public init(keys: [(id: String, bytes: [UInt8])]) {
        precondition(!keys.isEmpty && keys.allSatisfy { $0.bytes.count == 32 }, "AES-256 keys are 32 bytes")
        self.keys = keys.map { Key(id: $0.id, bytes: $0.bytes) }
    }

    /// Reads `PAYLOAD_ENCRYPTION_KEYS` (`kid:base64key,…`, 32-byte keys, the first one seals).
    public init?(reader: ConfigurationReader) {
        let expected = "kid:base64key[,kid:base64key...] with 32-byte keys (e.g. `openssl rand -base64 32`)"
        guard let pairs = reader.pairs("PAYLOAD_ENCRYPTION_KEYS", expected: expected) else {
            if reader.raw("PAYLOAD_ENCRYPTION_KEYS") == nil { reader.report("PAYLOAD_ENCRYPTION_KEYS", nil, expected) }
            return nil
        }
        var keys: [(id: String, bytes: [UInt8])] = []
        for (id, encoded) in pairs {
            guard let bytes = Self.decodeBase64(encoded), bytes.count == 32, !keys.contains(where: { $0.id == id })
            else {
                reader.report("PAYLOAD_ENCRYPTION_KEYS", "\(id):…", expected + ", each key id once")
                return nil
            }
            keys.append((id, bytes))
        }
        self.init(keys: keys)
    }

    static func decodeBase64(_ text: String) -> [UInt8]? { Data(base64Encoded: text).map(Array.init) }

    /// Seals with the current key; `context` (e.g. the notification UUID) must be given again to open.
    public func seal(_ plaintext: [UInt8], context: String) throws -> (keyID: String, sealed: [UInt8]) {
        let key = keys[0]
        return (key.id, try AES256GCM.seal(plaintext, key: key.bytes, aad: Array((key.id + "|" + context).utf8)))
    }

    public func open(_ sealed: [UInt8], keyID: String, context: String) throws -> [UInt8] {
        guard let key = keys.first(where: { $0.id == keyID }) else { throw UnknownPayloadKey(keyID: keyID) }
        return try AES256GCM.open(sealed, key: key.bytes, aad: Array((key.id + "|" + context).utf8))
    }
}

/// A payload sealed under a key id that `PAYLOAD_ENCRYPTION_KEYS` no longer lists.
public struct UnknownPayloadKey: Error, Sendable {
    public let keyID: String
}
