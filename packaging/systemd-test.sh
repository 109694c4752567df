#!/usr/bin/env bash
# The package under a real systemd: a Debian 12 minbase root with systemd (cached tarball) booted
# as PID 1 of new PID, mount, network, IPC, UTS and cgroup namespaces (what systemd-nspawn does,
# without needing it), no network. Checks: the unit starts (Type=notify: active only after
# READY=1), a reload the agent applies succeeds, a reload it rejects fails `systemctl reload`
# and leaves it running, a stalled agent is killed by the watchdog and restarted. Needs root.
#   packaging/systemd-test.sh PACKAGE.deb
set -euo pipefail
deb=$(realpath "$1")
arch=$(dpkg --print-architecture)
cache="${RACKWATT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rackwatt}"
base="$cache/root-bookworm-$arch-systemd.tar"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
work=$(mktemp -d)
root="$work/root"
cgroup_name="rackwatt-systemd-test.$$"
pid1=""
step() { echo "systemd-test: $*" >&2; }
fail() {  # the FAILED line last: a caller that keeps the output's tail keeps the reason
  tail -30 "$work/console.log" >&2 2>/dev/null; [ -n "$pid1" ] && in_container journalctl -b --no-pager -n 60 >&2
  echo "systemd-test: FAILED: $*" >&2; exit 1; }
