"""The contract package: light import, canonical specs, strict and stable JSON."""

from __future__ import annotations

import math
import subprocess
import sys

import pluggy
import pytest

import tunesmith_hookspecs as hs
from tunesmith_hookspecs import ChoiceSpec, EpilogueOp, Problem, SelectionReport, TensorMeta, Timing


def _problem(**kw) -> Problem:
    a = TensorMeta((64, 32), (1, 64), "bfloat16", "cuda", 8)
    b = TensorMeta.contiguous((32, 48), "bfloat16", "cuda")
    out = TensorMeta.contiguous((64, 48), "float16", "cuda")
    args = dict(
        op="addmm",
        inputs=(TensorMeta.contiguous((48,), "bfloat16", "cuda"), a, b, out),
        output=out,
        epilogue=(EpilogueOp("gelu"), EpilogueOp("add", input=3), EpilogueOp("cast", dtype="float16")),
        scalars={"beta": 0.5, "alpha": 2.0},
    )
    return Problem(**{**args, **kw})


def test_import_does_not_import_torch():
    code = "import sys, tunesmith_hookspecs; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_choice_spec_params_are_canonical_and_hashable():
    a = ChoiceSpec("triton", "mm", {"BLOCK_N": 64, "BLOCK_M": 128, "shape": [1, 2]})
    b = ChoiceSpec("triton", "mm", [("shape", (1, 2)), ("BLOCK_M", 128), ("BLOCK_N", 64)])
    assert a == b and hash(a) == hash(b)
    assert a.params == (("BLOCK_M", 128), ("BLOCK_N", 64), ("shape", (1, 2)))
    assert {a: 1}[b] == 1
    assert a != ChoiceSpec("triton", "mm", {"BLOCK_M": 64, "BLOCK_N": 64, "shape": [1, 2]})
    assert a.param("BLOCK_N") == 64 and a.param("missing", 7) == 7


@pytest.mark.parametrize("bad", [{"x": {"nested": 1}}, {"x": float("nan")}, {1: 2}])
def test_choice_spec_rejects_params_that_cannot_be_keys(bad):
    with pytest.raises((TypeError, ValueError)):
        ChoiceSpec("b", "t", bad)


@pytest.mark.parametrize(
    "record",
    [
        ChoiceSpec("aten", "eager", {"k": [1, 2], "flag": True, "name": "x", "none": None, "f": 0.25}),
        _problem(),
        Timing(ChoiceSpec("a", "b"), 0.125),
        Timing(ChoiceSpec("a", "b"), math.inf, "precompile: boom"),
        SelectionReport(_problem(), "k" * 64, ChoiceSpec("a", "b"), (Timing(ChoiceSpec("a", "b"), 1.0),), "local"),
        hs.DeviceInfo("H100", {"bfloat16": 989e12}, 3.35e12, 450e9, 2e-6),
    ],
)
def test_records_round_trip_through_json(record):
    text = hs.to_json(record)
    assert hs.from_json(text, type(record)) == record
    assert hs.to_json(hs.from_json(text, type(record))) == text


def test_problem_key_is_stable_across_processes():
    code = "import sys; sys.path.insert(0, sys.argv[1]); from test_hookspecs import _problem; print(_problem().key())"
    here = __file__.rsplit("/", 1)[0]
    other = subprocess.run([sys.executable, "-c", code, here], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == _problem().key()
    assert len(_problem().key()) == 64


def test_problem_key_changes_with_any_field():
    base = _problem()
    keys = {
        base.key(),
        _problem(scalars={"beta": 0.5, "alpha": 1.0}).key(),
        _problem(epilogue=(EpilogueOp("relu"),)).key(),
        _problem(op="baddbmm").key(),
    }
    assert len(keys) == 4
    # params order does not matter
    assert _problem(scalars={"alpha": 2.0, "beta": 0.5}).key() == base.key()


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"backend": "a"}',
        '{"backend": "a", "template": "t", "params": [1, 2]}',
        '{"backend": "a", "template": "t", "params": {}, "extra": 1}',
        '{"backend": 1, "template": "t", "params": {}}',
    ],
)
def test_from_json_rejects_bad_shapes(text):
    with pytest.raises(hs.SerdeError):
        hs.from_json(text, ChoiceSpec)


