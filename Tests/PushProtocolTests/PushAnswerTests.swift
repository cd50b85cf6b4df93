import Foundation
import PushProtocol
import Testing

/// What the sender does with each documented answer of APNs and FCM.
@Suite struct PushAnswerTests {
    static let now = Date(timeIntervalSince1970: 784_111_777)  // Sun, 06 Nov 1994 08:49:37 GMT

    static func apns(_ status: Int, _ reason: String?, retryAfter: String? = nil) -> PushOutcome {
        let body = reason.map { Array(#"{"reason":"\#($0)","timestamp":1700000000000}"#.utf8) } ?? []
        return APNsAnswer.classify(status: status, body: body, retryAfter: retryAfter, now: now)
    }

    static func fcmBody(status: String, message: String, errorCode: String?, extra: String = "") -> [UInt8] {
        let details = errorCode.map { #"{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#($0)"}"# } ?? ""
        let joined = [details, extra].filter { !$0.isEmpty }.joined(separator: ",")
        return Array(#"{"error":{"code":400,"message":"\#(message)","status":"\#(status)","details":[\#(joined)]}}"#.utf8)
    }

    static func fcm(_ status: Int, _ body: [UInt8], retryAfter: String? = nil) -> PushOutcome {
        FCMAnswer.classify(status: status, body: body, retryAfter: retryAfter, now: now)
    }

    @Test func apnsAnswersFollowApplesTable() {
        #expect(Self.apns(200, nil) == .delivered)
        #expect(Self.apns(410, "Unregistered") == .unregistered(reason: "Unregistered"))
        #expect(Self.apns(410, "ExpiredToken") == .unregistered(reason: "ExpiredToken"))
        #expect(Self.apns(400, "DeviceTokenNotForTopic") == .unregistered(reason: "DeviceTokenNotForTopic"))
        #expect(Self.apns(400, "BadDeviceToken") == .badDeviceToken)
        #expect(Self.apns(403, "ExpiredProviderToken") == .expiredProviderToken)
        #expect(Self.apns(429, "TooManyRequests") == .retry(reason: "TooManyRequests", after: nil))
        #expect(Self.apns(429, "TooManyProviderTokenUpdates") == .retry(reason: "TooManyProviderTokenUpdates", after: nil))
        #expect(Self.apns(500, "InternalServerError") == .retry(reason: "InternalServerError", after: nil))
        #expect(Self.apns(503, "ServiceUnavailable", retryAfter: "120") == .retry(reason: "ServiceUnavailable", after: .seconds(120)))
        #expect(Self.apns(503, "Shutdown") == .retry(reason: "Shutdown", after: nil))
        #expect(Self.apns(502, nil) == .retry(reason: "HTTP 502", after: nil))
        #expect(Self.apns(400, "IdleTimeout") == .retry(reason: "IdleTimeout", after: nil))
        for reason in ["PayloadTooLarge", "MissingTopic", "BadCollapseId", "BadTopic", "TopicDisallowed", "BadPriority", "InvalidProviderToken", "Forbidden", "BadPath", "MethodNotAllowed"] {
            let status = reason == "PayloadTooLarge" ? 413 : reason == "BadPath" ? 404 : reason == "MethodNotAllowed" ? 405 : reason.hasSuffix("Token") || reason == "Forbidden" ? 403 : 400
            #expect(Self.apns(status, reason) == .permanent(reason: reason), "\(reason)")
        }
        #expect(APNsAnswer.classify(status: 400, body: Array("<html>".utf8), retryAfter: nil, now: Self.now) == .permanent(reason: "HTTP 400"))
    }

    @Test func fcmAnswersFollowGooglesErrorCodes() {
        #expect(Self.fcm(200, Array(#"{"name":"projects/p/messages/1"}"#.utf8)) == .delivered)
        #expect(Self.fcm(404, Self.fcmBody(status: "NOT_FOUND", message: "Requested entity was not found.", errorCode: "UNREGISTERED"))
            == .unregistered(reason: "UNREGISTERED: Requested entity was not found."))
        #expect(Self.fcm(400, Self.fcmBody(status: "INVALID_ARGUMENT", message: "The registration token is not a valid FCM registration token", errorCode: "INVALID_ARGUMENT"))
            == .unregistered(reason: "INVALID_ARGUMENT: The registration token is not a valid FCM registration token"))
        let tokenViolation = #"{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"message.token","description":"Invalid registration token"}]}"#
        if case .unregistered = Self.fcm(400, Self.fcmBody(status: "INVALID_ARGUMENT", message: "Request contains an invalid argument.", errorCode: nil, extra: tokenViolation)) {
        } else {
            Issue.record("a BadRequest violation of message.token deletes the registration")
        }
        let dataViolation = #"{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"message.data[0].value","description":"Invalid value"}]}"#
        #expect(Self.fcm(400, Self.fcmBody(status: "INVALID_ARGUMENT", message: "Invalid value at 'message.data[0].value' (TYPE_STRING), 12", errorCode: nil, extra: dataViolation))
            == .permanent(reason: "INVALID_ARGUMENT: Invalid value at 'message.data[0].value' (TYPE_STRING), 12"))
        #expect(Self.fcm(403, Self.fcmBody(status: "PERMISSION_DENIED", message: "SenderId mismatch", errorCode: "SENDER_ID_MISMATCH"))
            == .permanent(reason: "SENDER_ID_MISMATCH: SenderId mismatch"))
        #expect(Self.fcm(401, Self.fcmBody(status: "UNAUTHENTICATED", message: "Auth error from APNS or Web Push Service", errorCode: "THIRD_PARTY_AUTH_ERROR"))
            == .permanent(reason: "THIRD_PARTY_AUTH_ERROR: Auth error from APNS or Web Push Service"))
        #expect(Self.fcm(401, Self.fcmBody(status: "UNAUTHENTICATED", message: "Request had invalid authentication credentials.", errorCode: nil)) == .expiredProviderToken)
        #expect(Self.fcm(401, []) == .expiredProviderToken)
        #expect(Self.fcm(429, Self.fcmBody(status: "RESOURCE_EXHAUSTED", message: "Quota exceeded", errorCode: "QUOTA_EXCEEDED"), retryAfter: "30")
            == .retry(reason: "QUOTA_EXCEEDED: Quota exceeded", after: .seconds(30)))
        #expect(Self.fcm(503, Self.fcmBody(status: "UNAVAILABLE", message: "The service is currently unavailable.", errorCode: "UNAVAILABLE"))
            == .retry(reason: "UNAVAILABLE: The service is currently unavailable.", after: nil))
        #expect(Self.fcm(500, Self.fcmBody(status: "INTERNAL", message: "Internal error encountered.", errorCode: "INTERNAL"))
            == .retry(reason: "INTERNAL: Internal error encountered.", after: nil))
        #expect(Self.fcm(502, Array("<html>Bad Gateway</html>".utf8)) == .retry(reason: "HTTP 502", after: nil))
        // A wrong project in the URL is a 404 without UNREGISTERED: it must not delete anything.
        #expect(Self.fcm(404, Self.fcmBody(status: "NOT_FOUND", message: "Requested entity was not found.", errorCode: nil))
            == .permanent(reason: "NOT_FOUND: Requested entity was not found."))
    }

    @Test func theDetailsErrorCodeWinsOverTheStatus() {
        // UNREGISTERED with status NOT_FOUND; SENDER_ID_MISMATCH with status PERMISSION_DENIED; an
        // unknown status falls back on the HTTP class.
        #expect(Self.fcm(400, Self.fcmBody(status: "INVALID_ARGUMENT", message: "m", errorCode: "UNREGISTERED")) == .unregistered(reason: "UNREGISTERED: m"))
        #expect(Self.fcm(503, Self.fcmBody(status: "SOMETHING_NEW", message: "m", errorCode: nil)) == .retry(reason: "SOMETHING_NEW: m", after: nil))
        #expect(Self.fcm(418, Self.fcmBody(status: "SOMETHING_NEW", message: "", errorCode: nil)) == .permanent(reason: "SOMETHING_NEW"))
    }

    @Test func retryAfterIsSecondsOrAnHTTPDate() {
        #expect(RetryAfter.parse("120", now: Self.now) == .seconds(120))
        #expect(RetryAfter.parse(" 0 ", now: Self.now) == .seconds(0))
        #expect(RetryAfter.parse("Sun, 06 Nov 1994 08:50:37 GMT", now: Self.now) == .seconds(60))
        #expect(RetryAfter.parse("Mon, 07 Nov 1994 08:49:37 GMT", now: Self.now) == .seconds(86_400))
        #expect(RetryAfter.parse("Sun, 06 Nov 1994 08:48:37 GMT", now: Self.now) == .seconds(0))
        #expect(RetryAfter.parse("Thu, 29 Feb 2024 23:59:59 GMT", now: Date(timeIntervalSince1970: 1_709_251_199)) == .seconds(0))
        for unreadable in [nil, "", "-5", "soon", "1.5", "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Foo 1994 08:49:37 GMT", "99999999999"] {
            #expect(RetryAfter.parse(unreadable, now: Self.now) == nil, "\(unreadable ?? "nil")")
        }
    }
}
