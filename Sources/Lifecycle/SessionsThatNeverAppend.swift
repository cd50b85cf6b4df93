/// Sessions that never append to the event log say so in their `application_name`, which ends
/// with `" [no appends]"` (sql/017). The database refuses their inserts into the log, and an
/// inline writer counts their open transactions as no reason to leave its projections to the
/// async projectors: a projector's batch, a fan-out's or the mailer's claim no longer hold the
/// writers of the API back (docs/projections.md, "The inline driver").
public enum SessionsThatNeverAppend {
    static let marker = " [no appends]"

    /// `applicationName` marked as a session that never appends. PostgreSQL keeps at most 63 bytes
    /// of a name, so a name that would lose its mark is refused here rather than cut there.
    public static func applicationName(_ applicationName: String) -> String {
        let marked = applicationName + marker
        precondition(marked.utf8.count <= 63, "the application name \(marked) is longer than PostgreSQL keeps")
        return marked
    }
}
