"""The native-kernel framework of the plugin API (``tunesmith.plugin.native``), on the CPU: a Problem
read as one GEMM, instance parameters and their sifting, the environment record, the build cache
(with a stand-in compiler, and with the C compiler really building and loading a library), and the
hooks of a backend. The cutlass and ck tests check each plugin's own part on top of it.
"""

from __future__ import annotations

import ctypes
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from tunesmith.plugin.native import (
    BuildError,
    Compiler,
    Environment,
    InstanceParams,
    NativeChoice,
    Step,
    Unsupported,
    epilogue_of,
    find_tool,
    gather,
    instance_params,
    listing,
    load,
    matrix_of,
    name_function,
    product_of,
    sift,
    spread,
)
from tunesmith_hookspecs import ChoiceSpec, EpilogueOp, Problem, TensorMeta

#: an epilogue with a step of every kind: unary, with a tensor (input 3), with a scalar (the plugins' tests use it too)
CHAIN = (EpilogueOp("relu"), EpilogueOp("add", input=3), EpilogueOp("mul", scalar=0.5), EpilogueOp("gelu_tanh"))
DEMO = Compiler("demo", "democc", ".cpp", ("-O3", "-shared"), "--target={}")


def meta(shape: tuple[int, ...], dtype: str = "float16", stride: tuple[int, ...] | None = None) -> TensorMeta:
    if stride is None:
        return TensorMeta.contiguous(shape, dtype, "cuda")
    return TensorMeta(shape, stride, dtype, "cuda", 0)


# --- a Problem as one GEMM ---------------------------------------------------------------------


def test_a_problem_s_product_and_its_refusals():
    bias, a, b = meta((48,)), meta((64, 32)), meta((32, 48), stride=(1, 32))
    p = product_of(Problem("addmm", (bias, a, b), meta((64, 48))), ("float16",), ("float16", "float32"), "D")
    assert (p.m, p.n, p.k, p.batch, p.batched, p.shape, p.b) == (64, 48, 32, 1, False, (64, 48), b)
    batched = Problem("bmm", (meta((3, 8, 4)), meta((3, 4, 2))), meta((3, 8, 2)))
    bmm = product_of(batched, ("float16",), ("float16",), "D")
    assert (bmm.batch, bmm.shape) == (3, (3, 8, 2))
    with pytest.raises(Unsupported, match="op conv is not served"):
        product_of(Problem("conv", (a, b), meta((64, 48))), ("float16",), ("float16",), "D")
    with pytest.raises(Unsupported, match="A and B are float16 and float16; the instances take bfloat16 or float32"):
        product_of(Problem("mm", (a, b), meta((64, 48))), ("bfloat16", "float32"), ("float16",), "D")
    with pytest.raises(Unsupported, match="the output is float16; CK's E here is float32"):
        product_of(Problem("mm", (a, b), meta((64, 48))), ("float16",), ("float32",), "CK's E")
    with pytest.raises(Unsupported, match=r"the output layout \(1, 64\) is not contiguous"):
        product_of(Problem("mm", (a, b), meta((64, 48), stride=(1, 64))), ("float16",), ("float16",), "D")
    assert listing(("a",)) == "a" and listing(("a", "b", "c")) == "a, b or c"


def test_matrices_are_row_or_column_major_with_one_leading_dimension():
    row = matrix_of("A", meta((64, 32), stride=(40, 1)), 64, 32, batched=False)
    assert (row.layout, row.ld, row.contiguous_size, row.extent, row.k_major) == ("row", 40, 32, 63 * 40 + 32, True)
    col = matrix_of("B", meta((2, 32, 48), stride=(2000, 1, 40)), 32, 48, batched=True)
    assert (col.layout, col.ld, col.batch_stride, col.k_major) == ("col", 40, 2000, True)
    one_row = matrix_of("A", meta((1, 0)), 1, 0, batched=False)
    assert (one_row.layout, one_row.ld) == ("row", 1)  # never a leading dimension of 0
    with pytest.raises(Unsupported, match="neither dimension has unit stride"):
        matrix_of("A", meta((64, 32), stride=(64, 2)), 64, 32, batched=False)


