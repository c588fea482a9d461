#!/usr/bin/env bash
# Records the part of a sysfs tree that `frameloop topology` reads into OUT,
# links kept as links (with their relative targets), so the copy reads like
# the original:
#   bus/pci/devices/*            links, plus each device's and each parent
#                                bridge's class, vendor, device, numa_node
#                                and {current,max}_link_{speed,width}
#   class/net/*                  links, plus each interface's `device` and
#                                `lower_*` links
#   devices/system/node/node*/cpulist
#
# usage: scripts/record-sysfs.sh OUT [SYSFS_ROOT]   (SYSFS_ROOT default /sys)
# Then: frameloop topology --sysfs OUT
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 OUT [SYSFS_ROOT]" >&2
  exit 2
fi
out=$1
sys=$(realpath -e "${2:-/sys}")
mkdir -p "$out"
out=$(realpath -e "$out")

# Path of $1 (below $sys) with every link resolved, relative to $sys;
# empty when it dangles or leaves the tree.
resolved() {
  local real
  real=$(realpath -e "$sys/$1" 2>/dev/null) || return 0
  case "$real" in
    "$sys"/*) printf '%s\n' "${real#"$sys"/}" ;;
  esac
}

# Recreates the link $1 (below $sys) with the same relative target.
copy_link() {
  mkdir -p "$out/$(dirname "$1")"
  ln -sfn "$(readlink "$sys/$1")" "$out/$1"
}

# Copies the attribute $1 (below $sys) if it is a readable regular file,
# at most a page of it.
copy_attribute() {
  [ -f "$sys/$1" ] || return 0
  mkdir -p "$out/$(dirname "$1")"
  head -c 4096 "$sys/$1" >"$out/$1" 2>/dev/null || rm -f "$out/$1"
}

# Creates the directory $1 (below $sys) and copies the PCI attributes of it
# and of every PCI function above it.
copy_device_dir() {
  local dir=$1 prefix="" part
  mkdir -p "$out/$dir"
  IFS=/ read -ra parts <<<"$dir"
  for part in "${parts[@]}"; do
    prefix=${prefix:+$prefix/}$part
    if [[ $part =~ ^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$ ]]; then
      for attr in class vendor device numa_node current_link_speed current_link_width \
        max_link_speed max_link_width; do
        copy_attribute "$prefix/$attr"
      done
    fi
  done
}

for link in "$sys"/bus/pci/devices/*; do
  [ -L "$link" ] || continue
  rel=bus/pci/devices/$(basename "$link")
  copy_link "$rel"
  target=$(resolved "$rel")
  [ -n "$target" ] && copy_device_dir "$target"
done

for link in "$sys"/class/net/*; do
  [ -e "$link" ] || continue
  rel=class/net/$(basename "$link")
  [ -L "$sys/$rel" ] && copy_link "$rel"
  target=$(resolved "$rel")
  [ -n "$target" ] || continue
  mkdir -p "$out/$target"
  # The interface's link type, so that the directory is never empty (git
  # keeps no empty directory, and a virtual interface has little else).
  copy_attribute "$target/type"
  [ -e "$out/$target/type" ] || echo 1 >"$out/$target/type"
  # A bond, VLAN or macvlan names the interfaces below it.
  for lower in "$sys/$target"/lower_*; do
    [ -L "$lower" ] && copy_link "$target/$(basename "$lower")"
  done
  if [ -L "$sys/$target/device" ]; then
    copy_link "$target/device"
    device=$(resolved "$target/device")
    [ -n "$device" ] && copy_device_dir "$device"
  fi
done

for node in "$sys"/devices/system/node/node*; do
  [ -d "$node" ] || continue
  copy_attribute "devices/system/node/$(basename "$node")/cpulist"
done

echo "recorded $(find "$out" -type f | wc -l) files and $(find "$out" -type l | wc -l) links from $sys into $out"
