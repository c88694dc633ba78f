"""The checks scripts/wheels.sh runs on each platform's wheel, on the host and inside the platform's build root.

- ``arches``: the platforms built, one ``DEBIAN-ARCH MACHINE`` line each (the script's list);
- ``sdist SDIST``: checks the sdist holds ``setup.py`` and ``common/_kernels.c`` and prints the C source's sha256
  (what the wheel's build must have compiled in);
- ``wheel WHEEL MACHINE``: checks a repaired wheel is for MACHINE: every platform tag of its name and of its
  ``WHEEL`` file is a manylinux tag of MACHINE, and it holds exactly one ``common/_kernels`` extension, an ELF
  object for MACHINE; prints the tags;
- ``installed DIGEST`` (the root's test venv's python, cwd outside any checkout): the installed package's kernels
  are the compiled ones, loaded from this interpreter's site-packages, built from the source whose sha256 is DIGEST,
  on this machine;
- ``same-shards REFERENCE OUTPUT``: both jobs' manifests list the same shards (by source range and sha256), and
  every shard file in OUTPUT has the sha256 its manifest gives.

Only the standard library is imported at the top: ``installed`` runs in a venv that has only the wheel and its
dependencies, under emulation for a foreign platform.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tarfile
import zipfile
from pathlib import Path

#: Debian's architecture name (the build root's) and the machine name (``uname -m``, the wheel's tags): every
#: platform scripts/wheels.sh builds and tests a wheel for.
ARCHES = {"amd64": "x86_64", "arm64": "aarch64"}
#: ELF ``e_machine`` of each machine (the extension inside a wheel must be built for the wheel's platform).
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}
KERNELS = "common/_kernels.c"


class WheelError(Exception):
    """A wheel, sdist or install that is not what the platform's build must give; the message says what."""


def sdist_kernels_digest(sdist: Path) -> str:
    """The sha256 of ``common/_kernels.c`` inside the sdist, after checking it holds setup.py (which builds it)."""
    with tarfile.open(sdist, "r:gz") as archive:
        members = {member.name.split("/", 1)[1]: member for member in archive.getmembers() if "/" in member.name}
        for needed in ("setup.py", KERNELS):
            if needed not in members or not members[needed].isfile():
                raise WheelError(f"{sdist.name} has no {needed}: a wheel built from it has no compiled kernels")
        source = archive.extractfile(members[KERNELS])
        assert source is not None
        return hashlib.sha256(source.read()).hexdigest()


def platform_tags(name: str) -> list[str]:
    """The platform tags of a wheel's file name (``name-version-python-abi-platform.whl``, the platform part
    possibly a dotted set)."""
    parts = name.removesuffix(".whl").split("-")
    if not name.endswith(".whl") or len(parts) not in (5, 6):
        raise WheelError(f"{name} is not a wheel's file name")
    return parts[-1].split(".")


def check_platform_tags(tags: list[str], machine: str) -> None:
    """Every tag is a manylinux tag for ``machine`` (``manylinux_X_Y_<machine>`` or ``manylinux2014_<machine>``):
    a ``linux_*`` tag (not repaired), another machine's, or ``any`` is refused."""
    pattern = re.compile(rf"manylinux(_\d+_\d+|1|2010|2014)_{re.escape(machine)}")
    wrong = [tag for tag in tags if not pattern.fullmatch(tag)]
    if not tags or wrong:
        raise WheelError(f"platform tags {tags} are not all manylinux tags for {machine}: {wrong or 'none'}")


