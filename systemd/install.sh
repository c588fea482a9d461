#!/usr/bin/env bash
# Installs frameloop as a systemd service without a package: the same files
# in the same places as `cargo deb` (see [package.metadata.deb] in
# Cargo.toml). Run as root from the repository:
#   cargo build --release && sudo systemd/install.sh
# Options: --binary PATH (default target/release/frameloop),
#          --root DIR (install under DIR, for images; no systemctl calls).
# An existing /etc/frameloop/frameloop.toml is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

binary=target/release/frameloop
root=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary="$2"; shift 2 ;;
    --root) root="$2"; shift 2 ;;
    *) echo "install.sh: unknown option $1 (use --binary PATH, --root DIR)" >&2; exit 2 ;;
  esac
done
if [ ! -x "$binary" ]; then
  echo "install.sh: $binary not found; run cargo build --release first or pass --binary" >&2
  exit 1
fi

install -D -m 0755 "$binary" "$root/usr/bin/frameloop"
install -D -m 0644 systemd/frameloop.service "$root/usr/lib/systemd/system/frameloop.service"
install -D -m 0644 systemd/frameloop.sysusers "$root/usr/lib/sysusers.d/frameloop.conf"
install -D -m 0644 systemd/realtime.conf "$root/usr/share/doc/frameloop/realtime.conf"
install -D -m 0644 docs/operations.md "$root/usr/share/doc/frameloop/operations.md"
if [ ! -e "$root/etc/frameloop/frameloop.toml" ]; then
  install -D -m 0640 systemd/frameloop.toml "$root/etc/frameloop/frameloop.toml"
fi

if [ -z "$root" ]; then
  systemd-sysusers /usr/lib/sysusers.d/frameloop.conf
  chown root:frameloop /etc/frameloop/frameloop.toml
  systemctl daemon-reload
  echo "installed; edit /etc/frameloop/frameloop.toml, then: systemctl enable --now frameloop" >&2
else
  systemd-sysusers --root="$root"
  # The unit runs as User=frameloop, which must read the config: give it to
  # the group that sysusers just created in the image, by the number in the
  # image's /etc/group (the host may have no such group, or another gid).
  gid=$(awk -F: '$1 == "frameloop" { print $3 }' "$root/etc/group")
  if [ -z "$gid" ]; then
    echo "install.sh: no frameloop group in $root/etc/group after systemd-sysusers --root" >&2
    exit 1
  fi
  if [ "$(id -u)" -eq 0 ]; then
    chown "0:$gid" "$root/etc/frameloop/frameloop.toml"
  else
    echo "install.sh: not root; chown 0:$gid $root/etc/frameloop/frameloop.toml before use" >&2
  fi
  echo "installed under $root" >&2
fi
