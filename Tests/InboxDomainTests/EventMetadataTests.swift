import Foundation
import InboxDomain
import Testing

@Suite struct EventMetadataTests {
    static func encodedObject(_ metadata: EventMetadata) throws -> [String: Any] {
        let data = try JSONEncoder().encode(metadata)
        return try #require(JSONSerialization.jsonObject(with: data) as? [String: Any])
    }

    @Test(arguments: zip([Origin.appIOS, .appAndroid, .web, .api], ["app:ios", "app:android", "web", "api"]))
    func originEncodesAsItsWireName(origin: Origin, name: String) throws {
        let object = try Self.encodedObject(EventMetadata(origin: origin))
        #expect(object["origin"] as? String == name)
        let decoded = try JSONDecoder().decode(EventMetadata.self, from: Data(#"{"origin":"\#(name)"}"#.utf8))
        #expect(decoded.origin == origin)
    }

    @Test func everyOriginHasAWireNameTested() {
        #expect(Origin.allCases.map(\.rawValue) == ["app:ios", "app:android", "web", "api"])
    }

    @Test func metadataRoundTripsWithEveryField() throws {
        let metadata = EventMetadata(
            origin: .appAndroid, appVersion: "2.4.0", actor: "user-7", correlationId: "req-1", causationId: "evt-9",
            service: "inbox")
        let back = try JSONDecoder().decode(EventMetadata.self, from: JSONEncoder().encode(metadata))
        #expect(back == metadata)
        let object = try Self.encodedObject(metadata)
        #expect(object["appVersion"] as? String == "2.4.0")
        #expect(object["actor"] as? String == "user-7")
        #expect(object["correlationId"] as? String == "req-1")
        #expect(object["causationId"] as? String == "evt-9")
        #expect(object["service"] as? String == "inbox")
    }

    @Test func absentFieldsAreLeftOutOfTheEncoding() throws {
        let object = try Self.encodedObject(EventMetadata(origin: .web))
        #expect(Set(object.keys) == ["origin"])
    }

    @Test func theDefaultOriginIsAPI() {
        #expect(EventMetadata().origin == .api)
    }

    @Test(arguments: [#"{"origin":"app:windows"}"#, #"{"origin":"ios"}"#, #"{"actor":"u"}"#, #"{"origin":1}"#])
    func anUnknownOrMissingOriginDoesNotDecode(text: String) {
        #expect(throws: DecodingError.self) {
            try JSONDecoder().decode(EventMetadata.self, from: Data(text.utf8))
        }
    }
}
