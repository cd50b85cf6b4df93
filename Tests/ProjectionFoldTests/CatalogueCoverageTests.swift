import InboxDomain
import Projections
import Testing

/// Every type of the catalogue is, for every projection, either handled by its fold or ignored on
/// purpose: a type added to the catalogue fails here, naming it, until each projection says which.
@Suite struct CatalogueCoverageTests {
    @Test(arguments: InboxProjections.all.map(\.name))
    func everyCatalogueTypeIsHandledOrDeliberatelyIgnored(projectionName: String) throws {
        let projection = try #require(InboxProjections.named(projectionName))
        for type in InboxCatalogue.eventTypes.map({ $0.eventType }) {
            let handled = projection.eventTypes.contains(type)
            let ignored = projection.ignoredEventTypes.contains(type)
            #expect(handled || ignored, "projection \(projection.name) neither handles nor ignores the catalogue type \(type)")
            #expect(!(handled && ignored), "projection \(projection.name) both handles and ignores \(type)")
        }
    }

    @Test(arguments: InboxProjections.all.map(\.name))
    func aProjectionNamesOnlyTypesOfTheCatalogue(projectionName: String) throws {
        let projection = try #require(InboxProjections.named(projectionName))
        for type in projection.eventTypes.union(projection.ignoredEventTypes) {
            #expect(InboxCatalogue.isKnown(type), "projection \(projection.name) names \(type), which is not in the catalogue")
        }
    }

}
