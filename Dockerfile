# deputy's container image: a static binary on distroless, non-root.
#   make image IMAGE=ghcr.io/deputy-dev/deputy:v0.1.0
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/deputy ./cmd/deputy

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/deputy /deputy
USER 65532:65532
ENTRYPOINT ["/deputy"]
