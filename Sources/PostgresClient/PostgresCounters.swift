extension PostgresConnection {
    /// Adds `counts` to a table of counters by name (`name text PRIMARY KEY, count bigint`, such as
    /// `push_counters`), in one statement. `table` is the code's own constant.
    public func addToCounters(_ table: String, _ counts: [String: Int]) throws {
        guard let statement = Self.addingToCounters(table, counts) else { return }
        try query(statement.sql, binds: statement.binds)
    }

    /// `addToCounters`'s statement, to send with others (`executeWithNext`); nil for no counts.
    public static func addingToCounters(_ table: String, _ counts: [String: Int]) -> PostgresStatement? {
        let names = counts.keys.sorted()
        if names.isEmpty { return nil }
        return PostgresStatement(
            """
            INSERT INTO \(table) (name, count) SELECT * FROM unnest($1::text[], $2::bigint[])
            ON CONFLICT (name) DO UPDATE SET count = \(table).count + EXCLUDED.count
            """, names, names.map { Int64(counts[$0]!) })
    }
}

extension PostgresConnection {
    /// Loads `rows` with `COPY ... FROM STDIN` statements (`sql`) of at most `rowsPerStatement`
    /// rows each, `row` giving each element's fields. Inlinable, so that it is specialized for
    /// the caller's rows: unspecialized, walking them costs more than writing them.
    @inlinable
    public func copyIn<Rows: Collection>(
        _ rows: Rows, into sql: String, rowsPerStatement: Int, row: (Rows.Element) -> [String?]
    ) throws {
        var rest = rows[...]
        while !rest.isEmpty {
            let chunk = rest.prefix(max(1, rowsPerStatement))
            rest = rest.dropFirst(chunk.count)
            try copyIn(sql) { writer in
                for element in chunk { try writer.write(row: row(element)) }
            }
        }
    }
}
