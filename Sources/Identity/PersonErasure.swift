import EventLog
import Foundation
import InboxDomain
import Mail
import PostgresClient
import Projections
import Uploads

/// Erasing a person (GDPR article 17; docs/event-log.md, "Erasing a person"): `inbox erase
/// --person ID`, and closing an account with `erase: true`. In the caller's transaction:
///
/// - their data key is deleted and they are remembered as erased (`PersonalDataKeys.erase`): every
///   personal field of theirs in the log, and in every backup of it, is unreadable from then on;
/// - their account (when it has one) is closed as `POST /v1/me/closure` closes it, and their push
///   registrations, mail contact and waiting mails are deleted (state, not history);
/// - their uploads expire at once (`UploadStore.forget`): `404` to everybody from the commit on,
///   and the next upload sweep of every API node deletes their records, objects and files;
/// - `person_erased` is appended and projected inline into the threads, people and preferences, so
///   their message bodies, blocks' reasons and saved searches' names are gone from the read models
///   at once (or when the projectors reach it, if they are behind).
///
/// The log keeps every event, the thread, its order and the other party's messages: an erased
/// message reads `body: null` with `meta.erased: true`.
public enum PersonErasure {
    public struct Outcome: Sendable, Equatable {
        /// A data key was there to delete (false: nothing of theirs was ever sealed, or it was erased before).
        public var deletedKey: Bool
        /// An account was there, and was closed.
        public var closedAccount: Bool
        /// Events of theirs appended before their fields were sealed (before sealing was on), whose
        /// personal fields the log still holds in the clear: the log cannot change them.
        public var unsealedEvents: Int
        /// Their uploads, now expired; the upload sweep deletes them with their files.
        public var uploads: Int
    }

    /// The projections an erasure brings in line in its own transaction.
    public static let inline = InlineProjections(projections: [ThreadsProjection(), PeopleProjection(), PreferencesProjection()])

    public static func erase(
        _ personId: String, metadata: EventMetadata, appleClientId: String?, validator: EventValidator?, on connection: PostgresConnection
    ) throws -> Outcome {
        let deletedKey = try PersonalDataKeys.erase(personId, on: connection)
        let account = try Accounts.find(personId: personId, on: connection) != nil
        var events: [any CatalogueEvent] = []
        if account {
            try AccountClosureRoutes.close(personId, appleClientId: appleClientId, on: connection)
            events.append(AccountClosed(personId: personId))
        } else {
            _ = try connection.query("DELETE FROM devices WHERE person_id = $1", personId)
            _ = try Contacts.delete(personId: personId, on: connection)
        }
        _ = try connection.query("DELETE FROM mail_queue WHERE person_id = $1", personId)
        let uploads = try UploadStore.forget(person: personId, on: connection)
        events.append(PersonErased(personId: personId))
        let appended = try events.map { try NewEvent(catalogueEvent: $0, metadata: metadata) }
        if let validator { for (index, event) in appended.enumerated() { try validator.check(event, index: index) } }
        try inline.append(appended, on: connection)
        let unsealed = try connection.query(
            """
            SELECT count(*)::int FROM events
            WHERE type = ANY($2::text[]) AND NOT payload ? '$seal' AND coalesce(payload->>'authorId', payload->>'personId') = $1
            """, personId, Array(PersonalDataKeys.personalTypes)
        ).scalar(Int.self)
        return Outcome(deletedKey: deletedKey, closedAccount: account, unsealedEvents: unsealed, uploads: uploads)
    }
}
