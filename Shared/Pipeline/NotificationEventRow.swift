import AppStore
import Crypto
import Foundation
import Storage

extension NewNotificationEvent {
    /// The row of a notification whose outer signature was verified: its signed payload sealed at
    /// rest under the notification UUID, routed by the original transaction id of its nested
    /// transaction. Every intake of Apple's notifications (the webhook, the history recovery)
    /// stores them this way, so a worker cannot tell them apart and a duplicate UUID is one row.
    public static func sealing(
        signedPayload: String, notificationUUID: String, type: String, subtype: String?, environment: String,
        signedDate: Date?, signedTransactionInfo: String?, cipher: PayloadCipher, traceID: String?
    ) throws -> NewNotificationEvent {
        let routing = routingIdentifiers(of: signedTransactionInfo)
        let sealed = try cipher.seal(Array(signedPayload.utf8), context: notificationUUID)
        return NewNotificationEvent(
            notificationUUID: notificationUUID, notificationType: type, subtype: subtype, environment: environment,
            signedDate: signedDate, transactionID: routing.transactionID, originalTransactionID: routing.originalTransactionID,
            routingKey: routing.originalTransactionID ?? notificationUUID, sealedPayload: sealed.sealed,
            payloadKeyID: sealed.keyID, traceID: traceID, payloadHash: SignedContent.hash(of: signedPayload))
    }

    /// Transaction ids read from the nested signed transaction WITHOUT verifying it: they only
    /// choose the Kafka partition; the worker verifies the nested JWS before using anything in it.
    /// Runs for every notification, so the token is cut on bytes and read with the verifier's
    /// fast JSON parser (a malformed payload simply routes by notification UUID).
    public static func routingIdentifiers(of signedTransaction: String?) -> (
        transactionID: String?, originalTransactionID: String?
    ) {
        guard let token = signedTransaction, let parts = JWSParts(token), let payload = Base64URL.decode(parts.payload),
            let claims = try? AppStoreJSON.decode(RoutingClaims.self, from: payload)
        else {
            return (nil, nil)
        }
        func identifier(_ value: String?) -> String? {
            guard let value, !value.isEmpty, value.utf8.count <= 64,
                value.utf8.allSatisfy({ byte in
                    switch byte {
                    case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                        UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                        true
                    default: false
                    }
                })
            else { return nil }
            return value
        }
        return (identifier(claims.transactionId), identifier(claims.originalTransactionId))
    }

    /// The only claims routing reads; any other member is ignored.
    private struct RoutingClaims: Decodable {
        let transactionId: String?
        let originalTransactionId: String?
    }
}

/// The identity of signed data for deduplication.
public enum SignedContent {
    /// Hex SHA-256 of what a compact JWS's signature covers (`header.payload`), never of the
    /// signature bytes: an ECDSA signature (r, s) has a twin (r, n−s) that verifies just as well,
    /// so two encodings of one signed content must count as one. The whole token when it is not
    /// a compact JWS (only verified tokens get here).
    public static func hash(of jws: String) -> String {
        // Hashed in place: copying the 12 KB into an array first was 8 % of the ingress's CPU.
        Hex.encode(SHA256.hash((JWSParts(jws)?.signingInput ?? Substring(jws)).utf8))
    }
}
