#!/usr/bin/env bash
# Builds libmicrohttpd from Debian's source package of a later release into PREFIX: bookworm ships
# 0.9.75, which answers some malformed requests itself before any callback (twice, or as HTML) and
# has no MHD_OPTION_CLIENT_DISCIPLINE_LVL; 1.0 has both fixed. Used by install.sh and by the
# image's build stage (deploy/docker/Dockerfile), with the same pins (check-deployment.py checks).
#
# Usage: build-libmicrohttpd.sh VERSION DSC_SHA256 ORIG_SHA256 PREFIX
# (with libmicrohttpd-patches/ beside the script)
# The .dsc is checked against its pin, then dpkg-source checks the tarballs against the .dsc (and
# the upstream tarball against its own pin). The release's sources list is temporary: the
# machine's apt sources are left as they were. PREFIX appears complete or not at all.
set -euo pipefail
version="$1" dsc_sha256="$2" orig_sha256="$3" prefix="$4"
suite="${MHD_SOURCE_SUITE:-trixie}"
upstream="${version%-*}"

mkdir -p "$(dirname "$prefix")"
work=$(mktemp -d "$prefix.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # apt-get fetches as _apt where it can
mkdir -p "$work/apt/lists/partial" "$work/src"
echo "deb-src http://deb.debian.org/debian $suite main" >"$work/apt/sources.list"
apt_options=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
             -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache::srcpkgcache=" -o "Dir::Cache::pkgcache=")
apt-get "${apt_options[@]}" update -qq
(cd "$work/src" && apt-get "${apt_options[@]}" source -qq --download-only "libmicrohttpd=$version" 2>&1 \
    | grep -v "unsandboxed as root" >&2 || true)

(cd "$work/src" && sha256sum -c --quiet - <<EOF
$dsc_sha256  libmicrohttpd_$version.dsc
$orig_sha256  libmicrohttpd_$upstream.orig.tar.gz
EOF
)
# No --require-valid-signature: the Debian developers' keyring is not on the machine; the .dsc's
# pin stands in for its signature, and it lists the checksums of every other file.
dpkg-source -x "$work/src/libmicrohttpd_$version.dsc" "$work/tree" >"$work/extract.log" 2>&1 \
    || { cat "$work/extract.log" >&2; exit 1; }

# Our patches (libmicrohttpd-patches/ beside this script): MHD's own refusals answer in the
# servers' JSON error shape. Kept with the build, so whoever builds the library gets them.
patches="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/libmicrohttpd-patches"
for patch in "$patches"/*.patch; do
    patch -d "$work/tree" -p1 --quiet --forward <"$patch" || { echo "$patch does not apply to $version" >&2; exit 1; }
done

# Debian's own hardening flags (its rules enable them all: the library parses untrusted input).
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
cc="${CC:-$(command -v gcc || command -v clang)}"
cd "$work/tree"
# Only what the servers use: no TLS (a proxy or the load balancer terminates it), no docs,
# examples, tools or curl-based tests.
# Compiler chatter goes to a log, shown only when the build fails.
log="$work/build.log"
{
    ./configure --prefix="$prefix" --disable-static --disable-https --disable-doc --disable-examples \
        --disable-tools --disable-curl CC="$cc" CFLAGS="$(dpkg-buildflags --get CFLAGS)" \
        CPPFLAGS="$(dpkg-buildflags --get CPPFLAGS)" LDFLAGS="$(dpkg-buildflags --get LDFLAGS)"
    make -j"$(nproc)" -C src/microhttpd
    make -C src/microhttpd install DESTDIR="$work/root"
    make -C src/include install DESTDIR="$work/root"
    make install-pkgconfigDATA DESTDIR="$work/root"
} >"$log" 2>&1 || { tail -40 "$log" >&2; exit 1; }
echo "$version" >"$work/root$prefix/VERSION"
cp -r "$patches" "$work/root$prefix/patches"  # install.sh rebuilds when they differ
rm -rf "$prefix"
mv "$work/root$prefix" "$prefix"
