# One image with every Fuge binary, built static (CGO_ENABLED=0):
#   /usr/local/bin/fuge-manager, fuge-proxy, fugectl, presence-server
#
#   docker build -t fuge:dev .
#
# The manifests in deploy/kubernetes run it as fuge:dev (see
# deploy/README.md). This file has not been built in the repository's own
# environment, which has no container engine; deploy/deploy_test.go checks
# that the packages it names exist and build with CGO_ENABLED=0.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0
RUN go build -trimpath -ldflags="-s -w" -o /out/ \
        ./cmd/fuge-manager \
        ./cmd/fuge-proxy \
        ./cmd/fugectl \
        ./examples/presence/cmd/presence-server

# Alpine rather than an image with no shell: the manager's StatefulSet uses
# /bin/sh to decide which node bootstraps the cluster and which join it.
FROM alpine:3.20
RUN adduser -D -H -u 65532 fuge && mkdir -p /var/lib/fuge && chown fuge /var/lib/fuge
COPY --from=build /out/ /usr/local/bin/
USER 65532:65532
WORKDIR /var/lib/fuge
# raft, gRPC (owners, xDS), admin HTTPS; proxy and its admin; presence
EXPOSE 7400 7401 7402 8080 8081 9001
ENTRYPOINT []
CMD ["/usr/local/bin/fuge-manager"]
