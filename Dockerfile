# The storageos-operator image: one static-ish binary (glibc) on distroless, run as non-root.
# The same binary runs the operator (`run`, the Deployment in deploy/operator.yaml) and the
# api-manager (`api-manager`, the Deployment the operator renders). Templates are compiled in.
#
#   docker build -t storageos/storageos-operator:v0.1.0 .
#
# Where no container engine exists, hack/image.sh builds the same image as an OCI archive.
FROM docker.io/library/rust:1.95-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY crates ./crates
COPY templates ./templates
RUN cargo build --release --locked --no-default-features --bin storageos-operator \
 && strip target/release/storageos-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/storageos-operator /usr/local/bin/storageos-operator
# distroless `nonroot`; the pod securityContext pins the same UID and a read-only root filesystem.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/storageos-operator"]
CMD ["run"]