def test_the_epilogue_becomes_steps_tensors_and_scalars():
    bias, a, b, residual = meta((48,)), meta((64, 32)), meta((32, 48)), meta((64, 48))
    casts = (EpilogueOp("cast", dtype="float32"), EpilogueOp("cast", dtype="bfloat16"))
    steps = (*CHAIN, EpilogueOp("mul", input=3), *casts)
    problem = Problem("addmm", (bias, a, b, residual), meta((64, 48)), steps, {"alpha": 2.0, "beta": 0.5})
    epilogue = epilogue_of(problem)
    assert epilogue.bias and epilogue.inputs == (0, 3) and epilogue.scalars == (2.0, 0.5, 0.5)
    assert epilogue.steps == (
        Step("relu"),
        Step("add", operand=1),
        Step("mul", slot=2),
        Step("gelu_tanh"),
        Step("mul", operand=1),
        Step("round", dtype="bfloat16"),
    )
    no_bias = epilogue_of(Problem("addmm", (bias, a, b), meta((64, 48)), (), {"alpha": 1.0, "beta": 0.0}))
    assert not no_bias.bias and no_bias.inputs == () and no_bias.scalars == (1.0, 0.0)
    with pytest.raises(Unsupported, match="epilogue step cast to float64 is not served"):
        epilogue_of(Problem("mm", (a, b), meta((64, 48)), (EpilogueOp("cast", dtype="float64"),)))
    with pytest.raises(Unsupported, match="epilogue step gelu to None"):
        epilogue_of(Problem("mm", (a, b), meta((64, 48)), (EpilogueOp("gelu"),)), unary=("relu",))


# --- instance parameters -------------------------------------------------------------------------


@instance_params
class Tile(InstanceParams):
    m: int
    n: int
    schedule: str = "plain"

    @property
    def name(self) -> str:
        return f"t{self.m}x{self.n}_{self.schedule}"


def test_instance_params_round_trip_and_refuse_what_is_not_theirs():
    tile = Tile(64, 128)
    assert tile.params() == {"m": 64, "n": 128, "schedule": "plain"}
    assert Tile.from_params(tuple(tile.params().items())) == tile
    with pytest.raises(TypeError):
        Tile.from_params({"m": "64", "n": 128})  # a value of another type
    with pytest.raises(TypeError):
        Tile.from_params({"m": 64, "n": 128, "swizzle": 3})  # a parameter of another version
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        tile.m = 32  # type: ignore[misc]


def test_sift_keeps_each_valid_instance_once_and_spread_spans_the_tiles():
    tiles = [Tile(64, 64), Tile(64, 64), Tile(128, 64), Tile(64, 64, "fast"), Tile(16, 16)]
    valid, rejected = sift(tiles, lambda t: ["too small"] if t.m < 32 else [], "demo")
    assert valid == [Tile(64, 64), Tile(128, 64), Tile(64, 64, "fast")]
    assert [(r.instance, r.reasons) for r in rejected] == [(Tile(16, 16), ("too small",))]
    assert spread(valid, lambda t: (t.m, t.n)) == [Tile(64, 64), Tile(128, 64), Tile(64, 64, "fast")]
    assert spread([Tile(64, 64), Tile(64, 64, "fast"), Tile(128, 64)], lambda t: (t.m, t.n))[1] == Tile(128, 64)


# --- the environment -------------------------------------------------------------------------


def test_the_environment_says_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    tool = tmp_path / "bin" / "democc"
    assert find_tool("democc", [tool]) is None
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    assert find_tool("democc", [tool]) is None  # not executable
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    assert find_tool("democc", [tmp_path / "nowhere", tool]) == str(tool)
    env = gather(("gfx942", 304, []), str(tool), "democc", ("/inc", "v1", ""))
    assert env == Environment("gfx942", str(tool), "/inc", 304, "v1") and env.runnable and env.reason == ""
    lacking = gather((None, None, ["a GPU"]), None, "democc (not on PATH)", (None, "", "the headers"))
    assert not lacking.runnable and lacking.reason == "missing a GPU; democc (not on PATH); the headers"


# --- the build cache, with a stand-in compiler ---------------------------------------------------

