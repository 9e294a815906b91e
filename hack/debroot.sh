# Sourced by hack/guest/build.sh and hack/images.sh (after lib.sh): Debian
# packages of GUEST_SUITE (trixie), fetched with `apt-get download` through
# guest_apt's package lists and unpacked, never installed on this machine.

# lib_closure PKG...: PKG and, transitively, the library packages they depend
# on (first alternative of each or-group; programs such as uuid-runtime are
# not followed: only shared libraries are needed next to the binary).
lib_closure() {
  local -A seen=()
  local queue=("$@") next p
  while [ ${#queue[@]} -gt 0 ]; do
    next=()
    for p in "${queue[@]}"; do seen[$p]=1; done
    while read -r p; do
      [ -n "${seen[$p]:-}" ] || next+=("$p")
    done < <(apt-cache "${APT_OPTS[@]}" depends --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances "${queue[@]}" | awk '
        /^[^ ]/ { alt = 0; next }
        /^ \|(Pre)?Depends:/ { if (!alt) print $2; alt = 1; next }
        /^  (Pre)?Depends:/ { if (!alt) print $2; alt = 0; next }
        { alt = 0 }' | grep -E '^(lib|zlib)' | sort -u)
    queue=()
    for p in "${next[@]}"; do [ -n "${seen[$p]:-}" ] || queue+=("$p"); done
  done
  printf '%s\n' "${!seen[@]}" | sort
}

# download_debs DIR PKG...: download PKGs (name or name=version) into DIR.
download_debs() {
  local dir="$1"; shift
  mkdir -p "$dir"
  # apt downloads as the unprivileged _apt user, who cannot enter root's
  # cache: let it write there.
  chmod 0755 "$dir"
  if [ "$(id -u)" -eq 0 ] && id _apt >/dev/null 2>&1; then chown _apt "$dir"; fi
  (cd "$dir" && apt-get "${APT_OPTS[@]}" download -q "$@" >/dev/null) \
    || die "apt-get download from $GUEST_SUITE failed: $*"
}

# unpack_debs ROOT DEB...: unpack into ROOT, with merged /usr: Debian 12
# ships /lib and /bin, 13 /usr only (whose /lib -> usr/lib links come from
# base-files, not downloaded); the top-level names are linked into usr/ so
# both layouts read the same.
unpack_debs() {
  local root="$1" deb d; shift
  mkdir -p "$root"
  for deb in "$@"; do dpkg-deb -x "$deb" "$root"; done
  for d in bin sbin lib lib64; do
    mkdir -p "$root/usr/$d"
    if [ -d "$root/$d" ] && [ ! -L "$root/$d" ]; then
      cp -a "$root/$d/." "$root/usr/$d/"
      rm -rf "${root:?}/$d"
    fi
    ln -sfn "usr/$d" "$root/$d"
  done
}

# check_libs ROOT BIN: BIN (a path inside ROOT) finds every shared library
# it needs inside ROOT, resolved by ROOT's own loader (what ldd does there).
check_libs() {
  local root="$1" bin="$2" loader listing
  loader="$root/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
  [ -x "$loader" ] || die "$root has no loader (libc6 missing)"
  # librados' RUNPATH (/usr/lib/x86_64-linux-gnu/ceph) would name this
  # machine's directory: the root's comes first.
  listing="$("$loader" --library-path "$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/ceph:$root/usr/lib" \
    --list "$root$bin" 2>&1)" \
    || die "cannot list the libraries of $bin in $root:
$listing"
  if grep -q 'not found' <<<"$listing"; then
    die "$bin needs libraries no package of the image provides: $(grep 'not found' <<<"$listing" | tr -s ' \t' ' ')"
  fi
  if awk '$2 == "=>" && $3 ~ /^\// { print $3 }' <<<"$listing" | grep -v "^$root/" | grep -q .; then
    die "$bin resolves libraries outside $root: $(awk '$2 == "=>" { print $3 }' <<<"$listing" | grep -v "^$root/" | head -3 | tr '\n' ' ')"
  fi
}
