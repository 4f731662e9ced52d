#!/usr/bin/env bash
# Downloads the Debian source package PACKAGE of this release into DIR (its .dsc, orig and
# debian tarballs), through a private apt configuration under DIR/apt: a deb-src line of
# this release, so the system's sources and lists stay as they are. Exit status 1 when
# the archive does not serve it. Used by mpich-rma.sh and armci-rma.sh.
#
#   bash scripts/debian-source.sh PACKAGE DIR
set -euo pipefail
package=$1 dir=$2
. /etc/os-release
apt_dir=$dir/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
  "http://deb.debian.org/debian $VERSION_CODENAME main" >"$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=-"
  -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
  -o "APT::Sandbox::User=root")
apt-get "${apt_opts[@]}" update -qq
cd "$dir" && apt-get "${apt_opts[@]}" source --download-only -qq "$package"
