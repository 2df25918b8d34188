# Multi-stage build of the wsync binary into a minimal non-root image.
# No Docker engine runs on the development machines; e2e/ uses this on machines that have one.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked --bin wsync

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/wsync /usr/local/bin/wsync
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/wsync"]
CMD ["agent"]
