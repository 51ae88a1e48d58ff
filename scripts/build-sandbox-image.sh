#!/usr/bin/env bash
# Builds the offline sandbox test image (default durable-harness-sandbox:test) with no registry:
# busybox-static + this machine's node binary + the shared libraries ldd lists, imported with `docker import`.
# If the pinned harness CLIs are installed at test/e2e/clis/node_modules they go in under /opt/clis
# (bin links on PATH), so a real CLI can run inside. SANDBOX_IMAGE_CLIS=0 leaves them out.
# Needs DOCKER_HOST pointing at a running engine (see .ci/docker-engine.sh). Usage:
#   scripts/build-sandbox-image.sh [IMAGE]
set -euo pipefail

IMAGE="${1:-${SANDBOX_IMAGE:-durable-harness-sandbox:test}}"
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLIS_DIR="$REPO_ROOT/test/e2e/clis"
log() { echo "build-sandbox-image: $*" >&2; }

if ! command -v busybox >/dev/null 2>&1 || ! busybox --list >/dev/null 2>&1; then
  log "installing busybox-static from apt"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends busybox-static >&2
fi
BUSYBOX="$(command -v busybox)"
if ldd "$BUSYBOX" >/dev/null 2>&1; then
  log "warning: $BUSYBOX is dynamically linked; install busybox-static for a self-contained image"
fi
NODE="$(readlink -f "$(command -v node)")"

ROOT="$(mktemp -d /tmp/sandbox-rootfs.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,usr/local/bin,etc,tmp,proc,sys,dev,workspace,opt/clis/bin,root}
chmod 1777 "$ROOT/tmp"

cp "$BUSYBOX" "$ROOT/bin/busybox"
for applet in $("$BUSYBOX" --list-full); do
  [ -e "$ROOT/$applet" ] || ln -s /bin/busybox "$ROOT/$applet"
done
cp "$NODE" "$ROOT/usr/local/bin/node"
ln -sf /usr/local/bin/node "$ROOT/usr/bin/node"

# Libraries of node and of the CLIs' native binaries (claude and opencode are glibc executables).
copy_libs() {
  # Scripts and static binaries have no libraries: ldd fails for them, which is fine.
  { ldd "$1" 2>/dev/null || true; } | { grep -oE '/[^ ]+' || true; } | while read -r lib; do
    [ -e "$ROOT$lib" ] && continue
    mkdir -p "$ROOT$(dirname "$lib")"
    cp -L "$lib" "$ROOT$lib"
  done
}
copy_libs "$NODE"

# Non-root users exist by name: some tools (os.userInfo, ssh, git) fail for a uid with no passwd entry.
cat >"$ROOT/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
sandbox:x:1000:1000:sandbox:/workspace/.home:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
cat >"$ROOT/etc/group" <<'GROUP'
root:x:0:
sandbox:x:1000:
nogroup:x:65534:
GROUP
echo 'hosts: files dns' >"$ROOT/etc/nsswitch.conf"

TAR_EXTRA=()
if [ "${SANDBOX_IMAGE_CLIS:-1}" != 0 ] && [ -d "$CLIS_DIR/node_modules/.bin" ]; then
  log "including the harness CLIs from $CLIS_DIR/node_modules under /opt/clis"
  for exe in "$CLIS_DIR"/node_modules/.bin/*; do
    copy_libs "$(readlink -f "$exe")"
  done
  for bin in "$CLIS_DIR"/node_modules/.bin/*; do
    ln -s "/opt/clis/node_modules/.bin/$(basename "$bin")" "$ROOT/opt/clis/bin/$(basename "$bin")"
  done
  # Stream the CLIs straight into the image instead of copying 1 GB+ into the rootfs first.
  TAR_EXTRA=(-C "$CLIS_DIR" --transform 's,^node_modules,opt/clis/node_modules,' --transform 's,^package\.json$,opt/clis/package.json,' node_modules package.json)
fi

log "importing $IMAGE"
tar --owner=0 --group=0 --numeric-owner -c -C "$ROOT" . "${TAR_EXTRA[@]}" \
  | docker import \
      --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin:/opt/clis/bin' \
      --change 'WORKDIR /workspace' \
      --change 'CMD ["/bin/sh"]' \
      --change 'LABEL org.opencontainers.image.title=durable-harness-sandbox' \
      - "$IMAGE" >/dev/null
log "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
