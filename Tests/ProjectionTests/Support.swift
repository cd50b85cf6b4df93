import EventLog
import Foundation
import InboxDomain
import InboxSimulation
import InboxTesting
import PostgresClient
import Projections

extension TestDatabase {
    /// Appends `count` events of `simulation` in batches of `batchSize`, one batch after another
    /// (so the simulation's predicted positions hold). Every `inlineEvery`-th batch goes through the
    /// inline driver, as the API's writes do. Returns how many projections took a batch inline.
    @discardableResult
    func appendSimulated(
        _ simulation: inout MarketplaceSimulation, count: Int, batchSize: Int = 100, inlineEvery: Int? = nil
    ) async throws -> Int {
        var appended = 0
        var inlineApplied = 0
        var batchNumber = 0
        while appended < count {
            let batch = simulation.events(min(batchSize, count - appended))
            batchNumber += 1
            if let inlineEvery, batchNumber % inlineEvery == 0 {
                inlineApplied += try await client.withConnection { connection in
                    try InlineProjections().appendReporting(batch, on: connection).outcome.applied.count
                }
            } else {
                _ = try await store.append(batch)
            }
            appended += batch.count
        }
        return inlineApplied
    }
}

/// A catalogue event of any type as an event to append.
func newEvent(_ event: any CatalogueEvent) throws -> NewEvent {
    try NewEvent(catalogueEvent: event)
}
