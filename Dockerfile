# syntax=docker/dockerfile:1
#
# The box: `svc serve` running a project (DESIGN §7). Build from the svc
# repository, giving it the project to serve as the named context "project":
#
#   docker build --build-context project=../my-agent -t my-agent:1.0.0 .
#   docker run -p 8080:8080 -v my-agent-data:/data -e SVC_IMAGE_TAG=1.0.0 \
#     -e SVC_CONTROL_PLANE_URL=https://cp.example.com -e OPENAI_API_KEY my-agent:1.0.0
#
# Without a Go toolchain image (or a registry), build the static binary
# outside and give it as the named context "svc"; the golang stage is then
# skipped:
#
#   CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/svc .
#   docker build --build-context svc=bin --build-context project=../my-agent -t my-agent:1.0.0 .
#
# (One Dockerfile with replaceable stages rather than a second one for that
# case, so the test, TestDeploymentWalkthroughImage, builds this file:
# with podman, from a Debian root filesystem, where no registry is reachable.)
#
# Without --build-context project the image serves the starter project of `svc init`.
# The project's node_modules (npm ci) must be in it: packages are bundled
# when the box compiles. State lives in the /data volume: the journal, the
# box's secret store key, built-in object storage and, unless DATABASE_URL
# names an external PostgreSQL, a PostgreSQL cluster (Debian's server is in
# the image for that). The box runs as uid 10001: a host directory mounted
# on /data must be writable by it (a named volume is, as the image's /data).

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /out/svc . && /out/svc init /out/app

# The binary, at /svc: the build stage's; replaced by --build-context
# svc=DIR, DIR holding a static linux binary named svc.
FROM scratch AS svc
COPY --from=build /out/svc /svc

# The project served; replaced by --build-context project=DIR.
FROM scratch AS project
COPY --from=build /out/app /

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /data --shell /usr/sbin/nologin svc \
 && mkdir -p /data /app && chown svc:svc /data && chmod 0700 /data
COPY --from=svc /svc /usr/local/bin/svc
# Owned by the box's user: svc init makes .svc readable by its owner only.
COPY --from=project --chown=svc:svc / /app
USER svc:svc
VOLUME /data
EXPOSE 8080
ENV SVC_IMAGE_TAG=dev
ENTRYPOINT ["/usr/local/bin/svc", "serve", "--addr", ":8080", "--data", "/data", "/app"]
