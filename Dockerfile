# svc as a container: the bundle plus the Deno runtime on `scratch`.
#
# Build stage: install the locked npm dependencies and write the final stage's files with
# `deno task rootfs` (bundle, runtime, its shared libraries, CA certificates, empty volume
# directories). The same script is what tests/e2e/rootfs_test.ts runs
# and then starts with this file's ENTRYPOINT under chroot. See docs/deployment.md.
FROM denoland/deno:debian-2.9.6 AS build
WORKDIR /src
COPY . .
RUN deno install --frozen \
 && deno run -A scripts/rootfs.ts /rootfs

# Final stage: nothing but what svc needs at run time.
FROM scratch
COPY --from=build /rootfs/ /
COPY --from=build --chown=65532:65532 /rootfs/secrets /secrets
ENV DENO_DIR=/tmp/deno DENO_NO_UPDATE_CHECK=1
USER 65532:65532
# /secrets: generated secrets (jwt-secret: mount one shared secret for several replicas);
# /wellknown: well-known query files; /template: templates.
VOLUME ["/secrets", "/wellknown", "/template"]
EXPOSE 8080
ENTRYPOINT ["/svc/deno", "run", "-A", "--v8-flags=--max-semi-space-size=4,--heap-growing-percent=200,--no-parallel-scavenge", "--no-config", "--unstable-net", "--unstable-no-legacy-abort", "/svc/svc.js"]
