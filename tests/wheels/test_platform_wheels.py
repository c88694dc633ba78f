"""The checks scripts/wheels.sh makes of each platform's wheel, held to what they must refuse; and the sdist the
wheels are built from.  The builds themselves (mmdebstrap roots, aarch64 under qemu) run in that script, a step of
.ci/run, not here."""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.support.helpers import REPO
from tests.wheels import platform_wheels as pw

ELF_HEADER = bytes.fromhex("7f454c46020101") + bytes(9)  # e_ident: 64-bit, little-endian


def elf(machine: int) -> bytes:
    """The start of a 64-bit little-endian ELF shared object for ``machine``."""
    return ELF_HEADER + (3).to_bytes(2, "little") + machine.to_bytes(2, "little") + bytes(44)


def make_wheel(directory: Path, platform: str, so_machine: str, e_machine: int, *, purelib: str = "false",
               extensions: int = 1) -> Path:
    wheel = directory / f"mlm_pipeline-0.1.0-cp311-cp311-{platform}.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        tags = "".join(f"Tag: cp311-cp311-{tag}\n" for tag in platform.split("."))
        archive.writestr("mlm_pipeline-0.1.0.dist-info/WHEEL",
                         f"Wheel-Version: 1.0\nRoot-Is-Purelib: {purelib}\n{tags}")
        for suffix in [f"cpython-311-{so_machine}-linux-gnu", "abi3"][:extensions]:
            archive.writestr(f"common/_kernels.{suffix}.so", elf(e_machine))
        archive.writestr("common/kernels.py", "")
    return wheel


