#!/usr/bin/env bash
# Download Debian binary packages of any architecture into a cache folder, with a private apt
# state (its own sources, lists and dpkg status), so the build host's apt configuration and
# architectures are never touched and no root is needed. Prints the folder.
#   packaging/fetch-debs.sh ARCH SUITE DEST PACKAGE...
# Re-running with the same arguments downloads nothing new: apt keeps what it already has.
set -euo pipefail
arch=$1; suite=$2; dest=$3; shift 3
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
keyring="${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}"
[ -r "$keyring" ] || { echo "fetch-debs: no archive keyring at $keyring (apt-get install debian-archive-keyring)" >&2; exit 1; }

apt_root="$dest/apt"
mkdir -p "$apt_root/etc/apt/apt.conf.d" "$apt_root/etc/apt/preferences.d" "$apt_root/etc/apt/sources.list.d" \
         "$apt_root/var/lib/apt/lists/partial" "$apt_root/var/cache/apt/archives/partial" "$apt_root/var/lib/dpkg"
touch "$apt_root/var/lib/dpkg/status"
cat > "$apt_root/etc/apt/sources.list" <<EOF
deb [arch=$arch signed-by=$keyring] $mirror $suite main
deb [arch=$arch signed-by=$keyring] $mirror $suite-updates main
deb [arch=$arch signed-by=$keyring] $security $suite-security main
EOF
apt_opts=(
  -o "Dir=$apt_root" -o "Dir::State::status=$apt_root/var/lib/dpkg/status"
  -o "Dir::Etc::Trusted=$keyring" -o "Dir::Etc::TrustedParts=$apt_root/etc/apt/trusted.gpg.d"
  -o "APT::Architecture=$arch" -o "APT::Architectures::=$arch"
  -o "APT::Sandbox::User=$(id -un)" -o "Debug::NoLocking=1" -o "Acquire::Languages=none"
)
mkdir -p "$apt_root/etc/apt/trusted.gpg.d"
# The lists are refreshed at most once a day: a rebuild within the day resolves the same versions.
stamp="$apt_root/updated"
if [ ! -f "$stamp" ] || [ -n "$(find "$stamp" -mmin +1440)" ]; then
  apt-get "${apt_opts[@]}" -qq update >&2
  touch "$stamp"
fi
mkdir -p "$dest/debs"
rm -f "$dest/debs"/*.deb                      # only the versions resolved now
(cd "$dest/debs" && apt-get "${apt_opts[@]}" -qq download "$@" >&2)
echo "$dest/debs"
