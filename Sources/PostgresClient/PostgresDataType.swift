/// A PostgreSQL type, by its OID (the numbers are fixed in `pg_type.dat`).
public struct PostgresDataType: Hashable, Sendable, CustomStringConvertible {
    public let oid: UInt32
    public init(oid: UInt32) { self.oid = oid }

    /// Lets the server infer the parameter's type from the statement.
    public static let unspecified = PostgresDataType(oid: 0)
    public static let bool = PostgresDataType(oid: 16)
    public static let bytea = PostgresDataType(oid: 17)
    public static let name = PostgresDataType(oid: 19)
    public static let int8 = PostgresDataType(oid: 20)
    public static let int2 = PostgresDataType(oid: 21)
    public static let int4 = PostgresDataType(oid: 23)
    public static let text = PostgresDataType(oid: 25)
    public static let oidType = PostgresDataType(oid: 26)
    public static let xid = PostgresDataType(oid: 28)
    public static let json = PostgresDataType(oid: 114)
    public static let float4 = PostgresDataType(oid: 700)
    public static let float8 = PostgresDataType(oid: 701)
    public static let boolArray = PostgresDataType(oid: 1000)
    public static let int2Array = PostgresDataType(oid: 1005)
    public static let int4Array = PostgresDataType(oid: 1007)
    public static let textArray = PostgresDataType(oid: 1009)
    public static let varcharArray = PostgresDataType(oid: 1015)
    public static let int8Array = PostgresDataType(oid: 1016)
    public static let float8Array = PostgresDataType(oid: 1022)
    public static let bpchar = PostgresDataType(oid: 1042)
    public static let varchar = PostgresDataType(oid: 1043)
    public static let timestamp = PostgresDataType(oid: 1114)
    public static let timestamptz = PostgresDataType(oid: 1184)
    public static let timestamptzArray = PostgresDataType(oid: 1185)
    public static let numeric = PostgresDataType(oid: 1700)
    public static let uuid = PostgresDataType(oid: 2950)
    public static let uuidArray = PostgresDataType(oid: 2951)
    public static let jsonb = PostgresDataType(oid: 3802)
    public static let jsonbArray = PostgresDataType(oid: 3807)
    public static let xid8 = PostgresDataType(oid: 5069)

    public var description: String {
        switch self {
        case .bool: "boolean"
        case .bytea: "bytea"
        case .name: "name"
        case .int8: "bigint"
        case .int2: "smallint"
        case .int4: "integer"
        case .text: "text"
        case .oidType: "oid"
        case .xid: "xid"
        case .json: "json"
        case .float4: "real"
        case .float8: "double precision"
        case .boolArray: "boolean[]"
        case .int2Array: "smallint[]"
        case .int4Array: "integer[]"
        case .textArray: "text[]"
        case .varcharArray: "varchar[]"
        case .int8Array: "bigint[]"
        case .float8Array: "double precision[]"
        case .bpchar: "character"
        case .varchar: "varchar"
        case .timestamp: "timestamp"
        case .timestamptz: "timestamptz"
        case .timestamptzArray: "timestamptz[]"
        case .numeric: "numeric"
        case .uuid: "uuid"
        case .uuidArray: "uuid[]"
        case .jsonb: "jsonb"
        case .jsonbArray: "jsonb[]"
        case .xid8: "xid8"
        default: "type with oid \(oid)"
        }
    }

    var isTextual: Bool { self == .text || self == .varchar || self == .bpchar || self == .name }
    var isInteger: Bool { self == .int2 || self == .int4 || self == .int8 || self == .oidType }
}
