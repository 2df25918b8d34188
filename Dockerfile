# Multi-stage build of wsync into a minimal, static, non-root image.
# The development machines have no Docker engine; `just e2e` builds this on machines that do.
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY migrations ./migrations
COPY schemas ./schemas
RUN cargo build --release --locked --bin wsync --target x86_64-unknown-linux-musl \
 && cp target/x86_64-unknown-linux-musl/release/wsync /wsync

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /wsync /usr/local/bin/wsync
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/wsync"]
CMD ["agent"]
