extension PostgresConnection {
    /// Adds `counts` to a table of counters by name (`name text PRIMARY KEY, count bigint`, such as
    /// `push_counters` and `mail_counters`), in one statement. `table` is the code's own constant.
    public func addToCounters(_ table: String, _ counts: [String: Int]) throws {
        let names = counts.keys.sorted()
        if names.isEmpty { return }
        try query(
            """
            INSERT INTO \(table) (name, count) SELECT * FROM unnest($1::text[], $2::bigint[])
            ON CONFLICT (name) DO UPDATE SET count = \(table).count + EXCLUDED.count
            """, names, names.map { Int64(counts[$0]!) })
    }
}
