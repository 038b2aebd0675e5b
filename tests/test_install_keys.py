"""Inductor's installation hashes, remembered across processes (tunesmith.compile.install_keys): a
process stores the keys it hashed; the next one, its files unchanged, sets them instead of hashing,
torch's and Triton's own names included; a file changed since changes the fingerprint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import attrs

from tunesmith import Options
from tunesmith.compile.install_keys import InstallKey, Memo, _package_stats, fingerprint

from conftest import run_env

SCRIPT = """
import json, sys, torch, triton.runtime.cache
import torch._inductor.compile_fx
from torch._inductor import codecache
from torch._inductor.runtime import triton_compat
import tunesmith
from tunesmith.compile import install_keys

memo = install_keys.remember(__import__("pathlib").Path(sys.argv[1]))
if sys.argv[2] == "hash":  # as an Inductor compile does
    codecache.torch_key()
    triton.runtime.cache.triton_key()
memo.store()
print(json.dumps({
    "used": memo.used,
    "counted": tunesmith.counters["install_keys_remembered"],
    "torch": codecache.torch_key().hex(),
    "triton": triton.runtime.cache.triton_key(),
    "triton_compat": triton_compat.triton_key(),
}))
"""


def run(root: Path, mode: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root), mode], env=run_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_second_process_takes_the_stored_keys(tmp_path: Path) -> None:
    memos = tmp_path / "install_keys"

    def stored() -> dict[str, str]:
        return {p.name.split("-")[0]: json.loads(p.read_text())["key"] for p in memos.iterdir()}

    # torch's key is asked for after a compile (Inductor always has it); Triton's, never hashed, is not stored
    first = run(tmp_path, "no-hash")
    assert first["used"] == [] and first["counted"] == 0 and stored() == {"torch": first["torch"]}

    second = run(tmp_path, "hash")
    assert second["used"] == ["torch"] and stored() == {"torch": first["torch"], "triton": second["triton"]}

    # a malformed value is hashed again and stored anew, not fatal; a value the files could not hash
    # to can only come from the memo
    torch_memo, triton_memo = next(memos.glob("torch-*.json")), next(memos.glob("triton-*.json"))
    torch_memo.write_text(json.dumps({"key": "not hex"}))
    triton_memo.write_text(json.dumps({"key": "remembered"}))
    third = run(tmp_path, "no-hash")
    assert third["used"] == ["triton"] and third["counted"] == 1 and third["torch"] == first["torch"]
    assert third["triton"] == third["triton_compat"] == "remembered"  # torch's name for it too
    assert stored()["torch"] == first["torch"]

    torch_memo.write_text(json.dumps({"key": "ab" * 32}))
    fourth = run(tmp_path, "no-hash")
    assert fourth["used"] == ["torch", "triton"] and fourth["counted"] == 2 and fourth["torch"] == "ab" * 32


def test_remember_install_keys_off_keeps_nothing(tmp_path: Path) -> None:
    from tunesmith.compile.backend import _remembered_install_keys

    off = Options(cache_dir=str(tmp_path), remember_install_keys=False)
    assert _remembered_install_keys(off) is None
    assert _remembered_install_keys(attrs.evolve(off, remember_install_keys=True, graph_compiler="eager")) is None


def test_fingerprint_follows_the_package_files(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "data").mkdir()  # no __init__: not a package, as pkgutil sees it
    for path in (pkg / "__init__.py", pkg / "a.py", pkg / "sub" / "__init__.py", pkg / "sub" / "b.py"):
        path.write_text("x = 1\n")
    (pkg / "data" / "c.txt").write_text("data")
    (pkg / "sub" / "__pycache__").mkdir()  # bytecode is written as modules load: never read by the hashes
    (pkg / "sub" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0")
    seen = [line.split("\0")[0] for line in _package_stats(str(pkg))]
    assert sorted(Path(p).relative_to(pkg).as_posix() for p in seen) == [
        "__init__.py",
        "a.py",
        "sub/__init__.py",
        "sub/b.py",
    ]

    key = InstallKey("pkg", lambda: list(_package_stats(str(pkg))), "1", lambda: None, lambda v: None)
    before = fingerprint(key)
    assert fingerprint(key) == before
    target = pkg / "sub" / "b.py"
    st = target.stat()
    target.write_text("x = 2\n")  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same modification time
    assert fingerprint(key) != before  # its change time moved
    again = fingerprint(key)
    (pkg / "data" / "c.txt").write_text("other data")  # outside the packages
    (pkg / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0")
    assert fingerprint(key) == again


def test_a_memo_is_stored_only_where_the_files_did_not_change_while_hashed(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("x = 1\n")
    given: list[str] = []
    key = InstallKey(
        "pkg", lambda: list(_package_stats(str(pkg))), "1", lambda: "hashed", lambda v: given.append(v) is None
    )
    cold = Memo(tmp_path / "cache", lambda: [key])
    cold.use()
    (pkg / "__init__.py").write_text("x = 2\n")  # between the fingerprint and the hash's value
    cold.store()
    assert not (tmp_path / "cache" / "install_keys").exists()

    for process in range(2):
        memo = Memo(tmp_path / "cache", lambda: [key])
        memo.use()
        memo.store()
        assert memo.used == (["pkg"] if process else []) and given == (["hashed"] if process else [])


def test_the_fingerprints_cover_every_file_the_hashes_read() -> None:
    import pkgutil

    import torch
    import triton
    import triton.runtime.cache

    from tunesmith.compile.install_keys import _keys

    def origins(roots: list[str], prefix: str, walk: bool) -> set[str]:
        found: set[str] = set()
        for lib in (pkgutil.walk_packages if walk else pkgutil.iter_modules)(roots, prefix):
            spec = lib.module_finder.find_spec(lib.name, None)  # type: ignore[call-arg]
            found.add(spec.origin)
            if lib.ispkg and not walk:  # torch_key's walk: each package's modules, recursively
                found |= origins(spec.submodule_search_locations, f"{lib.name}.", walk)
        return found

    files = {key.name: {line.split("\0")[0] for line in key.files()} for key in _keys()}
    torch_root = os.path.dirname(torch.__file__)
    assert origins([torch_root], "", walk=False) <= files["torch"]
    triton_root = os.path.dirname(triton.__file__)
    read = {triton.runtime.cache.__file__}
    for sub in ("compiler", "backends", "language"):
        read |= origins([os.path.join(triton_root, sub)], f"triton.{sub}.", walk=True)
    assert read <= files["triton"] and any("libtriton." in path for path in files["triton"])
