#!/usr/bin/env bash
# Install test on a clean Debian: a debootstrap --variant=minbase root of SUITE (bookworm = 12,
# trixie = 13) with NOTHING added, built once and cached as a tarball. Inside a copy of it and
# WITHOUT network (each step under `unshare --net`): dpkg -i, --version, check-config the way the
# unit does, `poll --once` against twin devices served on the namespace's own loopback, a short
# replay as user rackwatt, md5sums, an upgrade to a rebuilt higher version that keeps
# configuration and state, remove (keeps them), purge (leaves nothing). Needs root (chroot,
# unshare) and, for the first run of a suite, the Debian mirror.
#   packaging/install-test.sh [--arch A] SUITE OLD.deb NEW.deb TRACE.csv
#   packaging/install-test.sh [--arch A] --prepare SUITE      # only build the cached root
# --arch (default: this machine's) other than the host's needs binfmt_misc with qemu registered.
set -euo pipefail
prepare_only=no
arch=$(dpkg --print-architecture)
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) prepare_only=yes; shift ;;
    --arch) arch=$2; shift 2 ;;
    *) break ;;
  esac
done
suite=$1
cache="${RACKWATT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rackwatt}"
base="$cache/root-$suite-$arch-minbase.tar"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
work=$(mktemp -d)
root="$work/root"
trap 'rm -rf "$work"' EXIT
step() { echo "install-test[$suite]: $*" >&2; }  # (arch in the base line)
fail() { echo "install-test[$suite]: FAILED: $*" >&2; exit 1; }

