# The storageos-operator image: one static-ish binary (glibc) on distroless, run as non-root.
# The same binary runs the operator (`run`, the Deployment in deploy/operator.yaml) and the
# api-manager (`api-manager`, the Deployment the operator renders). Templates are compiled in.
#
#   docker build -t storageos/storageos-operator:v0.1.0 .
#
# Where no container engine exists, hack/image.sh builds the same image as an OCI archive.
#
# Both bases are pinned by digest (the tag says which image it is, the digest what is pulled):
# a tag moved upstream cannot change a build. To move to a newer base, resolve the tag and
# replace the digest, e.g. `crane digest docker.io/library/rust:1.95-bookworm`.
FROM docker.io/library/rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1 AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
COPY templates ./templates
# The example CRs the OLM bundle and the chart embed (include_str!).
COPY deploy/examples ./deploy/examples
RUN cargo build --release --locked --no-default-features --bin storageos-operator \
 && strip target/release/storageos-operator

FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
COPY --from=build /src/target/release/storageos-operator /usr/local/bin/storageos-operator
# distroless `nonroot`; the pod securityContext pins the same UID and a read-only root filesystem.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/storageos-operator"]
CMD ["run"]
