#!/usr/bin/env bash
# Make a Debian bookworm base image with Python 3.11 from Debian's own packages, for a machine
# that reaches Debian's archive but no container registry (python:3.11-slim is then out of
# reach). Build the approvals image on it with:
#
#   sudo deploy/build-base.sh                       # once: localhost/approvals-base:bookworm
#   podman build --format docker --build-arg BASE=localhost/approvals-base:bookworm \
#     -f deploy/Dockerfile -t approvals:local .
#
# Needs root (debootstrap), debootstrap and podman. Not run in CI.
set -euo pipefail

tag=${1:-localhost/approvals-base:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# minbase: essential and required packages only; Python, its venv module (the image installs
# approvals into a venv) and the CA certificates Slack's and the model providers' TLS needs.
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  bookworm "$work/root" "$mirror"
chroot "$work/root" apt-get clean
rm -rf "$work/root/var/lib/apt/lists/"*

tar --numeric-owner -C "$work/root" -cf "$work/root.tar" .
podman import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' "$work/root.tar" "$tag"
echo "base image: $tag"
