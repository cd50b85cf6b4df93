// swift-tools-version:6.0
import PackageDescription

/// One set of Swift settings for every target: Swift 6 language mode (strict concurrency is part of it).
let swiftSettings: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "wristler-inbox",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "inbox", targets: ["inbox"]),
        .executable(name: "inbox-bench", targets: ["InboxBenchmarks"]),
    ],
    targets: [
        // C libraries from Debian, reached through pkg-config.
        .systemLibrary(
            name: "CLibPQ", path: "Sources/CLibraries/CLibPQ", pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"])]),
        .systemLibrary(
            name: "COpenSSL", path: "Sources/CLibraries/COpenSSL", pkgConfig: "openssl",
            providers: [.apt(["libssl-dev"])]),
        .systemLibrary(
            name: "CCurl", path: "Sources/CLibraries/CCurl", pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(
            name: "CNGHTTP2", path: "Sources/CLibraries/CNGHTTP2", pkgConfig: "libnghttp2",
            providers: [.apt(["libnghttp2-dev"])]),
        .systemLibrary(
            name: "CMicroHTTPD", path: "Sources/CLibraries/CMicroHTTPD", pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(
            name: "CMagic", path: "Sources/CLibraries/CMagic", pkgConfig: "libmagic",
            providers: [.apt(["libmagic-dev"])]),
        // No pkgConfig: shim.h declares the calls it uses (see there), so GLib's flags are not needed.
        .systemLibrary(name: "CVips", path: "Sources/CLibraries/CVips", providers: [.apt(["libvips-dev"])]),
        .systemLibrary(
            name: "CJansson", path: "Sources/CLibraries/CJansson", pkgConfig: "jansson",
            providers: [.apt(["libjansson-dev"])]),
        // sd_notify: readiness, the watchdog and stopping, told to systemd (Type=notify units).
        .systemLibrary(
            name: "CSystemd", path: "Sources/CLibraries/CSystemd", pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]),
        .systemLibrary(
            name: "CArgon2", path: "Sources/CLibraries/CArgon2", pkgConfig: "libargon2",
            providers: [.apt(["libargon2-dev"])]),
        // Non-variadic entry points for the variadic C functions Swift cannot call.
        .target(
            name: "CShims", dependencies: ["CCurl", "CMicroHTTPD"],
            path: "Sources/CLibraries/CShims"),

        // Threads and the state many of them touch: locks that sleep rather than spin, stripes, a
        // readers-writer lock, and threads that run blocking jobs.
        .target(name: "Threads", swiftSettings: swiftSettings),

        // How values are written down: bytes as hex and base64url, durations as seconds. No
        // dependencies, so the lowest modules can share one copy.
        .target(name: "Encodings", swiftSettings: swiftSettings),

        // A slowdown planted on purpose in one path, to prove that the release gate catches it:
        // empty unless built with -DPLANTED_SLOWDOWN (make bench-planted, docs/benchmarks.md).
        .target(name: "PlantedSlowdown", swiftSettings: swiftSettings),

        // Thin Swift wrappers: the only modules that see C pointers.
        .target(
            name: "PostgresClient", dependencies: ["CLibPQ", "Threads", "Encodings"], swiftSettings: swiftSettings),
        .target(
            name: "Crypto", dependencies: ["COpenSSL", "Encodings"], swiftSettings: swiftSettings),
        .target(
            name: "LinkedLibraries", dependencies: ["CShims", "CCurl", "CMicroHTTPD", "CLibPQ", "COpenSSL", "CNGHTTP2", "CMagic", "CJansson"],
            swiftSettings: swiftSettings),

        // HTTP/2 client for the push fan-out to APNs and FCM: libnghttp2 over OpenSSL on one epoll
        // thread for HTTP/2 (https, h2c), libcurl's multi interface for plain HTTP/1.1. The only
        // module that touches nghttp2, curl or SSL pointers.
        .target(
            name: "HTTP2Client", dependencies: ["CNGHTTP2", "COpenSSL", "CCurl", "CShims", "Threads", "Encodings"], swiftSettings: swiftSettings),

        // HTTP/1.1 on libmicrohttpd: requests in, responses out; no routing, no JSON:API.
        .target(
            name: "HTTPServer", dependencies: ["CMicroHTTPD", "CShims", "Threads", "Encodings"], swiftSettings: swiftSettings),

        // The runtime of every role: services and their group, the leased loop, logger and clocks.
        .target(name: "Lifecycle", dependencies: ["PostgresClient", "Threads", "Encodings"], swiftSettings: swiftSettings),

        // The domain: events, categories, rules. No I/O.
        .target(name: "InboxDomain", swiftSettings: swiftSettings),

        // JSON text into InboxDomain's `JSONValue` on libjansson, with JSONDecoder deciding whatever
        // libjansson does not take as it is. The only module that touches jansson pointers.
        .target(name: "JSONParsing", dependencies: ["CJansson", "InboxDomain"], swiftSettings: swiftSettings),

        // The append-only event log, its migrations and the embedded PostgreSQL.
        .target(
            name: "EventLog", dependencies: ["PlantedSlowdown", "PostgresClient", "InboxDomain", "JSONParsing", "Crypto", "Encodings", "Lifecycle"],
            swiftSettings: swiftSettings),

        // The notification outbox and its pending queues: the one writer of `notification_outbox`
        // (for the bell projection, its catch-up and the schedule) and the one way the fan-out and
        // the mailer read it.
        .target(name: "NotificationOutbox", dependencies: ["InboxDomain", "PostgresClient", "Encodings", "JSONParsing"], swiftSettings: swiftSettings),

        // Read models derived from the log, and the drivers that keep them current.
        .target(
            name: "Projections", dependencies: ["PlantedSlowdown", "EventLog", "PostgresClient", "InboxDomain", "Crypto", "Encodings", "Lifecycle", "NotificationOutbox"],
            swiftSettings: swiftSettings),

        // Plausible, deterministic event streams for tests and benchmarks.
        .target(
            name: "InboxSimulation", dependencies: ["EventLog", "InboxDomain", "Projections"],
            swiftSettings: swiftSettings),

        // Push registrations: register, list, change, delete (also by token, for the push fan-out).
        .target(name: "Devices", dependencies: ["PostgresClient", "InboxDomain"], swiftSettings: swiftSettings),

        // The push protocol without I/O: texts, collapse keys, APNs and FCM payloads, their answers,
        // provider tokens.
        .target(name: "PushProtocol", dependencies: ["InboxDomain", "JSONParsing", "Encodings", "Crypto"], swiftSettings: swiftSettings),

        // The push fan-out: the outbox's notifications to the people's devices, sent through APNs and
        // FCM (or a logging transport), every answer recorded as it arrives.
        .target(
            name: "Fanout",
            dependencies: ["PlantedSlowdown", "PushProtocol", "HTTP2Client", "PostgresClient", "Lifecycle", "InboxDomain", "Encodings", "Threads", "NotificationOutbox", "Devices"],
            swiftSettings: swiftSettings),

        // Uploaded files: their type read from the bytes (libmagic), multipart bodies, fetching a
        // source URL (libcurl, public addresses only), storage by content, expiry, and who may read them.
        .target(
            name: "Uploads", dependencies: ["CMagic", "CVips", "CCurl", "CShims", "PostgresClient", "Crypto", "Encodings"], swiftSettings: swiftSettings),

        // E-mail transport: RFC 5322 composition, SMTP through libcurl (STARTTLS or SMTPS), a folder
        // of .eml files when no relay is set, and signed one-click unsubscribe links.
        .target(
            name: "Mail", dependencies: ["CCurl", "CShims", "COpenSSL", "Crypto", "Encodings", "Threads", "PostgresClient", "InboxDomain"], swiftSettings: swiftSettings),

        // The mail outbox (sql/014): queues the notifications decided to be mailed per person and
        // stream, gathers each queue into one mail per INBOX_MAIL_GATHER_SECONDS in the contact's
        // language, and sends it through Mail's transport (MailService, any number of nodes).
        .target(
            name: "Mailer",
            dependencies: ["PlantedSlowdown", "Mail", "PostgresClient", "InboxDomain", "Lifecycle", "Encodings", "NotificationOutbox", "Projections", "Crypto"],
            swiftSettings: swiftSettings),

        // Time-driven work: the shop_unanswered reminder (ShopReminders) and the role that checks it on
        // one node at a time (ScheduleService). Reads the live read models, writes the push outbox.
        .target(
            name: "Schedule", dependencies: ["PostgresClient", "Lifecycle", "Crypto", "Encodings", "InboxDomain", "NotificationOutbox", "Projections"],
            swiftSettings: swiftSettings),

        // The JSON:API in front of the read models: identity of the app, routing, errors.
        .target(
            name: "InboxAPI", dependencies: [
                "PlantedSlowdown",
                "HTTPServer", "EventLog", "Projections", "PostgresClient", "InboxDomain", "Crypto", "Threads", "Devices", "Encodings", "Lifecycle",
                "Fanout", "Uploads", "Mail", "Mailer", "JSONParsing",
            ],
            swiftSettings: swiftSettings),

        // Password hashing: Argon2id from Debian's libargon2, the only module that touches it.
        .target(name: "PasswordHashing", dependencies: ["CArgon2"], swiftSettings: swiftSettings),

        // The identity role: accounts, second factors, sign-in sessions with rotating refresh tokens,
        // Apple and Google, and the OAuth token endpoint that issues the access tokens the API verifies.
        .target(
            name: "Identity", dependencies: [
                "PlantedSlowdown",
                "PasswordHashing", "Crypto", "Encodings", "EventLog", "HTTP2Client", "HTTPServer", "InboxAPI", "InboxDomain", "Lifecycle",
                "Mail", "Mailer", "PostgresClient", "Threads", "Uploads",
            ],
            swiftSettings: swiftSettings),

        .executableTarget(
            name: "inbox",
            dependencies: [
                "EventLog", "Projections", "PostgresClient", "InboxDomain", "LinkedLibraries", "Lifecycle", "HTTPServer", "InboxAPI",
                "Crypto", "Encodings", "Fanout", "HTTP2Client", "PushProtocol", "Uploads", "Schedule", "Mail", "Mailer", "JSONParsing", "Identity", "PasswordHashing",
                "CSystemd",
            ],
            swiftSettings: swiftSettings),

        // The release benchmark's pure parts: figures, the baseline file, the margin rule and the
        // verdict, the SVG plots. Foundation only, so its tests need no database and build fast.
        .target(name: "BenchmarkVerdict", dependencies: ["Encodings"], path: "Benchmarks/BenchmarkVerdict", swiftSettings: swiftSettings),

        .executableTarget(
            name: "InboxBenchmarks",
            dependencies: [
                "BenchmarkVerdict", "EventLog", "PostgresClient", "InboxDomain", "Lifecycle", "Projections", "InboxSimulation", "HTTPServer", "InboxAPI", "Crypto", "Encodings",
                "Fanout", "HTTP2Client", "PushProtocol", "Schedule", "Mailer", "Mail", "Identity", "PasswordHashing",
            ],
            path: "Benchmarks/InboxBenchmarks", swiftSettings: swiftSettings),

        // Tests run against a real PostgreSQL (see Makefile and Tests/README).
        .target(
            name: "InboxTesting", dependencies: ["PostgresClient", "EventLog", "Projections", "InboxDomain", "Crypto"],
            path: "Tests/InboxTesting", swiftSettings: swiftSettings),
        // The SMTP relay mock and the mail reader of the mail tests.
        .target(name: "MailTesting", dependencies: ["Mail", "EventLog"], path: "Tests/MailTesting", swiftSettings: swiftSettings),
        // A plain TCP client for tests that put exact bytes on the wire (HTTPServerTests, IdentityTests),
        // and a wait for a semaphore that holds no thread of the cooperative pool.
        .target(name: "HTTPTesting", path: "Tests/HTTPTesting", swiftSettings: swiftSettings),
        .testTarget(
            name: "PostgresClientTests", dependencies: ["PostgresClient", "EventLog", "InboxTesting", "HTTPTesting"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "EventLogTests", dependencies: ["EventLog", "PostgresClient", "InboxDomain", "InboxTesting", "Lifecycle", "Encodings", "Crypto"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "EncodingsTests", dependencies: ["Encodings", "Crypto"], swiftSettings: swiftSettings),
        // Against Debian's nghttpd with a certificate made by the openssl CLI at test time.
        .testTarget(
            name: "HTTP2ClientTests", dependencies: ["HTTP2Client", "EventLog"], swiftSettings: swiftSettings),
        .testTarget(
            name: "HTTPServerTests", dependencies: ["HTTPServer", "HTTPTesting"], swiftSettings: swiftSettings),
        .testTarget(
            name: "InboxAPITests",
            dependencies: [
                "InboxAPI", "HTTPServer", "InboxTesting", "InboxDomain", "EventLog", "PostgresClient", "Crypto", "Projections", "Encodings", "Threads",
                "Uploads", "Mail", "InboxSimulation", "HTTPTesting",
            ],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "LifecycleTests", dependencies: ["Lifecycle", "PostgresClient", "EventLog", "InboxTesting", "Threads", "Projections", "InboxDomain"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "DeviceRegistryTests", dependencies: ["Devices", "PostgresClient", "InboxTesting"], swiftSettings: swiftSettings),
        .testTarget(
            name: "FanoutTests",
            dependencies: [
                "Fanout", "PushProtocol", "HTTP2Client", "InboxTesting", "Devices", "EventLog", "Projections", "InboxDomain", "PostgresClient",
                "Lifecycle", "InboxAPI", "HTTPServer", "Crypto", "NotificationOutbox", "Mail", "Mailer", "InboxSimulation",
            ],
            swiftSettings: swiftSettings),
        // Against Debian's aiosmtpd (Tests/MailMocks) with a certificate made by the openssl CLI at test time.
        .testTarget(
            name: "MailTests", dependencies: ["Mail", "MailTesting", "EventLog", "Encodings"], swiftSettings: swiftSettings),
        // The mail outbox through the log, with a moved clock, a folder and the aiosmtpd relay of Tests/MailMocks.
        .testTarget(
            name: "MailerTests",
            dependencies: [
                "Mailer", "Mail", "MailTesting", "InboxTesting", "EventLog", "Projections", "InboxDomain", "PostgresClient", "Lifecycle", "InboxAPI", "HTTPServer",
                "Encodings",
            ],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "ScheduleTests",
            dependencies: [
                "Schedule", "InboxTesting", "EventLog", "Projections", "InboxDomain", "PostgresClient", "Lifecycle", "Fanout", "Devices",
                "PushProtocol",
            ],
            swiftSettings: swiftSettings),
        // The identity role through real sockets, with local Apple and Google (Tests/IdentityTests/ProviderServer.swift).
        .testTarget(
            name: "IdentityTests",
            dependencies: [
                "Identity", "PasswordHashing", "InboxAPI", "HTTPServer", "HTTPTesting", "InboxTesting", "EventLog", "PostgresClient", "Crypto",
                "Projections", "InboxDomain", "Encodings", "Threads", "Lifecycle", "Mail", "Mailer", "MailTesting",
            ],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "BenchmarkVerdictTests", dependencies: ["BenchmarkVerdict", "InboxSimulation"], swiftSettings: swiftSettings),
        .testTarget(
            name: "InboxDomainTests", dependencies: ["InboxDomain"], swiftSettings: swiftSettings),
        .testTarget(
            name: "JSONParsingTests", dependencies: ["JSONParsing", "InboxDomain"], swiftSettings: swiftSettings),
        .testTarget(
            name: "PushProtocolTests", dependencies: ["PushProtocol", "InboxDomain", "Crypto", "EventLog"], swiftSettings: swiftSettings),
        .testTarget(
            name: "ProjectionTests",
            dependencies: [
                "Projections", "InboxSimulation", "InboxTesting", "EventLog", "InboxDomain", "PostgresClient", "Lifecycle", "JSONParsing",
                "NotificationOutbox", "Encodings",
            ],
            swiftSettings: swiftSettings),
        // The projections' folds, pure: no database, no InboxTesting. EventLog only for `RecordedEvent`.
        .testTarget(
            name: "ProjectionFoldTests", dependencies: ["Projections", "InboxDomain", "EventLog", "NotificationOutbox"], swiftSettings: swiftSettings),
        .testTarget(
            name: "InboxCommandTests",
            dependencies: [
                "InboxTesting", "LinkedLibraries", "Crypto", "InboxSimulation", "Projections", "EventLog", "PostgresClient", "InboxDomain",
                "HTTPTesting", "Uploads", "InboxAPI",
            ],
            swiftSettings: swiftSettings),
    ]
)