def elf_machine(data: bytes) -> int:
    """``e_machine`` of a 64-bit little-endian ELF object (the only kind a Linux x86_64 or aarch64 wheel holds)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise WheelError("not a 64-bit little-endian ELF object")
    return int.from_bytes(data[18:20], "little")


def check_wheel(wheel: Path, machine: str) -> list[str]:
    """The wheel's platform tags, after checking them and its kernels against ``machine`` (module docstring)."""
    if machine not in ELF_MACHINES:
        raise WheelError(f"unknown machine {machine!r}: one of {sorted(ELF_MACHINES)}")
    tags = platform_tags(wheel.name)
    check_platform_tags(tags, machine)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = [name for name in names if re.fullmatch(r"[^/]+\.dist-info/WHEEL", name)]
        if len(metadata) != 1:
            raise WheelError(f"{wheel.name} has {len(metadata)} .dist-info/WHEEL files")
        declared = [line.split(":", 1)[1].strip() for line in archive.read(metadata[0]).decode().splitlines()
                    if line.startswith("Tag:")]
        check_platform_tags([tag.rsplit("-", 1)[1] for tag in declared], machine)
        if "Root-Is-Purelib: false" not in archive.read(metadata[0]).decode():
            raise WheelError(f"{wheel.name} says it is pure Python (Root-Is-Purelib)")
        built = [name for name in names if re.fullmatch(r"common/_kernels\..*\.so", name)]
        if len(built) != 1:
            raise WheelError(f"{wheel.name} holds {len(built)} common/_kernels extensions: {built}")
        if f"-{machine}-linux-gnu" not in built[0]:
            raise WheelError(f"{built[0]} is not named for {machine}")
        found = elf_machine(archive.read(built[0])[:64])
    if found != ELF_MACHINES[machine]:
        raise WheelError(f"{built[0]} is an ELF object for e_machine {found}, not {machine} ({ELF_MACHINES[machine]})")
    return tags


def check_installed(digest: str) -> str:
    """A one-line account of the installed kernels, after checking they are this interpreter's compiled build
    of the source whose sha256 is ``digest``."""
    import platform
    import sysconfig

    from common import kernels

    if kernels.status != "compiled" or kernels.compiled is None:
        raise WheelError(f"kernels: {kernels.status}")
    module = Path(kernels.compiled.__file__ or "").resolve()
    site = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    if not any(module.is_relative_to(directory) for directory in site):
        raise WheelError(f"the kernels were loaded from {module}, outside this interpreter's site-packages {site}")
    built_from = getattr(kernels.compiled, "SOURCE_SHA256", None)
    if built_from != digest:
        raise WheelError(f"the installed kernels were built from source sha256 {built_from}, not the sdist's {digest}")
    return f"kernels: {kernels.status} on {platform.machine()}, {module.name}, source sha256 {digest}"


def shard_listing(output: Path) -> list[tuple[str, int, int, int, str]]:
    """(source, start, end, records, sha256) of every shard the job's manifest lists, sorted, after checking each
    file's bytes have that sha256."""
    listing = []
    for line in (output / "manifest.jsonl").read_text(encoding="utf-8").splitlines():
        task = json.loads(line)
        for shard in task["shards"]:
            actual = hashlib.sha256((output / shard["name"]).read_bytes()).hexdigest()
            if actual != shard["sha256"]:
                raise WheelError(f"{output / shard['name']}: sha256 {actual}, its manifest says {shard['sha256']}")
            listing.append((task["source"], task["start"], task["end"], shard["records"], shard["sha256"]))
    if not listing:
        raise WheelError(f"{output} lists no shard")
    return sorted(listing)


def check_same_shards(reference: Path, output: Path) -> int:
    """The number of shards, after checking ``output`` holds the same shards' bytes as ``reference``."""
    expected, got = shard_listing(reference), shard_listing(output)
    if got != expected:
        differ = sorted(set(got) ^ set(expected))
        raise WheelError(f"{output}'s shards differ from {reference}'s: {differ[:4]}")
    return len(got)


def main(argv: list[str]) -> int:
    command, *args = argv or ["help"]
    try:
        if command == "arches" and not args:
            print("\n".join(f"{arch} {machine}" for arch, machine in ARCHES.items()))
        elif command == "sdist" and len(args) == 1:
            print(sdist_kernels_digest(Path(args[0])))
        elif command == "wheel" and len(args) == 2:
            print(".".join(check_wheel(Path(args[0]), args[1])))
        elif command == "installed" and len(args) == 1:
            print(check_installed(args[0]))
        elif command == "same-shards" and len(args) == 2:
            print(f"{check_same_shards(Path(args[0]), Path(args[1]))} shards, the same bytes")
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except WheelError as error:
        print(f"wheels: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
