#!/usr/bin/env bash
# Build rackwatt_<version>_<arch>.deb that brings its own interpreter: Debian 12's python3.11 and
# the few libraries its modules link (taken from Debian's own binary packages of that
# architecture), plus the pinned manylinux wheels of packaging/requirements.txt, under
# /usr/lib/rackwatt. The package takes only the C library from the target (Depends computed
# from the binaries by packaging/elfdeps.py), so one .deb per architecture installs offline on
# Debian 12 and 13 and Ubuntu 22.04 and 24.04 whatever python they have, or none.
# Nothing is run for the target architecture, so arm64 builds on amd64. Usage:
#   packaging/build-deb.sh [--arch amd64|arm64] [--deb-version V] [--out DIR] [--fast]
# --fast compresses with gzip -1 instead of xz -6 (tests: ~10x faster to build, 1.5x bigger).
# --deb-version overrides the Debian version only (e.g. a rebuild "0.1.0-2"); the Python
# package version always comes from agent/__init__.py. Needs network (deb.debian.org, PyPI)
# unless the cache (RACKWATT_CACHE, default ~/.cache/rackwatt) already holds both downloads.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

arch=$(dpkg --print-architecture)
out="$repo/packaging/build"
deb_version=""
compression=(-Zxz -z6)
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    --deb-version) deb_version="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --fast) compression=(-Zgzip -z1); shift ;;
    *) echo "build-deb: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$arch" in
  amd64) triplet=x86_64-linux-gnu; wheel_arch=x86_64 ;;
  arm64) triplet=aarch64-linux-gnu; wheel_arch=aarch64 ;;
  *) echo "build-deb: --arch must be amd64 or arm64, not $arch" >&2; exit 2 ;;
esac
for tool in dpkg-deb patchelf readelf; do
  command -v "$tool" >/dev/null || { echo "build-deb: $tool is missing (.ci/setup installs it)" >&2; exit 1; }
done
host_python="$repo/.venv/bin/python"
[ -x "$host_python" ] || host_python=python3
pip=("$host_python" -m pip --disable-pip-version-check -q)

# The interpreter comes from Debian 12: its glibc floor (2.35, computed below) is the lowest of
# the Debian/Ubuntu releases in use, so one build runs on all of them.
suite=bookworm
py_minor=3.11
interpreter_pkgs=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib)
# The libraries the kept stdlib extension modules link, bundled so the target needs none of them.
library_pkgs=(libssl3 libffi8 libsqlite3-0 libexpat1 zlib1g liblzma5 libbz2-1.0 libuuid1)
# Extension modules the agent never imports whose libraries would otherwise have to be bundled
# (terminal, dbm, NIS, audio, crypt(3)) or that exist only for CPython's own test suite.
drop_modules=(_crypt _curses _curses_panel _dbm _gdbm nis readline ossaudiodev _ctypes_test
              _testbuffer _testcapi _testclinic _testimportmultiple _testinternalcapi
              _testmultiphase _xxsubinterpreters _xxtestfuzz xxlimited xxlimited_35 xxsubtype)
# Pure-Python stdlib parts that serve only development or a GUI.
drop_stdlib=(test idlelib turtledemo tkinter turtle.py lib2to3 ensurepip pydoc_data)

