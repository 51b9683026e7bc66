"""nxcc's PEP 517 build backend: maturin's, with the wheel's data staged first.

The wheel carries, besides the executables, the simulated toolchain's library (the nxcc-walrus
crate's cdylib) as data/lib/nxcc/libnxcc_walrus.so, installed as
<environment>/lib/nxcc/libnxcc_walrus.so. maturin packs the data directory pyproject.toml names
(target/wheel-data) but does not build it: this backend builds and stages the library before
maturin builds the wheel, so `pip install .`, `pip install git+URL` and `pip install
nxcc-*.tar.gz` each work in one command; an unpacked sdist's files are given the current time
first (see freshen_unpacked_sdist). Every other hook is maturin's own.

Run as a script (`python3 packaging/nxcc_build.py`), it only stages the library, for a
`maturin build` run directly. Honours CARGO_TARGET_DIR, as cargo does.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

try:
    # Everything maturin's backend offers (the sdist's, the metadata's, the requirements' hooks).
    from maturin import *  # noqa: F401,F403
    import maturin as _maturin
except ImportError:
    # Run as a script, only to stage: maturin is not needed.
    if __name__ != "__main__":
        raise

#: The wheel's data directory, relative to the source tree (pyproject.toml, [tool.maturin] data).
DATA_DIR = os.path.join("target", "wheel-data")
#: Where the library goes inside it, and so inside the environment (data/ is its root).
LIBRARY = os.path.join(DATA_DIR, "data", "lib", "nxcc", "libnxcc_walrus.so")


def _cargo_target_dir() -> str:
    """The target directory cargo builds into here (CARGO_TARGET_DIR, or the workspace's)."""
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"],
        stdout=subprocess.PIPE,
        check=True,
    ).stdout
    return json.loads(out)["target_directory"]


def stage_library() -> str:
    """Builds the simulated libwalrus.so in release, without debug information, and places it in
    the wheel's data directory (atomically: a rename). Returns the staged path."""
    print("Staging the simulated libwalrus.so (the nxcc-walrus crate, release)", flush=True)
    subprocess.run(
        ["cargo", "rustc", "--release", "--locked", "-p", "nxcc-walrus", "--lib", "--",
         "-C", "strip=debuginfo"],
        check=True,
        # Cargo's progress goes to stderr; its stdout must not mix into the hook's answer.
        stdout=sys.stderr,
    )
    built = os.path.join(_cargo_target_dir(), "release", "libnxcc_walrus.so")
    os.makedirs(os.path.dirname(LIBRARY), exist_ok=True)
    partial = LIBRARY + ".tmp"
    shutil.copyfile(built, partial)
    os.replace(partial, LIBRARY)
    print(f"staged {LIBRARY} ({os.path.getsize(LIBRARY)} bytes)", flush=True)
    return LIBRARY


def freshen_unpacked_sdist() -> None:
    """In an unpacked source distribution (PKG-INFO at its root), gives every file the current
    time. maturin writes an sdist's files with one fixed old time, and cargo judges a path
    crate fresh by its files' times: in a CARGO_TARGET_DIR an earlier build used, the artifacts
    of another version of the source would be taken as this one's. A checkout is left alone."""
    if not os.path.isfile("PKG-INFO"):
        return
    for root, dirs, files in os.walk("."):
        dirs[:] = [d for d in dirs if d != "target"]
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.utime(path)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    freshen_unpacked_sdist()
    stage_library()
    return _maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    freshen_unpacked_sdist()
    stage_library()
    return _maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    # maturin checks that the data directory exists even for the metadata; the library itself
    # is staged by build_wheel.
    os.makedirs(DATA_DIR, exist_ok=True)
    return _maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_sdist(sdist_directory, config_settings=None):
    # The same check, for the source distribution (which never holds the data directory).
    os.makedirs(DATA_DIR, exist_ok=True)
    return _maturin.build_sdist(sdist_directory, config_settings)


if __name__ == "__main__":
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    try:
        stage_library()
    except subprocess.CalledProcessError as e:
        sys.exit(f"staging the simulated libwalrus.so failed: {e}")