cleanup() {
  [ -n "$pid1" ] && kill -KILL "$pid1" 2>/dev/null && sleep 0.5
  for dir in /sys/fs/cgroup/*/"$cgroup_name" /sys/fs/cgroup/unified/"$cgroup_name"; do
    [ -d "$dir" ] && find "$dir" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  [ -n "${KEEP:-}" ] && echo "kept $work" >&2 || rm -rf "$work"
}
trap cleanup EXIT
in_container() { nsenter --target "$pid1" --mount --uts --ipc --net --pid --cgroup --root --wd "$@"; }

if [ ! -f "$base" ]; then
  step "building the cached Debian 12 root with systemd (once)"
  mkdir -p "$cache"
  debootstrap --variant=minbase --include=systemd,systemd-sysv bookworm "$root" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap"; }
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/*
  tar -C "$root" -cf "$base.tmp" . && mv "$base.tmp" "$base"
  rm -rf "$root"
fi
mkdir -p "$root"
tar -C "$root" -xf "$base"
cp "$deb" "$root/tmp/rackwatt.deb"
unshare --net --mount-proc="$root/proc" --pid --fork chroot "$root" dpkg -i /tmp/rackwatt.deb >/dev/null
# An agent that can run here: a real identity, no broker, no GPUs, one PDU nobody answers.
cat > "$root/etc/rackwatt/conf.d/10-test.toml" <<'EOF'
[agent]
site = "dc1"
rack = "r07"
[mqtt]
enabled = false
[nvml]
enabled = false
[[pdu]]
id = "a"
host = "127.0.0.1"
port = 16161
community_file = "/etc/rackwatt/pdu-a.community"
EOF
printf 'public\n' > "$root/etc/rackwatt/pdu-a.community"
chroot "$root" chown rackwatt:rackwatt /etc/rackwatt/pdu-a.community
chmod 0600 "$root/etc/rackwatt/pdu-a.community"
# A short watchdog and restart delay, so the watchdog check takes seconds, not minutes. 20 s, not
# less: on a loaded CI machine a 4 s watchdog, and once a 10 s one (2 cores, 4 test workers), restarted
# the agent before the reload checks.
install -d "$root/etc/systemd/system/rackwatt.service.d"
printf '[Service]\nWatchdogSec=20s\nRestartSec=1s\n' > "$root/etc/systemd/system/rackwatt.service.d/test.conf"
echo rackwatt-test > "$root/etc/hostname"

# systemd manages the cgroup it starts in: give it one of its own in every hierarchy.
for dir in /sys/fs/cgroup/*/ /sys/fs/cgroup/unified/; do
  [ -f "$dir/cgroup.procs" ] && mkdir -p "$dir$cgroup_name"
done
if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then   # a v1 cpuset group takes no process until it has CPUs
  cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset/$cgroup_name/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset/$cgroup_name/cpuset.mems"
fi
cat > "$work/boot.sh" <<EOF
#!/bin/sh
set -e
for dir in /sys/fs/cgroup/*/ /sys/fs/cgroup/unified/; do
  [ -f "\${dir}$cgroup_name/cgroup.procs" ] && echo \$\$ > "\${dir}$cgroup_name/cgroup.procs"
done
exec unshare --pid --fork --mount --uts --ipc --net --cgroup sh -c '
  set -e
  mount --make-rprivate /
  mount --bind "$root" "$root"             # the unit sandbox needs its root to be a mount point
  ip link set lo up
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount -t tmpfs -o mode=755 tmpfs "$root/sys/fs/cgroup"
  for dir in /sys/fs/cgroup/*/; do
    name=\$(basename "\$dir"); [ "\$name" = unified ] && continue
    mkdir -p "$root/sys/fs/cgroup/\$name"
    if [ "\$name" = systemd ]; then opts=none,name=systemd; else opts=\$name; fi
    mount -t cgroup -o "\$opts" cgroup "$root/sys/fs/cgroup/\$name"
  done
  mkdir -p "$root/sys/fs/cgroup/unified" && mount -t cgroup2 cgroup2 "$root/sys/fs/cgroup/unified"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs tmpfs "$root/run"
  mount -t tmpfs tmpfs "$root/tmp"
  exec chroot "$root" env container=rackwatt-test /lib/systemd/systemd --system --log-target=journal
'
EOF
(setsid sh "$work/boot.sh" >"$work/console.log" 2>&1 &)
for _ in $(seq 100); do   # PID 1 of the container: the systemd whose root is ours
  pid1=$(for pid in $(pgrep -x systemd); do
           [ "$(readlink "/proc/$pid/root")" = "$root" ] && echo "$pid"; done | head -1)
  [ -n "$pid1" ] && break
  sleep 0.1
done
[ -n "$pid1" ] || { cat "$work/console.log" >&2; fail "systemd did not start"; }
for _ in $(seq 300); do   # up to 30 s for its control socket
  in_container test -S /run/systemd/private && break
  sleep 0.1
done
state=$(in_container timeout 120 systemctl is-system-running --wait 2>&1 || true)
step "booted: systemd $(in_container systemctl --version | head -1 | cut -d' ' -f2), system $state"

# PrivateUsers= needs to write a user namespace's uid_map, which this sandbox refuses even for a
# bare unit (217/USER); probe that, and only then lift it for the test, saying so.
printf '[Service]\nType=oneshot\nExecStart=/bin/true\nPrivateUsers=yes\n' \
  > "$root/etc/systemd/system/rackwatt-probe.service"
in_container systemctl daemon-reload
if ! in_container systemctl start rackwatt-probe.service 2>/dev/null; then
  step "this machine cannot run PrivateUsers=yes units at all (217/USER): testing with PrivateUsers=no"
  printf 'PrivateUsers=no\n' >> "$root/etc/systemd/system/rackwatt.service.d/test.conf"
  in_container systemctl daemon-reload
fi

step "start (Type=notify: active only after READY=1)"
in_container systemctl start rackwatt.service || fail "systemctl start"
[ "$(in_container systemctl is-active rackwatt.service)" = active ] || fail "not active"
main=$(in_container systemctl show -P MainPID rackwatt.service)

step "reload the agent applies"
sed -i 's/^port = 16161/port = 16162/' "$root/etc/rackwatt/conf.d/10-test.toml"
in_container systemctl reload rackwatt.service || fail "a good reload failed"

step "reload the agent rejects fails systemctl reload"
sed -i 's/^port = 16162/port = 99999/' "$root/etc/rackwatt/conf.d/10-test.toml"
if in_container systemctl reload rackwatt.service; then fail "a rejected reload returned success"; fi
[ "$(in_container systemctl is-active rackwatt.service)" = active ] || fail "a rejected reload stopped the agent"
[ "$(in_container systemctl show -P MainPID rackwatt.service)" = "$main" ] || fail "the agent restarted"
sed -i 's/^port = 99999/port = 16161/' "$root/etc/rackwatt/conf.d/10-test.toml"

step "a stalled agent is killed by the watchdog and restarted"
in_container sh -c "kill -STOP $main"   # the shell's kill: the root has no procps
for _ in $(seq 600); do   # ≥ 60 s: the 20 s watchdog plus the restart, on a loaded machine
  restarts=$(in_container systemctl show -P NRestarts rackwatt.service)
  now=$(in_container systemctl show -P MainPID rackwatt.service)
  [ "$restarts" -ge 1 ] && [ "$now" != "$main" ] && [ "$now" != 0 ] \
    && [ "$(in_container systemctl is-active rackwatt.service)" = active ] && break
  sleep 0.1
done
[ "$restarts" -ge 1 ] || fail "no restart after the watchdog period"
# (read whole, then matched: `journalctl | grep -q` under pipefail fails when grep's early exit
# SIGPIPEs journalctl, i.e. whenever the journal is longer than a pipe buffer)
journal=$(in_container journalctl -b --no-pager -t systemd)
grep -q -i "rackwatt.service: watchdog timeout" <<<"$journal" || fail "not a watchdog restart"

step "stop"
in_container systemctl stop rackwatt.service
[ "$(in_container systemctl is-active rackwatt.service || true)" = inactive ] || fail "did not stop"
step "OK"
