import Devices
import Foundation
import InboxTesting
import PostgresClient
import Testing

/// The push registrations without HTTP, against a real PostgreSQL: what the API and the push
/// fan-out both rely on.
@Suite struct DeviceRegistryTests {
    static let iPhone = Device.Details(platform: "ios", appId: "eu.wristler.app", appVersion: "2.4.0", name: "Jeffrey's iPhone", apnsEnvironment: "production")

    @Test func registeringANewTokenCreatesARegistrationOfThePerson() async throws {
        try await withTestDatabase { db in
            let registry = DeviceRegistry(client: db.client)
            let registration = try registry.register(person: "alice", pushToken: "tok-1", details: Self.iPhone)
            guard case .created(let device) = registration else { Issue.record("not created: \(registration)"); return }
            #expect(device.personId == "alice")
            #expect(device.pushToken == "tok-1")
            #expect(device.platform == "ios")
            #expect(device.name == "Jeffrey's iPhone")
            #expect(try registry.device(device.id, of: "alice") == device)
            #expect(try registry.devices(of: "alice", limit: 10) == [device])
        }
    }

    @Test func reRegisteringTheSameTokenForTheSamePersonUpdatesItsRegistration() async throws {
        try await withTestDatabase { db in
            let registry = DeviceRegistry(client: db.client)
            let first = try registry.register(person: "alice", pushToken: "tok-1", details: Self.iPhone).device
            let again = try registry.register(person: "alice", pushToken: "tok-1", details: Device.Details(appVersion: "2.5.0"))
            guard case .updated(let device) = again else { Issue.record("not updated: \(again)"); return }
            #expect(device.id == first.id, "the same registration")
            #expect(device.appVersion == "2.5.0")
            #expect(device.name == "Jeffrey's iPhone", "what was not sent is kept")
            #expect(try registry.devices(of: "alice", limit: 10).count == 1)
        }
    }

    @Test func aTokenRegisteredByAnotherPersonMovesToThemAsANewRegistration() async throws {
        try await withTestDatabase { db in
            let registry = DeviceRegistry(client: db.client)
            let alices = try registry.register(person: "alice", pushToken: "tok-1", details: Self.iPhone).device
            let takeover = try registry.register(person: "bob", pushToken: "tok-1", details: Device.Details(platform: "ios"))
            guard case .created(let bobs) = takeover else { Issue.record("not created: \(takeover)"); return }
            #expect(bobs.id != alices.id)
            #expect(bobs.personId == "bob")
            #expect(bobs.name == nil, "nothing of the previous owner's registration carries over")
            #expect(try registry.device(alices.id, of: "alice") == nil, "the previous owner's id stops working")
            #expect(try registry.devices(of: "alice", limit: 10).isEmpty)
            #expect(try registry.devices(of: "bob", limit: 10) == [bobs])
        }
    }

    @Test func deletingByPushTokenRemovesWhoeversRegistrationAndSaysWhetherThereWasOne() async throws {
        try await withTestDatabase { db in
            let registry = DeviceRegistry(client: db.client)
            let device = try registry.register(person: "alice", pushToken: "tok-dead", details: Self.iPhone).device
            let kept = try registry.register(person: "alice", pushToken: "tok-alive", details: Self.iPhone).device
            #expect(try registry.delete(pushToken: "tok-dead"))
            #expect(try registry.device(device.id, of: "alice") == nil)
            #expect(try registry.devices(of: "alice", limit: 10) == [kept])
            #expect(try !registry.delete(pushToken: "tok-dead"), "gone already")
            #expect(try !registry.delete(pushToken: "tok-never-seen"))
        }
    }

    @Test func somebodyElsesDeviceCannotBeReadChangedNorDeletedById() async throws {
        try await withTestDatabase { db in
            let registry = DeviceRegistry(client: db.client)
            let alices = try registry.register(person: "alice", pushToken: "tok-1", details: Self.iPhone).device
            #expect(try registry.device(alices.id, of: "bob") == nil)
            #expect(try registry.change(alices.id, of: "bob", to: Device.Details(name: "mine now")) == nil)
            #expect(try !registry.delete(alices.id, of: "bob"))
            #expect(try registry.device(alices.id, of: "alice") == alices, "untouched")
            #expect(try registry.delete(alices.id, of: "alice"))
            #expect(try registry.devices(of: "alice", limit: 10).isEmpty)
        }
    }

    @Test func changingKeepsWhatIsNotSentAndTheToken() async throws {
        try await withTestDatabase { db in
            let registry = DeviceRegistry(client: db.client)
            let device = try registry.register(person: "alice", pushToken: "tok-1", details: Self.iPhone).device
            let changed = try #require(try registry.change(device.id, of: "alice", to: Device.Details(name: "Work phone", locale: "en-GB")))
            #expect(changed.name == "Work phone")
            #expect(changed.locale == "en-GB")
            #expect(changed.appVersion == "2.4.0")
            #expect(changed.pushToken == "tok-1")
            #expect(changed.updatedAt >= device.updatedAt)
        }
    }
}
