#!/usr/bin/env bash
# Build rackwatt_<version>_<arch>.deb: the agent and every dependency in a private venv under
# /usr/lib/rackwatt/venv, built from Debian's own /usr/bin/python3.11, so the package installs
# offline with one `dpkg -i`. Usage:
#   packaging/build-deb.sh [--deb-version V] [--out DIR]
# --deb-version overrides the Debian version only (e.g. a rebuild "0.1.0+1"); the Python
# package version always comes from agent/__init__.py.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

python=/usr/bin/python3.11
out="$repo/packaging/build"
deb_version=""
while [ $# -gt 0 ]; do
  case "$1" in
    --deb-version) deb_version="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "build-deb: unknown argument $1" >&2; exit 2 ;;
  esac
done

[ -x "$python" ] || { echo "build-deb: $python is missing (apt-get install python3.11)" >&2; exit 1; }
py_minor=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
version=$("$python" -c 'import re,sys; print(re.search(r"__version__ = \"([^\"]+)\"", open("agent/__init__.py").read()).group(1))')
deb_version=${deb_version:-$version-1}
arch=$(dpkg --print-architecture)
mkdir -p "$out"
stage=$(mktemp -d "$out/stage.XXXXXX")
trap 'rm -rf "$stage"' EXIT
venv="$stage/usr/lib/rackwatt/venv"

echo "build-deb: rackwatt $deb_version ($arch, python$py_minor)" >&2
# 1. The private venv, from Debian's interpreter; installed with a pip from outside it so that
#    neither pip nor setuptools ship in the package.
"$python" -m venv --without-pip "$venv"
pip=("$python" -m pip)
"$python" -m pip --version >/dev/null 2>&1 || pip=("$repo/.venv/bin/python" -m pip)
wheels=$(mktemp -d)
had_build_dir=no; [ -d "$repo/build" ] && had_build_dir=yes
"${pip[@]}" wheel -q --disable-pip-version-check --no-deps -w "$wheels" "$repo" 2>/dev/null
"${pip[@]}" --python "$venv/bin/python" install -q --disable-pip-version-check --no-compile \
  --no-warn-script-location "$wheels"/rackwatt-*.whl
rm -rf "$wheels"
[ "$had_build_dir" = yes ] || rm -rf "$repo/build"          # setuptools' scratch folder

# 2. Make the venv relocatable to /usr/lib/rackwatt/venv and free of build paths.
ln -sfn "../../../../bin/python$py_minor" "$venv/bin/python"   # relative: /usr/lib/rackwatt/venv/bin → /usr/bin
ln -sfn python "$venv/bin/python3"
ln -sfn python "$venv/bin/python$py_minor"
find "$venv/bin" -maxdepth 1 -type f ! -name 'activate*' -delete      # entry points with build-path shebangs
rm -f "$venv"/bin/activate* "$venv"/bin/Activate.ps1
printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = %s\n' \
  "$("$python" -c 'import platform; print(platform.python_version())')" > "$venv/pyvenv.cfg"
site="$venv/lib/python$py_minor/site-packages"
rm -f "$site/example.py"                                  # stray file shipped by nvidia-ml-py
find "$site" -name direct_url.json -delete                 # records the build path
find "$site" -name .DS_Store -delete                        # shipped by pysnmp's wheel
find "$site" -path '*/tests' -type d -prune -exec rm -rf {} +   # test suites of bundled packages
find "$site" -name '*.so*' -type f -exec chmod 0644 {} +   # never strip: auditwheel-patched libraries break
find "$stage" -name __pycache__ -type d -prune -exec rm -rf {} +
find "$stage" -name '*.pyc' -delete

# 3. Files around the venv.
install -D -m 0755 packaging/debian/rackwatt.sh "$stage/usr/bin/rackwatt"
install -D -m 0644 packaging/agent.toml "$stage/etc/rackwatt/agent.toml"
install -d -m 0755 "$stage/etc/rackwatt/conf.d"
install -D -m 0644 systemd/rackwatt.service "$stage/lib/systemd/system/rackwatt.service"
install -D -m 0644 README.md "$stage/usr/share/doc/rackwatt/README.md"
install -D -m 0644 packaging/debian/copyright "$stage/usr/share/doc/rackwatt/copyright"
gzip -9n < packaging/debian/changelog > "$stage/usr/share/doc/rackwatt/changelog.Debian.gz"
chmod 0644 "$stage/usr/share/doc/rackwatt/changelog.Debian.gz"
install -D -m 0644 packaging/debian/lintian-overrides "$stage/usr/share/lintian/overrides/rackwatt"

# 4. Control files.
install -d "$stage/DEBIAN"
for script in postinst prerm postrm; do
  install -m 0755 "packaging/debian/$script" "$stage/DEBIAN/$script"
done
echo "/etc/rackwatt/agent.toml" > "$stage/DEBIAN/conffiles"
installed_kb=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$deb_version/" -e "s/@ARCH@/$arch/" -e "s/@PYMINOR@/$py_minor/" \
    -e "s/@SIZE@/$installed_kb/" packaging/debian/control.in > "$stage/DEBIAN/control"

# Normalise modes and timestamps so that two builds of one commit have the same contents list.
find "$stage" -type d -exec chmod 0755 {} +
find "$stage" -exec touch -h -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}" {} +

deb="$out/rackwatt_${deb_version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz -z6 --build "$stage" "$deb" >/dev/null
echo "$deb"