version=$("$host_python" -c 'import re,sys; print(re.search(r"__version__ = \"([^\"]+)\"", open("agent/__init__.py").read()).group(1))')
deb_version=${deb_version:-$version-1}
cache="${RACKWATT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/rackwatt}"
mkdir -p "$out"
work=$(mktemp -d "$out/work.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage="$work/stage"
prefix="$stage/usr/lib/rackwatt"
echo "build-deb: rackwatt $deb_version ($arch, Debian $suite python$py_minor)" >&2

# 1. Debian's interpreter and libraries for $arch, unpacked (never run).
debs=$(packaging/fetch-debs.sh "$arch" "$suite" "$cache/debian-$suite-$arch" \
       "${interpreter_pkgs[@]}" "${library_pkgs[@]}")
sysroot="$work/sysroot"
for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
install -D -m 0755 "$sysroot/usr/bin/python$py_minor" "$prefix/bin/python$py_minor"
ln -s "python$py_minor" "$prefix/bin/python3"
mkdir -p "$prefix/lib"
cp -a "$sysroot/usr/lib/python$py_minor" "$prefix/lib/"
stdlib="$prefix/lib/python$py_minor"
for module in "${drop_modules[@]}"; do rm -f "$stdlib/lib-dynload/$module".cpython-*.so; done
for part in "${drop_stdlib[@]}"; do rm -rf "${stdlib:?}/$part"; done
rm -f "$stdlib/sitecustomize.py"                 # a link to /etc/python3.11, which is not ours
for pkg in "${library_pkgs[@]}"; do
  dpkg-deb -c "$debs/${pkg}"_*.deb | awk '{print $6}' | grep -E "^\./(usr/)?lib/$triplet/lib[^/]*\.so[^/]*$" \
    | while read -r lib; do cp -a "$sysroot/${lib#./}" "$prefix/lib/"; done
done
# Each binary finds the bundled libraries through its own RUNPATH, relative to where it lies;
# no LD_LIBRARY_PATH (it would leak into every child process).
patchelf --set-rpath '$ORIGIN/../lib' "$prefix/bin/python$py_minor"
for so in "$stdlib"/lib-dynload/*.so; do patchelf --set-rpath '$ORIGIN/../..' "$so"; done
find "$prefix/lib" -maxdepth 1 -name 'lib*.so*' -type f -exec patchelf --set-rpath '$ORIGIN' {} \;
mkdir -p "$stage/usr/share/doc/rackwatt/bundled"
for deb in "$debs"/*.deb; do
  name=$(dpkg-deb -f "$deb" Package)
  echo "$name $(dpkg-deb -f "$deb" Version) $(dpkg-deb -f "$deb" Architecture)" >> "$work/debian-packages"
  for doc in "$sysroot/usr/share/doc/$name/copyright"; do
    [ -f "$doc" ] && install -D -m 0644 "$doc" "$stage/usr/share/doc/rackwatt/bundled/$name/copyright"
  done
done

# 2. The agent and the pinned wheels, installed for $arch without running its interpreter.
wheels="$cache/wheels-$wheel_arch"
mkdir -p "$wheels"
# Wheels up to the interpreter's own glibc floor, oldest first (pip prefers the first tag it is
# given), so no wheel raises the floor the interpreter sets.
platforms=(--platform "manylinux2014_$wheel_arch")
for minor in $(seq 17 35); do platforms+=(--platform "manylinux_2_${minor}_$wheel_arch"); done
target=(--only-binary=:all: --no-deps "${platforms[@]}" --python-version "$py_minor"
        --implementation cp --abi "cp${py_minor/./}" --abi abi3 --abi none)
"${pip[@]}" download "${target[@]}" -d "$wheels" -r packaging/requirements.txt 2>&1 \
  | grep -v "is ignored: it is neither" >&2 || true
agent_wheel="$work/agent-wheel"
had_build_dir=no; [ -d "$repo/build" ] && had_build_dir=yes
"${pip[@]}" wheel --no-deps -w "$agent_wheel" "$repo" 2>/dev/null
[ "$had_build_dir" = yes ] || rm -rf "$repo/build"          # setuptools' scratch folder
site="$stdlib/dist-packages"                               # where Debian's site.py looks
"${pip[@]}" install "${target[@]}" --no-index --find-links "$wheels" --no-compile \
  --target "$site" -r packaging/requirements.txt "$agent_wheel"/rackwatt-*.whl 2>&1 \
  | grep -v "is ignored: it is neither" >&2 || true
[ -d "$site/agent" ] && [ -d "$site/numpy" ] || { echo "build-deb: wheel install failed" >&2; exit 1; }
for info in "$site"/*.dist-info; do
  sed -n -e 's/^Name: //p' -e 's/^Version: //p' "$info/METADATA" | head -2 | paste -sd' '
done > "$work/python-packages"
rm -rf "$site/bin"                                      # entry points with build-path shebangs
rm -f "$site/example.py"                                # stray file shipped by nvidia-ml-py
find "$site" -name direct_url.json -delete              # records the build path
find "$site" -name .DS_Store -delete                    # shipped by pysnmp's wheel
find "$site" -path '*/tests' -type d -prune -exec rm -rf {} +   # test suites of bundled packages
# numpy's C-API headers and static libraries serve only building against numpy.
rm -rf "$site/numpy/_core/include" "$site/numpy/_core/lib" "$site/numpy/random/lib"
find "$prefix" -name '*.so*' -type f -exec chmod 0644 {} +  # never strip: auditwheel-patched libraries break
# Modules are only imported, never run as scripts: no exec bit, and each "#!" line (naming
# /usr/bin/python3.11 or /usr/local/bin/python, which are not ours) becomes a plain comment, so
# line numbers and a line-2 coding declaration stay as they were.
find "$prefix/lib" -name '*.py' -type f -exec chmod 0644 {} + \
  -exec sed -i '1s|^#!.*|# (script line removed: run by /usr/lib/rackwatt/bin/python3.11)|' {} +
find "$stage" -name __pycache__ -type d -prune -exec rm -rf {} +
find "$stage" -name '*.pyc' -delete

# 3. What the binaries need from the target, computed from them (also checks every ELF is $arch).
system_depends=$("$host_python" packaging/elfdeps.py "$stage" --arch "$arch")

# 4. Files around the interpreter.
install -D -m 0755 packaging/debian/rackwatt.sh "$stage/usr/bin/rackwatt"
install -D -m 0644 packaging/agent.toml "$stage/etc/rackwatt/agent.toml"
install -d -m 0755 "$stage/etc/rackwatt/conf.d"
install -D -m 0644 systemd/rackwatt.service "$stage/usr/lib/systemd/system/rackwatt.service"
doc="$stage/usr/share/doc/rackwatt"
install -D -m 0644 README.md "$doc/README.md"
find docs -type f | while read -r page; do install -D -m 0644 "$page" "$doc/$page"; done   # playbook included
install -D -m 0644 packaging/debian/copyright "$doc/copyright"
{
  echo "# What this package bundles under /usr/lib/rackwatt (for security tracking)."
  echo "# Debian $suite binary packages (package version architecture):"
  sort "$work/debian-packages"
  echo "# Python packages (PyPI wheels for $wheel_arch):"
  sort "$work/python-packages"
} > "$doc/BUNDLED"
chmod 0644 "$doc/BUNDLED"
gzip -9n < packaging/debian/changelog > "$doc/changelog.Debian.gz"
chmod 0644 "$doc/changelog.Debian.gz"
install -D -m 0644 packaging/debian/lintian-overrides "$stage/usr/share/lintian/overrides/rackwatt"

# 5. Control files.
install -d "$stage/DEBIAN"
for script in postinst prerm postrm; do
  install -m 0755 "packaging/debian/$script" "$stage/DEBIAN/$script"
done
echo "/etc/rackwatt/agent.toml" > "$stage/DEBIAN/conffiles"
installed_kb=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
sed -e "s/@VERSION@/$deb_version/" -e "s/@ARCH@/$arch/" -e "s/@SYSTEM_DEPENDS@/$system_depends/" \
    -e "s/@SIZE@/$installed_kb/" packaging/debian/control.in > "$stage/DEBIAN/control"

# Normalise modes and timestamps so that two builds of one commit have the same contents list.
find "$stage" -type d -exec chmod 0755 {} +
# md5sums for debsums; conffiles are left out, as dh_md5sums does (dpkg tracks those itself).
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | grep -vxF -f <(sed 's|^/||' DEBIAN/conffiles) \
   | LC_ALL=C sort | tr '\n' '\0' | xargs -0 md5sum > DEBIAN/md5sums)
chmod 0644 "$stage/DEBIAN/md5sums" "$stage/DEBIAN/conffiles" "$stage/DEBIAN/control"
find "$stage" -exec touch -h -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}" {} +

deb="$out/rackwatt_${deb_version}_${arch}.deb"
dpkg-deb --root-owner-group "${compression[@]}" --build "$stage" "$deb" >/dev/null
echo "$deb"
