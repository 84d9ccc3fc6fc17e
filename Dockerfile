# smsgw container image: a static binary on distroless, non-root.
#   docker build -t smsgw:0.1.0 .
#   docker run --rm -v $PWD/smsgw.yaml:/etc/smsgw/smsgw.yaml:ro -p 8080:8080 smsgw:0.1.0
# The Helm chart (deploy/helm/smsgw) mounts the configuration at
# /etc/smsgw/smsgw.yaml and, in embedded mode, the store volume at
# /var/lib/smsgw (config store.path).

# go.mod's toolchain (go1.27.3: the standard library's security fixes).
# Pin the build image by digest where a registry is reachable, so a rebuild
# gets the same compiler: take the digest of the multi-arch index with
#   docker buildx imagetools inspect golang:1.27.3 --format '{{json .Manifest.Digest}}'
# and write it here as golang:1.27.3@sha256:<digest>. The build never
# fetches another toolchain (GOTOOLCHAIN=local): a base image older than
# go.mod stops it with go.mod's requirement named.
FROM golang:1.27.3 AS build
ENV GOTOOLCHAIN=local
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Pure Go (bbolt, go-redis): no cgo, so the binary runs on distroless/static.
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/smsgw ./cmd/smsgw

# distroless/static: CA certificates (provider HTTPS, Redis TLS) and tzdata,
# no shell. Use the chart's preStop.method=sleep (the default) with it.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/smsgw /usr/local/bin/smsgw
# 65532 = nonroot; the chart's fsGroup gives it the data volume.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/smsgw"]
CMD ["serve", "--config", "/etc/smsgw/smsgw.yaml"]