FAKE_COMPILER = """#!{python}
import sys, pathlib
args = sys.argv[1:]
if args == ["--version"]:
    print({name!r}, "version", {version!r})
    sys.exit(0)
with open({log!r}, "a") as log:
    log.write(" ".join(args) + "\\n")
if "FAIL" in pathlib.Path(args[-1]).read_text():
    sys.stderr.write("error: " + {error!r} + "\\n")
    sys.exit(2)
pathlib.Path(args[args.index("-o") + 1]).write_bytes(b"not really a library")
"""


def fake_compiler(
    folder: Path, name: str = "democc", version: str = "1.0", error: str = "no such template"
) -> tuple[str, Path]:
    """A stand-in compiler ``name`` in ``folder``: it logs its command lines, writes a file that is
    not really a library, and fails with ``error`` on a source that says FAIL. Its path and its log."""
    folder.mkdir(parents=True, exist_ok=True)
    log, script = folder / f"{name}.log", folder / name
    text = FAKE_COMPILER.format(python=sys.executable, name=name, version=version, error=error, log=str(log))
    script.write_text(text)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script), log


def test_libraries_are_cached_by_source_compiler_flags_target_and_headers(tmp_path):
    cc, log = fake_compiler(tmp_path)
    root = DEMO.root(str(tmp_path / "cache"))
    assert root == tmp_path / "cache" / "demo"
    first = DEMO.build("// one", cc, "gpu1", "/inc", "v1", root, 60)
    assert first == root / f"{DEMO.key('// one', cc, 'gpu1', '/inc', 'v1')}.so"
    assert first.with_suffix(".cpp").read_text() == "// one"
    calls = log.read_text().splitlines()
    assert len(calls) == 1 and calls[0].split() == ["-O3", "-shared", "--target=gpu1", "-I", "/inc", "-o",
                                                    calls[0].split()[-2], calls[0].split()[-1]]  # fmt: skip
    assert DEMO.build("// one", cc, "gpu1", "/inc", "v1", root, 60) == first  # a hit: not compiled again
    assert len(log.read_text().splitlines()) == 1
    first.chmod(0o666)  # writable by others: anyone could have planted it, so it is built again
    assert DEMO.build("// one", cc, "gpu1", "/inc", "v1", root, 60) == first
    assert len(log.read_text().splitlines()) == 2 and not first.stat().st_mode & stat.S_IWOTH
    other = DEMO.build("// other", cc, "gpu1", "/inc", "v1", root, 60)
    first.unlink()
    first.symlink_to(other)  # a link to a library of another key is not that key's library
    assert DEMO.build("// one", cc, "gpu1", "/inc", "v1", root, 60) == first
    assert len(log.read_text().splitlines()) == 4 and not first.is_symlink()
    key = first.stem
    assert DEMO.key("// one", cc, "gpu2", "/inc", "v1") != key  # another target
    assert DEMO.key("// one", cc, "gpu1", "/inc", "v2") != key  # other headers
    assert attrs.evolve(DEMO, flags=("-O2", "-shared")).key("// one", cc, "gpu1", "/inc", "v1") != key  # other flags
    newer, _ = fake_compiler(tmp_path / "newer", version="2.0")
    assert DEMO.key("// one", newer, "gpu1", "/inc", "v1") != key  # another compiler version


def test_a_failed_build_says_why_once_and_leaves_nothing_half_built(tmp_path):
    cc, log = fake_compiler(tmp_path)
    root = tmp_path / "demo"
    DEMO.build("// fine", cc, "gpu1", "/inc", "", root, 60)
    with pytest.raises(BuildError, match=r"(?s)democc failed .*no such template"):
        DEMO.build("// FAIL", cc, "gpu1", "/inc", "", root, 60)
    compiles = len(log.read_text().splitlines())
    with pytest.raises(BuildError, match=r"(?s)no such template.*not compiled again"):
        DEMO.build("// FAIL", cc, "gpu1", "/inc", "", root, 60)  # a failure repeats: not compiled again
    assert len(log.read_text().splitlines()) == compiles
    assert sorted(p.suffix for p in root.iterdir()) == [".cpp", ".so"]
    with pytest.raises(BuildError, match="democc could not start"):
        DEMO.build("// two", str(tmp_path / "missing-democc"), "gpu1", "/inc", "", root, 60)