if [ ! -f "$base" ]; then
  step "building the cached minbase root (once): debootstrap --variant=minbase $suite"
  mkdir -p "$cache"
  debootstrap --arch="$arch" --variant=minbase "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap $suite"; }
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/*.log
  tar -C "$root" -cf "$base.tmp" . && mv "$base.tmp" "$base"
  rm -rf "$root"
fi
[ "$prepare_only" = no ] || { step "root cached in $base"; exit 0; }
old_deb=$(realpath "$2"); new_deb=$(realpath "$3"); trace=$(realpath "$4")

mkdir -p "$root"
tar -C "$root" -xf "$base"
cp "$old_deb" "$root/tmp/old.deb"; cp "$new_deb" "$root/tmp/new.deb"; cp "$trace" "$root/tmp/trace.csv"
chmod 0644 "$root/tmp/trace.csv"
# No network inside: the install must be offline. A private /proc, as every real system has: the
# dynamic loader resolves the interpreter's $ORIGIN RUNPATH through /proc/self/exe.
isolated=(unshare --net --pid --fork --mount-proc="$root/proc")
offline() { "${isolated[@]}" chroot "$root" "$@"; }
as_rackwatt() { "${isolated[@]}" chroot --userspec=rackwatt:rackwatt "$root" env HOME=/var/lib/rackwatt "$@"; }
step "base: $(offline sh -c '. /etc/os-release; echo "$PRETTY_NAME"') $arch, $(offline dpkg-query -W -f='${Package}\n' | wc -l) packages, $(offline sh -c 'command -v python3 || echo "no python3"')"

step "dpkg -i (offline, nothing pre-installed)"
offline dpkg -i /tmp/old.deb >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "dpkg -i"; }
[ "$(offline dpkg-query -W -f='${db:Status-Abbrev}' rackwatt)" = "ii " ] || fail "not fully installed"
offline rackwatt --version
step "check-config refuses the shipped placeholder site/rack"
if offline rackwatt check-config /etc/rackwatt/agent.toml >/dev/null 2>&1; then fail "placeholders accepted"; fi
# The operator's first edit: a real identity, in a drop-in, checked the way the unit checks it.
printf '[agent]\nsite = "dc1"\nrack = "r07"\n' > "$root/etc/rackwatt/conf.d/10-identity.toml"
offline rackwatt check-config /etc/rackwatt/agent.toml --conf-d /etc/rackwatt/conf.d
step "user: $(offline getent passwd rackwatt || fail "no rackwatt user")"
offline sh -c 'cd / && md5sum --check --quiet /var/lib/dpkg/info/rackwatt.md5sums' \
  || fail "md5sums do not match the installed files"

step "poll --once against twin devices on the namespace's loopback"
install -d "$root/tmp/poll"
printf 'public\n' > "$root/tmp/poll/community"; chmod 0600 "$root/tmp/poll/community"
cat > "$root/tmp/poll/agent.toml" <<'EOF'
[agent]
site = "dc1"
rack = "r07"
[nvml]
enabled = false
[[pdu]]
id = "a"
host = "127.0.0.1"
port = 16161
community_file = "/tmp/poll/community"
timeout_s = 3.0
[[crac]]
id = "c1"
host = "127.0.0.1"
port = 15020
profile = "liebert_crv"
rated_fan_power_w = 1000.0
timeout_s = 3.0
EOF
cat > "$root/tmp/poll/run.sh" <<'EOF'
#!/bin/sh
# Inside the chroot and the new network namespace: serve the twin's PDU and cooling unit with the
# installed interpreter, wait until both say they listen, poll once.
set -e
py=/usr/lib/rackwatt/bin/python3.11
$py -I -m agent.sim.devices.snmp_agent --vendor apc_rpdu2 --port 16161 > /tmp/poll/pdu.log 2>&1 &
pdu=$!
$py -I -m agent.sim.devices.modbus_server --profile liebert_crv --port 15020 > /tmp/poll/crac.log 2>&1 &
crac=$!
for _ in $(seq 100); do   # up to 10 s for both to start on a loaded machine
  grep -q udp:// /tmp/poll/pdu.log && grep -q 15020 /tmp/poll/crac.log && break
  sleep 0.1
done
rc=0
rackwatt poll --config /tmp/poll/agent.toml --once --json > /tmp/poll/out.json || rc=$?
kill "$pdu" "$crac"
exit $rc
EOF
"${isolated[@]}" sh -c "ip link set lo up && exec chroot '$root' /bin/sh /tmp/poll/run.sh" \
  || { cat "$root"/tmp/poll/*.log >&2; fail "poll --once"; }
for signal in '"pdu.a.power_w"' '"crac.c1.fan_pct"'; do
  grep -q "$signal" "$root/tmp/poll/out.json" || fail "poll printed no $signal: $(head -c 2000 "$root/tmp/poll/out.json")"
done
step "poll: $(grep -c '"ok": true' "$root/tmp/poll/out.json") device(s) ok"

step "replay as user rackwatt"
as_rackwatt rackwatt replay /tmp/trace.csv --report /var/lib/rackwatt/replay.jsonl \
  --state-out /var/lib/rackwatt/engine.state
[ -s "$root/var/lib/rackwatt/replay.jsonl" ] || fail "replay wrote no report"
[ -s "$root/var/lib/rackwatt/engine.state" ] || fail "replay wrote no state"
state_sum=$(sha256sum < "$root/var/lib/rackwatt/engine.state")
echo "# local edit kept across upgrades" >> "$root/etc/rackwatt/agent.toml"

step "upgrade to the rebuilt higher version"
offline dpkg -i --force-confold /tmp/new.deb >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log" >&2; fail "upgrade"; }
new_version=$(offline dpkg-query -W -f='${Version}' rackwatt)
[ "$new_version" = "$(dpkg-deb -f "$new_deb" Version)" ] || fail "version after upgrade is $new_version"
grep -q "local edit kept" "$root/etc/rackwatt/agent.toml" || fail "upgrade lost the configuration edit"
[ -f "$root/etc/rackwatt/conf.d/10-identity.toml" ] || fail "upgrade lost the conf.d drop-in"
[ "$(sha256sum < "$root/var/lib/rackwatt/engine.state")" = "$state_sum" ] || fail "upgrade changed the state"
offline rackwatt check-config /etc/rackwatt/agent.toml --conf-d /etc/rackwatt/conf.d

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
