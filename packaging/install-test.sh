#!/usr/bin/env bash
# Install test on a clean Debian 12: a debootstrap --variant=minbase root (cached) with only
# python3.11 added; inside it, WITHOUT network: dpkg -i, --version, check-config, a short replay
# as user rackwatt, an upgrade to a rebuilt higher version that keeps configuration and state,
# remove (keeps them), purge (leaves nothing). Needs root (chroot, unshare).
#   packaging/install-test.sh OLD.deb NEW.deb TRACE.csv
set -euo pipefail
old_deb=$(realpath "$1"); new_deb=$(realpath "$2"); trace=$(realpath "$3")
cache="${RACKWATT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rackwatt}"
base="$cache/bookworm-minbase-python3.11.tar"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
work=$(mktemp -d)
root="$work/root"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
step() { echo "install-test: $*" >&2; }
fail() { echo "install-test: FAILED: $*" >&2; exit 1; }

if [ ! -f "$base" ]; then
  step "building the cached Debian 12 minbase root (once)"
  mkdir -p "$cache"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  chroot "$root" apt-get install -y -qq --no-install-recommends python3.11 >/dev/null
  chroot "$root" apt-get clean
  rm -f "$root/etc/resolv.conf"
  tar -C "$root" -cf "$base.tmp" . && mv "$base.tmp" "$base"
  rm -rf "$root"
fi
mkdir -p "$root"
tar -C "$root" -xf "$base"
cp "$old_deb" "$root/tmp/old.deb"; cp "$new_deb" "$root/tmp/new.deb"; cp "$trace" "$root/tmp/trace.csv"
chmod 0644 "$root/tmp/trace.csv"
offline() { unshare --net chroot "$root" "$@"; }     # no network inside: the install must be offline
as_rackwatt() { unshare --net chroot --userspec=rackwatt:rackwatt "$root" env HOME=/var/lib/rackwatt "$@"; }

step "dpkg -i (offline)"
offline dpkg -i /tmp/old.deb >/dev/null
offline rackwatt --version
step "check-config refuses the shipped placeholder site/rack, then passes once they are set"
if offline rackwatt check-config /etc/rackwatt/agent.toml >/dev/null; then fail "placeholders accepted"; fi
sed -i 's/^site = "my-site"/site = "install-test"/; s/^rack = "my-rack"/rack = "r1"/' "$root/etc/rackwatt/agent.toml"
offline rackwatt check-config /etc/rackwatt/agent.toml
getent_out=$(offline getent passwd rackwatt) || fail "no rackwatt user"
step "user: $getent_out"
step "replay as user rackwatt"
as_rackwatt rackwatt replay /tmp/trace.csv --report /var/lib/rackwatt/replay.jsonl \
  --state-out /var/lib/rackwatt/engine.state
[ -s "$root/var/lib/rackwatt/replay.jsonl" ] || fail "replay wrote no report"
[ -s "$root/var/lib/rackwatt/engine.state" ] || fail "replay wrote no state"
state_sum=$(sha256sum < "$root/var/lib/rackwatt/engine.state")
echo "# local edit kept across upgrades" >> "$root/etc/rackwatt/agent.toml"

step "upgrade to the rebuilt higher version"
offline dpkg -i --force-confold /tmp/new.deb >/dev/null
new_version=$(offline dpkg-query -W -f='${Version}' rackwatt)
[ "$new_version" = "$(dpkg-deb -f "$new_deb" Version)" ] || fail "version after upgrade is $new_version"
grep -q "local edit kept" "$root/etc/rackwatt/agent.toml" || fail "upgrade lost the configuration edit"
[ "$(sha256sum < "$root/var/lib/rackwatt/engine.state")" = "$state_sum" ] || fail "upgrade changed the state"
offline rackwatt check-config /etc/rackwatt/agent.toml

step "remove keeps configuration and state"
offline dpkg -r rackwatt >/dev/null
[ -f "$root/etc/rackwatt/agent.toml" ] || fail "remove deleted the configuration"
[ -f "$root/var/lib/rackwatt/engine.state" ] || fail "remove deleted the state"
[ ! -e "$root/usr/lib/rackwatt" ] || fail "remove left /usr/lib/rackwatt: $(find "$root/usr/lib/rackwatt" | head -5)"

step "purge leaves nothing"
offline dpkg --purge rackwatt >/dev/null
left=$(cd "$root" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev \) -prune -o -name '*rackwatt*' -print \
       | grep -v -e '^./var/lib/dpkg/' -e '^./tmp/' || true)
[ -z "$left" ] || fail "purge left: $left"
step "OK"
