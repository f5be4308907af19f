import Crypto
import Foundation
import Pipeline
import Postgres
import Storage
import TestSupport
import Testing

/// Forwarding sends each notification with Apple's exact request body. With forwarding configured
/// for its environment, the ingress keeps (sealed) a body that is not the compact rebuild of its
/// payload, and the forwarding reads back exactly those bytes; Apple's usual compact body keeps
/// nothing (its rebuild is the same bytes), and nothing is kept when nobody forwards.
@Suite(.timeLimit(.minutes(3)))
struct NotificationForwardBodyTests {
    let sandboxPath = "/api/v1/iap/apple/notifications/sandbox"

    /// Other whitespace, another member order and members Apple may add one day.
    static func unusualBody(_ jws: String) -> [UInt8] {
        Array("{\n  \"version\" : \"2.0\",\n  \"signedPayload\" :\t\"\(jws)\" ,\n  \"extra\": {\"a\": [1, 2.50, null]}\n}\n".utf8)
    }

    @Test func aBodyWithOtherWhitespaceAndAnExtraMemberIsForwardedByteForByte() async throws {
        try await IngressTestApp.with(extra: ["APPLE_NOTIFICATION_FORWARD_URL": "https://forward.example.com/apple"]) { harness in
            let (compactJWS, compactUUID) = try NotificationRouteTests().notification(harness)
            let compact = Array(#"{"signedPayload":""#.utf8) + Array(compactJWS.utf8) + Array(#""}"#.utf8)
            let (jws, uuid) = try NotificationRouteTests().notification(harness)
            let unusual = Self.unusualBody(jws)
            for body in [compact, unusual] {
                let response = await harness.request(
                    "POST", sandboxPath, headers: ["Content-Type": "application/json"], body: body)
                #expect(response.status == 200, "\(response.text)")
            }

            let forwarded = try await Self.forwarded(harness, [compactUUID, uuid])
            let cipher = try Self.cipher(harness)
            #expect(try forwarded[uuid]?.requestBody(cipher: cipher) == unusual, "Apple's bytes, whitespace and extra member included")
            #expect(try forwarded[compactUUID]?.requestBody(cipher: cipher) == compact)
            #expect(forwarded[compactUUID]?.sealedRequestBody == nil, "the usual compact body costs no second copy")
            // Sealed at rest like the payload: the stored bytes are not the body.
            #expect(
                try await harness.count(
                    "SELECT count(*) FROM inbound_event WHERE request_body IS NOT NULL AND position(convert_to('extra', 'UTF8') in request_body) = 0"
                ) == 1)
            // The same notification again (Apple's retry) changes nothing.
            let again = await harness.request("POST", sandboxPath, headers: ["Content-Type": "application/json"], body: unusual)
            #expect(try again.json()["status"] as? String == "duplicate")
            #expect(try await Self.forwarded(harness, [uuid])[uuid]?.requestBody(cipher: cipher) == unusual)
        }
    }

    @Test func nothingIsKeptWhenNobodyForwards() async throws {
        try await IngressTestApp.with { harness in
            let (jws, uuid) = try NotificationRouteTests().notification(harness)
            let response = await harness.request(
                "POST", sandboxPath, headers: ["Content-Type": "application/json"], body: Self.unusualBody(jws))
            #expect(response.status == 200, "\(response.text)")
            #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE notification_uuid = '\(uuid)'") == 1)
            #expect(try await harness.count("SELECT count(*) FROM inbound_event WHERE request_body IS NOT NULL") == 0)
        }
    }

    /// The stored notifications as the forwarding reads them, by UUID.
    static func forwarded(_ harness: IngressTestApp, _ uuids: [String]) async throws -> [String: WebhookStore.SealedNotification] {
        let ids = try await harness.pool.query(
            "SELECT id FROM inbound_event WHERE notification_uuid = ANY(\(PostgresArray(uuids))::text[])"
        ).map { try $0.decode("id", as: Int64.self) }
        #expect(ids.count == uuids.count)
        let notifications = try await WebhookStore(pool: harness.pool).notificationsToForward(ids)
        return Dictionary(uniqueKeysWithValues: notifications.map { ($0.notificationUUID, $0) })
    }

    /// The ingress's payload cipher, from its configuration.
    static func cipher(_ harness: IngressTestApp) throws -> PayloadCipher {
        let setting = try #require(harness.environment["PAYLOAD_ENCRYPTION_KEYS"])
        let parts = setting.split(separator: ":", maxSplits: 1).map(String.init)
        try #require(parts.count == 2)
        return PayloadCipher(keys: [(parts[0], Array(try #require(Data(base64Encoded: parts[1]))))])
    }
}
