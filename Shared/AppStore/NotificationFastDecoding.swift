import Foundation
import StrictJSON

/// The outer notification and its `data` decoded member by member, without Codable's generic
/// containers: the one payload every incoming request carries. Same rules as `StrictJSON.Value.decode`
/// (type mismatches are errors, null is absent, unknown members are ignored); the rarer
/// `summary`, `externalPurchaseToken` and `appData` objects go through Codable. The
/// equivalence with Foundation's JSONDecoder is checked by the model and fuzz tests.
extension ResponseBodyV2DecodedPayload {
    init(strictJSON value: StrictJSON.Value) throws {
        guard case .object(let members) = value else { throw value.typeMismatch(expected: Self.self, codingPath: []) }
        self.init()
        for (key, member) in members {
            if case .null = member { continue }
            switch key {
            case "notificationType": rawNotificationType = try string(member, key)
            case "subtype": rawSubtype = try string(member, key)
            case "notificationUUID": notificationUUID = try string(member, key)
            case "version": version = try string(member, key)
            case "signedDate": signedDate = try member.decode(Date.self, codingPath: [NotificationKey(key)])
            case "data": data = try NotificationData(strictJSON: member)
            case "summary": summary = try member.decode(Summary.self, codingPath: [NotificationKey(key)])
            case "externalPurchaseToken": externalPurchaseToken = try member.decode(ExternalPurchaseToken.self, codingPath: [NotificationKey(key)])
            case "appData": appData = try member.decode(AppData.self, codingPath: [NotificationKey(key)])
            default: continue
            }
        }
    }
}

extension NotificationData {
    init(strictJSON value: StrictJSON.Value) throws {
        guard case .object(let members) = value else { throw value.typeMismatch(expected: Self.self, codingPath: [NotificationKey("data")]) }
        self.init()
        for (key, member) in members {
            if case .null = member { continue }
            switch key {
            case "environment": rawEnvironment = try string(member, key)
            case "appAppleId": appAppleId = try member.decode(Int64.self, codingPath: [NotificationKey("data"), NotificationKey(key)])
            case "bundleId": bundleId = try string(member, key)
            case "bundleVersion": bundleVersion = try string(member, key)
            case "signedTransactionInfo": signedTransactionInfo = try string(member, key)
            case "signedRenewalInfo": signedRenewalInfo = try string(member, key)
            case "status": rawStatus = try member.decode(Int32.self, codingPath: [NotificationKey("data"), NotificationKey(key)])
            case "consumptionRequestReason": rawConsumptionRequestReason = try string(member, key)
            default: continue
            }
        }
    }
}

private func string(_ value: StrictJSON.Value, _ key: String) throws -> String {
    guard case .string(let string) = value else { throw value.typeMismatch(expected: String.self, codingPath: [NotificationKey(key)]) }
    return string
}

/// A coding key for error paths of the hand-written decoding.
private struct NotificationKey: CodingKey {
    let stringValue: String
    init(_ name: String) { stringValue = name }
    init?(stringValue: String) { self.stringValue = stringValue }
    var intValue: Int? { nil }
    init?(intValue: Int) { nil }
}

extension StrictJSON {
    /// Decodes `T`, through the hand-written path when there is one.
    static func decodeFast<T: Decodable>(_ type: T.Type, from bytes: UnsafeBufferPointer<UInt8>) throws -> T {
        let value = try parse(bytes)
        if T.self == ResponseBodyV2DecodedPayload.self { return try ResponseBodyV2DecodedPayload(strictJSON: value) as! T }
        return try value.decode(T.self)
    }
}
