import InboxDomain
import Testing

/// A payload of this test module with personal data: the witness outside the catalogue's module.
private struct NoteTaken: EventPayload, HoldsPersonalData {
    static let eventType = "note_taken"
    var personId: String
    var note: PersonalText
    var personalDataOwner: String { personId }
    static let personalFields = ["note"]
}

/// `EventPayload.personalData`, which the log's sealing asks of an `any EventPayload` instead of
/// casting it to `HoldsPersonalData`: it must answer for every type that holds personal data, and
/// only for those.
@Suite struct PersonalFieldsTests {
    @Test func everyPayloadWithPersonalDataSaysWhoseAndWhichFields() {
        let personal: [(any EventPayload, PersonalFields)] = [
            (
                InboxDomain.MessageSent(conversationId: "c1", messageId: "m1", authorSide: .buyer, authorId: "p-author", body: "Is it original?"),
                PersonalFields(owner: "p-author", fields: ["body"])
            ),
            (SignedIn(personId: "p-signed", signInId: "s1", platform: "web"), PersonalFields(owner: "p-signed", fields: ["device", "location"])),
            (AccountBlocked(personId: "p-blocked"), PersonalFields(owner: "p-blocked", fields: ["reason"])),
            (
                SavedSearchCreated(savedSearchId: "s1", personId: "p-search", name: "Speedmaster", query: .object([:]), interval: .daily, push: true),
                PersonalFields(owner: "p-search", fields: ["name"])
            ),
            (SavedSearchChanged(savedSearchId: "s1", personId: "p-renamed", name: "Seamaster"), PersonalFields(owner: "p-renamed", fields: ["name"])),
            (NoteTaken(personId: "p-note", note: .text("call back")), PersonalFields(owner: "p-note", fields: ["note"])),
        ]
        for (payload, expected) in personal {
            #expect(payload is any HoldsPersonalData)
            #expect(payload.personalData == expected, "\(type(of: payload))")
        }
        let impersonal: [any EventPayload] = [SavedSearchDeleted(savedSearchId: "s1", personId: "p1"), PasswordChanged(personId: "p1")]
        for payload in impersonal {
            #expect(!(payload is any HoldsPersonalData))
            #expect(payload.personalData == nil, "\(type(of: payload))")
        }
    }

    /// Every catalogue type that holds personal data is one of those checked above: a new one
    /// needs its line there.
    @Test func theCatalogueHoldsNoOtherPersonalTypes() {
        let personal = InboxCatalogue.eventTypes.filter { $0 is any HoldsPersonalData.Type }.map { $0.eventType }.sorted()
        #expect(personal == ["account_blocked", "message_sent", "saved_search_changed", "saved_search_created", "signed_in"])
    }
}
