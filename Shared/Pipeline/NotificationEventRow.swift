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
            payloadKeyID: sealed.keyID, traceID: traceID)
    }

    /// Transaction ids read from a nested signed transaction WITHOUT verifying it: they only choose
    /// the Kafka partition and fill the lookup columns; the worker verifies the JWS before using
    /// anything in it. Identifiers that are not short plain tokens are dropped.
    public static func routingIdentifiers(of signedTransaction: String?) -> (
        transactionID: String?, originalTransactionID: String?
    ) {
        guard let token = signedTransaction else { return (nil, nil) }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let bytes = Base64URL.decode(parts[1]),
            let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
        else { return (nil, nil) }
        func identifier(_ key: String) -> String? {
            guard let value = object[key] as? String, !value.isEmpty, value.count <= 64,
                value.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_") })
            else { return nil }
            return value
        }
        return (identifier("transactionId"), identifier("originalTransactionId"))
    }
}
