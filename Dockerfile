# The Wristler inbox tier as an image: the Debian package (`make deb`) installed on
# debian:bookworm-slim. Not built on the development machines, which have no container engine;
# the package inside it is built and tested there (`make test-deb`).
#
#   docker build -t wristler/inbox .
#   docker run --env-file inbox.env -p 8080:8080 -v inbox-data:/var/lib/inbox wristler/inbox
#
# Settings come from the environment (README's table); secrets from files named by NAME_FILE
# (docker-compose.yml mounts them as secrets). The data folder /var/lib/inbox is a volume.

# The toolchain CI builds with.
FROM swift:6.3.1-bookworm AS build
RUN export DEBIAN_FRONTEND=noninteractive && apt-get -q update && apt-get -q install -y --no-install-recommends \
        libpq-dev libssl-dev libcurl4-openssl-dev libnghttp2-dev libmicrohttpd-dev libmagic-dev libvips-dev \
        libjansson-dev libargon2-dev libsystemd-dev pkg-config dpkg-dev binutils git \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /build
COPY . .
ARG INBOX_DEB_VERSION=0.1.0+image
RUN INBOX_DEB_VERSION="$INBOX_DEB_VERSION" scripts/build-deb.sh > /tmp/deb-path && cp "$(cat /tmp/deb-path)" /inbox.deb

FROM debian:bookworm-slim
COPY --from=build /inbox.deb /tmp/inbox.deb
# apt resolves the package's Depends (the Debian libraries dpkg-shlibdeps named).
RUN export DEBIAN_FRONTEND=noninteractive && apt-get -q update \
    && apt-get -q install -y --no-install-recommends /tmp/inbox.deb ca-certificates \
    && rm -rf /var/lib/apt/lists/* /tmp/inbox.deb

ENV INBOX_DATA_DIR=/var/lib/inbox INBOX_LOG_FORMAT=json INBOX_HTTP_HOST=0.0.0.0 INBOX_HTTP_PORT=8080 INBOX_OPS_PORT=8081
RUN install -d -o inbox -g inbox -m 0750 /var/lib/inbox
VOLUME /var/lib/inbox
WORKDIR /var/lib/inbox
USER inbox
EXPOSE 8080 8081
# The operations listener's /readyz: the database answers and every migration is applied.
HEALTHCHECK --interval=10s --timeout=6s --start-period=120s --retries=3 CMD ["inbox", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["inbox"]
CMD ["run"]
