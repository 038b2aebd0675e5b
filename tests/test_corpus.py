"""The shape corpus (benchmarks/corpus/) and its benchmark, on the CPU: the committed cases and
split, every epilogue step through the benchmarks' eager path, and corpus.py end to end in --small."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from tunesmith import problemset
from tunesmith.errors import ProblemError
from tunesmith_hookspecs import EPILOGUE_OPS

from conftest import REPO, run_env

BENCHMARKS = REPO / "benchmarks"
CORPUS = BENCHMARKS / "corpus" / "corpus.json"
#: one step of each kind, with the operand the problem-set format gives it, and what it must compute
STEPS = {
    "relu": ("relu", torch.relu),
    "gelu": ("gelu", F.gelu),
    "gelu_tanh": ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")),
    "silu": ("silu", F.silu),
    "sigmoid": ("sigmoid", torch.sigmoid),
    "tanh": ("tanh", torch.tanh),
    "add": (["add", 1.5], lambda x: x + 1.5),
    "mul": (["mul", 0.125], lambda x: x * 0.125),
    "cast": (["cast", "bfloat16"], lambda x: x.to(torch.bfloat16)),
}


def _module(path: Path) -> ModuleType:
    """A benchmark script imported as a module (benchmarks/ on sys.path, for its own imports)."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _raw() -> list[dict]:
    return json.loads(CORPUS.read_text())["cases"]


def test_the_corpus_loads_with_unique_names_a_source_and_a_split_each():
    cases = problemset.load(CORPUS)
    raw = _raw()
    assert len(cases) >= 150
    assert len({c.name for c in cases}) == len(cases)
    assert all(isinstance(r.get("source"), str) and r["source"] for r in raw)
    assert {r["split"] for r in raw} == {"train", "test"}
    assert {c.op for c in cases} == {"mm", "addmm", "bmm", "baddbmm", "mm_plus_mm", "conv"}
    assert {c.dtype for c in cases} == {"bfloat16", "float16", "float32"}


def test_the_split_is_the_committed_hash_rule_and_both_halves_are_substantial():
    seed = _module(BENCHMARKS / "corpus" / "build.py").SPLIT_SEED
    raw = _raw()
    for r in raw:
        first_byte = hashlib.sha256((seed + r["name"]).encode()).digest()[0]
        assert r["split"] == ("test" if first_byte < 128 else "train"), r["name"]
    tests = sum(r["split"] == "test" for r in raw)
    assert 0.35 * len(raw) < tests < 0.65 * len(raw)


def test_the_committed_corpus_is_what_build_py_writes_and_fits_the_byte_cap():
    build = _module(BENCHMARKS / "corpus" / "build.py")
    assert build.build() == _raw()
    assert max(build.nbytes(c) for c in _raw()) <= build.MAX_BYTES


def test_every_case_runs_eagerly_in_its_small_form():
    """Every case's layouts, epilogue and conv parameters make a valid problem (at --small's sizes)."""
    corpus, gemm = _module(BENCHMARKS / "corpus.py"), _module(BENCHMARKS / "gemm.py")
    for case in problemset.load(CORPUS):
        small = corpus.small_case(case)
        assert all(small.fields[k] <= 64 for k in ("M", "N", "K", "in_channels", "height") if k in small.fields)
        tensors, scalars = problemset.make_inputs(small, "cpu", seed=1)
        out = gemm._eager(small)(scalars, *tensors)
        assert torch.isfinite(out).all(), case.name


@pytest.mark.parametrize("name", EPILOGUE_OPS)
def test_every_epilogue_step_runs_through_the_benchmarks_eager_path(name):
    gemm = _module(BENCHMARKS / "gemm.py")
    step, expected = STEPS[name]
    case = problemset.Case(f"addmm_{name}", "addmm", "float32", {"M": 5, "N": 7, "K": 3, "epilogue": [step]})
    tensors, scalars = problemset.make_inputs(case, "cpu", seed=1)
    out = gemm._eager(case)(scalars, *tensors)
    want = expected(torch.addmm(*tensors))
    assert out.dtype == want.dtype
    torch.testing.assert_close(out, want)


def test_a_problem_file_takes_numbers_and_dtypes_as_step_operands_and_nothing_else():
    def case(steps):
        return problemset.Case("c", "mm", "float32", {"M": 2, "N": 2, "K": 2, "epilogue": steps})

    ops = problemset.epilogue_ops(case(["tanh", ["mul", 2], ["cast", "float16"]]))
    want = [("tanh", None, None), ("mul", 2.0, None), ("cast", None, "float16")]
    assert [(s.name, s.scalar, s.dtype) for s in ops] == want
    for bad in (["mul"], [["mul", "x"]], [["cast", "int8"]], [["relu", 1.0]], [["mul", 1, 2]], [["mul", True]]):
        with pytest.raises(ProblemError):
            problemset.epilogue_ops(case(bad))


