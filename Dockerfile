# syntax=docker/dockerfile:1
# modelshim: a static musl binary on distroless (no OpenSSL: rustls + ring).
#   docker build -t modelshim .
#   docker run -p 8787:8787 -v $PWD/modelshim.toml:/etc/modelshim/modelshim.toml:ro modelshim
# Untested here: the machine this was written on has no container engine.

FROM rust:1-bookworm AS build
ARG TARGETARCH
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
RUN case "${TARGETARCH:-amd64}" in \
      amd64) echo x86_64-unknown-linux-musl > /target ;; \
      arm64) echo aarch64-unknown-linux-musl > /target ;; \
      *) echo "unsupported arch ${TARGETARCH}" && exit 1 ;; \
    esac && rustup target add "$(cat /target)"
WORKDIR /src
# Dependencies first, so source edits do not rebuild them.
COPY Cargo.toml Cargo.lock build.rs ./
COPY providers providers
RUN mkdir -p src benches examples && echo 'fn main() {}' > src/main.rs && touch src/lib.rs \
    && echo 'fn main() {}' > benches/extractor.rs \
    && cargo build --release --locked --target "$(cat /target)" --bin modelshim || true
COPY . .
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked --target "$(cat /target)" --bin modelshim \
    && cp "target/$(cat /target)/release/modelshim" /modelshim

# distroless/static: CA certificates and a nonroot user, no shell, no libc.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /modelshim /usr/local/bin/modelshim
USER nonroot:nonroot
EXPOSE 8787
ENTRYPOINT ["/usr/local/bin/modelshim"]
CMD ["serve", "--config", "/etc/modelshim/modelshim.toml", "--json-logs"]