def test_timing_inf_is_null_in_json():
    assert '"ms":null' in hs.to_json(Timing(ChoiceSpec("a", "b"), math.inf, "x"))
    with pytest.raises(hs.SerdeError):
        hs.from_json('{"spec": {"backend": "a", "template": "b", "params": {}}, "ms": "fast", "error": null}', Timing)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": "softmax"},
        {"name": "add"},
        {"name": "add", "input": 1, "scalar": 2.0},
        {"name": "relu", "scalar": 1.0},
        {"name": "cast"},
        {"name": "cast", "dtype": "int8"},
    ],
)
def test_epilogue_op_validation(kwargs):
    with pytest.raises(ValueError):
        EpilogueOp(**kwargs)


def test_tensor_meta_validation():
    with pytest.raises(ValueError):
        TensorMeta((2, 3), (3,), "float32")
    with pytest.raises(ValueError):
        TensorMeta((2,), (1,), "int32")
    assert TensorMeta.contiguous((2, 3, 4), "float32").stride == (12, 4, 1)
    assert TensorMeta.contiguous((0, 3), "float32").numel == 0


def test_every_hook_is_prefixed_and_documented():
    from tunesmith_hookspecs import hookspecs

    names = {n for n in dir(hookspecs) if n.startswith("tunesmith_")}
    design = {  # DESIGN.md's table, plus tunesmith_plugin_status and the rename below (docs/decisions.md)
        "tunesmith_add_options",
        "tunesmith_lowerings",
        "tunesmith_choices",
        "tunesmith_rebuild_choice",
        "tunesmith_estimate_runtime",
        "tunesmith_device_info",
        "tunesmith_benchmarker",
        "tunesmith_cache_layers",
        "tunesmith_pre_grad_passes",
        "tunesmith_joint_graph_passes",
        "tunesmith_post_grad_passes",
        "tunesmith_graph_compiler",
        "tunesmith_selection_done",
        "tunesmith_plugin_status",
    }
    deprecated = {"tunesmith_cache_backends": "tunesmith_cache_layers"}  # former name: new name
    assert names == design | set(deprecated)
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs)
    for old, new in deprecated.items():
        warning = getattr(pm.hook, old).spec.warn_on_impl
        assert isinstance(warning, DeprecationWarning) and new in str(warning), old
    for name in names:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert "Example::" in doc and len(doc) > 200, name


def test_plugin_status_declarations_are_checked():
    from tunesmith_hookspecs import PluginStatus

    status = PluginStatus(True, ops=["mm", "addmm"], dtypes=["float16"], devices=["cuda"])
    assert status.supports("mm", "float16", "cuda") is None
    assert "dtype float32" in status.supports("mm", "float32", "cuda")
    assert "device cpu" in status.supports("addmm", "float16", "cpu")
    assert PluginStatus(True).supports("conv", "bfloat16", "cpu") is None
    with pytest.raises(TypeError, match="list of names"):
        PluginStatus(True, ops="mm")
    with pytest.raises(ValueError, match="unknown matmul"):
        PluginStatus(True, ops=["matmul"])


def test_choice_spec_key_is_a_stable_digest():
    spec = ChoiceSpec("triton", "mm", {"BLOCK": 64})
    assert spec.key() == ChoiceSpec("triton", "mm", [("BLOCK", 64)]).key() != ChoiceSpec("triton", "mm").key()
    code = "from tunesmith_hookspecs import ChoiceSpec; print(ChoiceSpec('triton', 'mm', {'BLOCK': 64}).key())"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert other.stdout.strip() == spec.key()
