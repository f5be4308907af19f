import AppStore
import Crypto
import Foundation
import Storage

extension NewNotificationEvent {
    /// The row of a notification whose outer signature was verified: its signed payload sealed at
    /// rest under the notification UUID, routed by the original transaction id of its nested
    /// transaction. Every intake of Apple's notifications (the webhook, the history recovery)
    /// stores them this way, so a worker cannot tell them apart and a duplicate UUID is one row.
    ///
    /// `requestBody` is Apple's request as received, given only when the notification will be
    /// forwarded: it is kept (sealed, under the same key) only when it is not the body the
    /// forwarding rebuilds from the payload (`NotificationRequestBody.canonical`), so the usual
    /// compact body costs no byte of table or WAL and an unusual one is forwarded as Apple sent it.
    public static func sealing(
        signedPayload: String, notificationUUID: String, type: String, subtype: String?, environment: String,
        signedDate: Date?, signedTransactionInfo: String?, cipher: PayloadCipher, traceID: String?,
        requestBody: [UInt8]? = nil
    ) throws -> NewNotificationEvent {
        let routing = routingIdentifiers(of: signedTransactionInfo)
        let sealed = try cipher.seal(Array(signedPayload.utf8), context: notificationUUID)
        var event = NewNotificationEvent(
            notificationUUID: notificationUUID, notificationType: type, subtype: subtype, environment: environment,
            signedDate: signedDate, transactionID: routing.transactionID, originalTransactionID: routing.originalTransactionID,
            routingKey: routing.originalTransactionID ?? notificationUUID, sealedPayload: sealed.sealed,
            payloadKeyID: sealed.keyID, traceID: traceID, payloadHash: SignedContent.hash(of: signedPayload))
        if let requestBody, !NotificationRequestBody.isCanonical(requestBody, signedPayload: signedPayload) {
            // Sealed under the payload's key (the cipher's first): one key id opens both.
            event.sealedRequestBody = try cipher.seal(
                requestBody, context: NotificationRequestBody.sealingContext(notificationUUID: notificationUUID)
            ).sealed
        }
        return event
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

/// The request body of an App Store Server Notification, as the forwarding sends it on.
public enum NotificationRequestBody {
    static let prefix = Array(#"{"signedPayload":""#.utf8)
    static let suffix = Array(#""}"#.utf8)

    /// The body Apple usually sends: `{"signedPayload":"…"}`, compact. A compact JWS is base64url
    /// and dots, so it needs no escaping.
    public static func canonical(signedPayload: String) -> [UInt8] {
        let plain = signedPayload.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\"") && $0 != UInt8(ascii: "\\") }
        guard plain else {
            // Never a verified token; encoded as JSON rather than sent broken.
            return Array((try? JSONEncoder().encode(["signedPayload": signedPayload])) ?? Data())
        }
        return prefix + Array(signedPayload.utf8) + suffix
    }

    /// Whether `body` is exactly `canonical(signedPayload:)`, compared in place (no copy of the
    /// 10 KB body on the ingress's path).
    public static func isCanonical(_ body: [UInt8], signedPayload: String) -> Bool {
        let payload = signedPayload.utf8
        guard body.count == prefix.count + payload.count + suffix.count else { return false }
        return body.prefix(prefix.count).elementsEqual(prefix) && body.suffix(suffix.count).elementsEqual(suffix)
            && body.dropFirst(prefix.count).prefix(payload.count).elementsEqual(payload)
    }

    /// The sealing context of a kept request body: apart from its payload's, so neither opens as the other.
    public static func sealingContext(notificationUUID: String) -> String { notificationUUID + "/request-body" }
}

extension WebhookStore.SealedNotification {
    /// The request body Apple sent, as the forwarding sends it on: the one the ingress kept when
    /// it was not the compact rebuild of the payload, else that rebuild (then the same bytes).
    public func requestBody(cipher: PayloadCipher) throws -> [UInt8] {
        if let sealedRequestBody {
            return try cipher.open(
                sealedRequestBody, keyID: payloadKeyID,
                context: NotificationRequestBody.sealingContext(notificationUUID: notificationUUID))
        }
        let jws = try cipher.open(sealedPayload, keyID: payloadKeyID, context: notificationUUID)
        return NotificationRequestBody.canonical(signedPayload: String(decoding: jws, as: UTF8.self))
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
