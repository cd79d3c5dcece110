# The platform image: the evalsi-operator binary (operator, webhook, reference evalsid) on a
# minimal non-root base. Plugin images build FROM it and add their own tools.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
    -o /out/evalsi-operator .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/evalsi-operator /usr/local/bin/evalsi-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/evalsi-operator"]