def test_a_bmm_case_can_take_a_transposed_b():
    case = problemset.Case("b", "bmm", "float32", {"B": 2, "M": 3, "N": 5, "K": 4, "layout_b": "col"})
    _, b = problemset.make_inputs(case, "cpu")[0]
    assert b.shape == (2, 4, 5) and b.stride() == (20, 1, 4)


def _corpus(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(BENCHMARKS / "corpus.py"), "--small", *args]
    return subprocess.run(command, capture_output=True, text=True, env=run_env(), timeout=300)


def test_corpus_py_small_runs_end_to_end_and_resume_skips_done_cases(tmp_path):
    """Two cases through every path on the CPU, then a resumed run that measures nothing again."""
    names = ["llama3-8b.mlp.down_proj.dW.t2048.bf16", "gpt2.attn.dV.b96.q1024.k1024.fp16"]  # A transposed
    result = tmp_path / "corpus.json"
    first = _corpus("--json", str(result), "--cases", ",".join(names), "--chart", str(tmp_path / "corpus.png"))
    assert first.returncode == 0, first.stderr[-3000:]
    body = json.loads(result.read_text())
    assert body["device"] == "cpu" and body["small"] and not body["partial"]
    rows = body["cases"]
    assert sorted(r["name"] for r in rows) == sorted(names)
    required = ("name", "split", "source", "aten_gpu_ms", "tunesmith_gpu_ms", "exhaustive_gpu_ms", "inductor_gpu_ms")
    required += ("tunesmith_tune_s", "inductor_compile_s", "tunesmith_spec", "exhaustive_tune_s", "aten_do_bench_ms")
    for row in rows:
        assert "error" not in row, row.get("error")
        assert all(row[key] is not None for key in required), row
        assert row["tunesmith_spec"].startswith("aten:") and row["tunesmith_cold_source"] == "tuned"
        assert [spec for spec, _, _ in row["exhaustive_choices"]] == ["aten:eager"]  # every choice timed, by spec
        assert max(row[f"{p}_rel_error"] for p in ("aten", "tunesmith", "exhaustive", "inductor")) < 1e-4
    assert body["summary"]["all"]["cases"] == 2
    assert (tmp_path / "corpus.png").stat().st_size > 0

    again = _corpus("--json", str(result), "--cases", ",".join(names), "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming: 2 cases done" in again.stderr and "no case left: 2 rows" in again.stderr
    assert "..." not in again.stderr  # no case started
    assert json.loads(result.read_text())["cases"] == rows
    other = _corpus("--json", str(result), "--cases", ",".join(names), "--resume", "--backends", "aten,triton")
    assert other.returncode != 0 and "ran with backends ['aten']" in other.stderr


def test_merge_joins_parts_in_corpus_order_and_a_good_row_beats_an_error(tmp_path):
    corpus = _module(BENCHMARKS / "corpus.py")
    names = [r["name"] for r in _raw()[:3]]

    def row(name, **extra):
        base = {"name": name, "split": "test", "source": "s", "same_spec": True}
        for p in ("aten", "tunesmith", "exhaustive", "inductor"):
            base |= {f"{p}_gpu_ms": 1.0, f"{p}_do_bench_ms": 1.0}
        base |= {"tunesmith_tune_s": 1.0, "exhaustive_tune_s": 2.0, "inductor_compile_s": 4.0}
        return base | corpus.ratios(base) | extra

    parts = [
        {"device": "X", "cases": [row(names[2]), {"name": names[0], "split": "test", "source": "s", "error": "boom"}]},
        {"device": "X", "cases": [row(names[0]), row(names[1], aten_gpu_ms=2.0)]},
    ]
    paths = []
    for i, part in enumerate(parts):
        paths.append(tmp_path / f"part{i}.json")
        paths[-1].write_text(json.dumps(part))
    merged = corpus.merge([str(p) for p in paths], str(CORPUS))
    assert [r["name"] for r in merged["cases"]] == names and "error" not in merged["cases"][0]
    assert merged["device"] == "X" and merged["summary"]["test"]["cases"] == 3
    assert merged["summary"]["test"]["median_tune_over_median_compile"] == 0.25
    assert not merged["partial"]
    parts[1]["partial"] = True  # a GPU's shard stopped with cases left: so did the run
    paths[1].write_text(json.dumps(parts[1]))
    assert corpus.merge([str(p) for p in paths], str(CORPUS))["partial"]