def test_a_compile_past_the_timeout_is_killed(tmp_path):
    slow = tmp_path / "democc"
    slow.write_text(f"#!{sys.executable}\nimport sys, time\nif sys.argv[1:] != ['--version']:\n    time.sleep(30)\n")
    slow.chmod(slow.stat().st_mode | stat.S_IEXEC)
    start = time.monotonic()
    with pytest.raises(BuildError, match=r"democc ran past 0.5 s building"):
        DEMO.build("// slow", str(slow), "gpu1", "/inc", "", tmp_path / "demo", 0.5)
    assert time.monotonic() - start < 10


def test_waiting_for_another_process_s_build_of_the_key_ends_at_the_timeout(tmp_path):
    cc, log = fake_compiler(tmp_path)
    root = tmp_path / "demo"
    key = DEMO.key("// held", cc, "gpu1", "/inc", "")
    locks = tmp_path / ".demo-locks"
    locks.mkdir()
    holder = subprocess.Popen(  # another process holds the key's lock and never lets go
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(locks / f"{key}.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        with pytest.raises(BuildError, match=r"another process's build of .* held it for 1 s"):
            DEMO.build("// held", cc, "gpu1", "/inc", "", root, 1.0)
        assert 0.9 < time.monotonic() - start < 10 and not log.exists()  # waited, compiled nothing
    finally:
        holder.kill()
        holder.wait()
    assert DEMO.build("// held", cc, "gpu1", "/inc", "", root, 1.0).is_file()  # the lock is free again


# --- a real library: built by the C++ compiler, loaded, its entry points bound --------------------

CXX = Compiler("demo", "c++", ".cpp", ("-shared", "-fPIC", "-O1"), "-DTARGET={}")


def twice_source(instance: str) -> str:
    """A library named ``instance`` whose ``twice`` multiplies by the target."""
    return f'{name_function("demo", instance)}\nextern "C" int twice(int x) {{ return TARGET * x; }}\n'


@pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler here")
def test_a_built_library_is_loaded_once_and_must_hold_its_instance(tmp_path):
    cxx = shutil.which("c++")
    path = CXX.build(twice_source("twice"), cxx, "2", "/nonexistent", "", tmp_path, 120)
    entries = load(path, "demo", "twice", {"twice": ([ctypes.c_int], ctypes.c_int)})
    assert entries["twice"](21) == 42
    assert load(path, "demo", "twice", {}) is entries  # loaded once per process
    other = CXX.build(twice_source("thrice"), cxx, "2", "/nonexistent", "", tmp_path, 120)
    with pytest.raises(RuntimeError, match="holds instance thrice, not twice"):
        load(other, "demo", "twice", {})


@attrs.define(eq=False)
class TwiceChoice(NativeChoice):
    """A choice whose library doubles (its target is the factor) what its kernel is given."""

    compiler = CXX
    entries = {"twice": ([ctypes.c_int], ctypes.c_int)}  # noqa: RUF012 - read only

    def source(self) -> str:
        return twice_source(self.instance.name)

    def target(self) -> str:
        return self.env.arch

    def launch(self, library: dict) -> Callable:
        return lambda x: library["twice"](x)


def test_a_choice_builds_loads_and_calls_its_library_or_says_why_it_cannot(tmp_path):
    tile, problem = Tile(64, 64), Problem("mm", (meta((64, 32)), meta((32, 64))), meta((64, 64)))
    spec = ChoiceSpec("demo", "twice", tile.params())
    lacking = TwiceChoice(spec, problem, None, tile, Environment(missing=("a GPU",)), tmp_path, 60)
    with pytest.raises(RuntimeError, match=r"has no built kernel in this process: missing a GPU"):
        lacking.kernel()
    with pytest.raises(RuntimeError, match=r"cannot be built here: missing a GPU"):
        lacking.precompile()
    env = Environment("2", str(tmp_path / "missing-c++"), "/nonexistent", 1)
    unbuilt = TwiceChoice(spec, problem, None, tile, env, tmp_path, 60)
    with pytest.raises(RuntimeError, match=r"has no built kernel in this process: precompile\(\) has not built it"):
        unbuilt.kernel()
    with pytest.raises(BuildError, match="c\\+\\+ could not start"):
        unbuilt.precompile()
    cxx = shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler here")
    built = TwiceChoice(spec, problem, None, tile, attrs.evolve(env, compiler=cxx, arch="3"), tmp_path, 120)
    built.precompile()
    assert built.kernel()(14) == 42
