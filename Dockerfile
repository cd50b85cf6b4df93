# Wristler inbox tier: container image for the `inbox` executable.
#
# A deployment starting point, untested on the development machines: they have
# no Docker engine, so this file was written against the Dockerfile reference
# and has never been built. Expect to adjust it on the first real build.
#
# Configuration is read from the environment at run time:
#   DATABASE_URL            PostgreSQL connection URL. Set it in every container:
#                           when it is unset, `inbox` starts its own embedded
#                           PostgreSQL, which a container should not do (the
#                           image has no PostgreSQL server anyway).
#   INBOX_DB_POOL_SIZE      size of the connection pool.
#   INBOX_MIGRATIONS_DIR    folder of SQL migrations (set below to the copy in the image).
#   INBOX_POLL_INTERVAL_MS  poll interval, in milliseconds.
#   INBOX_DATA_DIR          data folder (used by the embedded PostgreSQL mode).
#   INBOX_LOG_FORMAT        log output format.
# See docker-compose.yml for a PostgreSQL + migrate + run setup.

# ---------------------------------------------------------------------------
# Build stage: Swift 6.0 toolchain on Debian 12 (bookworm).
# ---------------------------------------------------------------------------
FROM swift:6.0-bookworm AS build

# Headers and pkg-config files for the system-library targets in Package.swift
# (CLibPQ, COpenSSL, CCurl, CNGHTTP2, CMicroHTTPD, CMagic, CArgon2).
RUN export DEBIAN_FRONTEND=noninteractive \
    && apt-get -q update \
    && apt-get -q install -y \
        libpq-dev \
        libssl-dev \
        libcurl4-openssl-dev \
        libnghttp2-dev \
        libmicrohttpd-dev \
        libmagic-dev \
        libjansson-dev \
        libargon2-dev \
        pkg-config \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /build

# Every folder a target in Package.swift points at must exist, even though only
# the `inbox` product is built, so the test and benchmark folders are copied too.
COPY Package.swift ./
COPY Sources/ ./Sources/
COPY Benchmarks/ ./Benchmarks/
COPY Tests/ ./Tests/
COPY sql/ ./sql/

RUN swift build -c release --product inbox \
    && mkdir -p /staging \
    && cp "$(swift build -c release --show-bin-path)/inbox" /staging/inbox

# ---------------------------------------------------------------------------
# Runtime stage: Swift runtime libraries (the binary links Foundation and the
# Swift standard library dynamically) on Debian 12, plus the C libraries'
# runtime packages only.
# ---------------------------------------------------------------------------
FROM swift:6.0-bookworm-slim

RUN export DEBIAN_FRONTEND=noninteractive \
    && apt-get -q update \
    && apt-get -q install -y --no-install-recommends \
        libpq5 \
        libssl3 \
        libcurl4 \
        libnghttp2-14 \
        libmicrohttpd12 \
        libmagic1 \
        libjansson4 \
        libargon2-1 \
        ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# Unprivileged user; its home is the working directory, so anything the
# executable writes relative to it lands somewhere writable.
RUN useradd --system --user-group --create-home --home-dir /var/lib/inbox \
        --shell /usr/sbin/nologin inbox

COPY --from=build /staging/inbox /usr/local/bin/inbox
COPY --from=build /build/sql/ /usr/share/inbox/sql/

ENV INBOX_MIGRATIONS_DIR=/usr/share/inbox/sql
# The API listens on every interface of the container (the default is loopback).
ENV INBOX_HTTP_HOST=0.0.0.0
EXPOSE 8080

USER inbox
WORKDIR /var/lib/inbox

# `inbox migrate` applies the migrations and exits; `inbox run` is the long-running service.
ENTRYPOINT ["inbox"]
CMD ["run"]