def test_the_platforms_are_x86_64_and_aarch64():
    """The script builds what its `arches` line lists: both platforms the issue asks for, by Debian's and the
    kernel's names, each with its ELF machine."""
    out = subprocess.run(["python", "-m", "tests.wheels.platform_wheels", "arches"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert dict(line.split() for line in out.splitlines()) == {"amd64": "x86_64", "arm64": "aarch64"}
    assert all(machine in pw.ELF_MACHINES for machine in pw.ARCHES.values())
    script = (REPO / "scripts/wheels.sh").read_text()
    assert "tests.wheels.platform_wheels arches" in script


@pytest.mark.parametrize("machine, e_machine", [("x86_64", 62), ("aarch64", 183)])
def test_a_repaired_wheel_for_its_machine_passes(tmp_path, machine, e_machine):
    platform = f"manylinux_2_17_{machine}.manylinux2014_{machine}"
    wheel = make_wheel(tmp_path, platform, machine, e_machine)
    assert pw.check_wheel(wheel, machine) == [f"manylinux_2_17_{machine}", f"manylinux2014_{machine}"]


@pytest.mark.parametrize("platform, so_machine, e_machine, purelib, extensions, message", [
    ("linux_aarch64", "aarch64", 183, "false", 1, "not all manylinux tags"),  # not repaired by auditwheel
    ("manylinux_2_17_x86_64", "aarch64", 183, "false", 1, "not all manylinux tags"),  # another machine's tag
    ("manylinux_2_17_aarch64.manylinux_2_17_x86_64", "aarch64", 183, "false", 1, "not all manylinux tags"),
    ("any", "aarch64", 183, "false", 1, "not all manylinux tags"),
    ("manylinux_2_17_aarch64", "x86_64", 183, "false", 1, "not named for aarch64"),
    ("manylinux_2_17_aarch64", "aarch64", 62, "false", 1, "e_machine 62"),  # the host's build, renamed
    ("manylinux_2_17_aarch64", "aarch64", 183, "false", 0, "holds 0 common/_kernels"),  # the optional build failed
    ("manylinux_2_17_aarch64", "aarch64", 183, "false", 2, "holds 2 common/_kernels"),
    ("manylinux_2_17_aarch64", "aarch64", 183, "true", 1, "pure Python"),
])
def test_a_wheel_not_for_aarch64_is_refused(tmp_path, platform, so_machine, e_machine, purelib, extensions, message):
    wheel = make_wheel(tmp_path, platform, so_machine, e_machine, purelib=purelib, extensions=extensions)
    with pytest.raises(pw.WheelError, match=message):
        pw.check_wheel(wheel, "aarch64")


def test_the_wheel_file_tags_must_agree_with_the_name(tmp_path):
    """A wheel renamed for aarch64 keeps its WHEEL file's x86_64 tags: refused."""
    wheel = make_wheel(tmp_path, "manylinux_2_17_x86_64", "aarch64", 183)
    renamed = wheel.rename(tmp_path / wheel.name.replace("x86_64", "aarch64"))
    with pytest.raises(pw.WheelError, match="x86_64"):
        pw.check_wheel(renamed, "aarch64")


def test_the_sdist_holds_the_kernels_and_their_build(tmp_path):
    """The sdist every platform builds from (the project's build-sdist.sh, as scripts/wheels.sh makes it) holds
    setup.py and common/_kernels.c, and the digest the wheels' builds must compile in is the checkout's source's."""
    # The tracked files, as a fresh clone has them: tar in build-sdist.sh fails on a file that changes while it
    # reads the tree, and other tests write into the checkout (__pycache__, in-place builds).
    source = tmp_path / "src"
    source.mkdir()
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = [name for name in tracked.decode().split("\0") if name and (REPO / name).is_file()]
    subprocess.run(["cp", "--parents", "-t", str(source), *files], cwd=REPO, check=True)
    result = subprocess.run(["bash", "ansible/roles/mlm/files/build-sdist.sh", str(source), str(tmp_path / "dist")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    expected = hashlib.sha256((REPO / "common/_kernels.c").read_bytes()).hexdigest()
    assert pw.sdist_kernels_digest(Path(result.stdout.strip())) == expected


def test_an_sdist_without_the_c_source_is_refused(tmp_path):
    import tarfile

    sdist = tmp_path / "mlm_pipeline-0.1.0.tar.gz"
    (tmp_path / "setup.py").write_text("")
    with tarfile.open(sdist, "w:gz") as archive:
        archive.add(tmp_path / "setup.py", "mlm_pipeline-0.1.0/setup.py")
    with pytest.raises(pw.WheelError, match="no common/_kernels.c"):
        pw.sdist_kernels_digest(sdist)


def write_job(output: Path, shards: dict[str, bytes], source: str = "AA/wiki_00") -> None:
    output.mkdir()
    lines = []
    for index, (name, data) in enumerate(shards.items()):
        (output / name).write_bytes(data)
        lines.append(json.dumps({"source": source, "start": index, "end": index + 1, "shards": [
            {"name": name, "records": 1, "sha256": hashlib.sha256(data).hexdigest()}]}))
    (output / "manifest.jsonl").write_text("\n".join(lines) + "\n")


def test_the_same_shards_under_other_names_pass_and_other_bytes_fail(tmp_path):
    """Task names may differ between hosts (a file's mtime goes into its version); the shards' bytes per source
    range may not, and a file whose bytes are not its manifest's sha256 is refused too."""
    write_job(tmp_path / "host", {"part-a.tfrecord": b"one", "part-b.tfrecord": b"two"})
    write_job(tmp_path / "same", {"part-x.tfrecord": b"one", "part-y.tfrecord": b"two"})
    write_job(tmp_path / "other", {"part-a.tfrecord": b"one", "part-b.tfrecord": b"tw0"})
    assert pw.check_same_shards(tmp_path / "host", tmp_path / "same") == 2
    with pytest.raises(pw.WheelError, match="differ"):
        pw.check_same_shards(tmp_path / "host", tmp_path / "other")
    (tmp_path / "same" / "part-y.tfrecord").write_bytes(b"tw0")
    with pytest.raises(pw.WheelError, match="its manifest says"):
        pw.check_same_shards(tmp_path / "host", tmp_path / "same")
