"""How a compiled model runs: torch's ``mode`` and ``options`` keywords, the default graph
compiler, CUDA-graph capture safety, kernels bound when compiling, and ATen's winners given back
to the graph (on the CPU: CUDA graphs themselves run in benchmarks/models.py on a GPU)."""

from __future__ import annotations

import logging
import sys

import pytest
import torch
from torch._inductor.utils import run_and_get_code

import tunesmith
from tunesmith import selection
from tunesmith.compile import dispatch
from tunesmith.errors import CaptureError, OptionError

from conftest import Mine, rand
from test_compile import close

backend_module = sys.modules["tunesmith.compile.backend"]  # (the package exports the function by that name)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def settings_seen(monkeypatch):
    """The settings each compile ran with (the pipeline itself still runs)."""
    seen = []
    real = backend_module.current_options

    def spy(call=None):
        seen.append(real(call))
        return seen[-1]

    monkeypatch.setattr(backend_module, "current_options", spy)
    return seen


@pytest.mark.parametrize(
    ("mode", "cudagraphs"),
    [(None, False), ("reduce-overhead", True), ("max-autotune", True), ("max-autotune-no-cudagraphs", False)],
)
def test_torch_modes_set_cudagraphs(settings_seen, mode, cudagraphs):
    a, b = rand(8, 5), rand(5, 3)
    out = torch.compile(lambda a, b: torch.relu(a @ b), backend="tunesmith", mode=mode)(a, b)
    assert close(out, torch.relu(a @ b))
    assert [s.cudagraphs for s in settings_seen] == [cudagraphs]
    assert settings_seen[0].graph_compiler == "inductor"


def test_options_reach_the_backend_and_win_over_the_mode(settings_seen):
    a, b = rand(8, 5), rand(5, 3)
    options = {"cudagraphs": True, "graph_compiler": "eager"}
    torch.compile(lambda a, b: a @ b, backend="tunesmith", options=options)(a, b)
    assert settings_seen[0].cudagraphs and settings_seen[0].graph_compiler == "eager"
    assert backend_module.with_mode("max-autotune", {"cudagraphs": False}) == {"cudagraphs": False}
    with pytest.raises(OptionError, match="mode 'fastest' is not one of 'default'"):
        backend_module.with_mode("fastest", None)


def test_the_default_graph_compiler_is_inductor(monkeypatch):
    assert tunesmith.current_options().graph_compiler == "inductor"
    monkeypatch.setenv("TUNESMITH_GRAPH_COMPILER", "eager")
    assert tunesmith.current_options().graph_compiler == "eager"


@pytest.mark.parametrize("graph_compiler", ["inductor", "eager"])
def test_cudagraphs_on_the_cpu_run_without_them_and_match_eager(graph_compiler, caplog):
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = rand(6, 12)
    options = {"cudagraphs": True, "graph_compiler": graph_compiler}
    with caplog.at_level(logging.WARNING, logger="tunesmith"):
        compiled = torch.compile(model, backend="tunesmith", options=options)
        out = compiled(x)
        out.sum().backward()
    assert close(out, model(x))
    if graph_compiler == "eager":  # Inductor logs its own reason through torch's logging
        assert "runs without CUDA graphs" in caplog.text and "cpu" in caplog.text.lower()


def test_aten_winners_go_back_to_inductor_as_aten_ops(register):
    """Where ATen's plain op wins, Inductor gets the op itself (it calls cuBLAS directly and fuses
    the epilogue as it would on its own); another winner stays a bound tunesmith call."""
    a, b = rand(16, 8), rand(8, 12)

    def f(a, b):
        return torch.relu(a @ b) * 2.0

    out, (code,) = run_and_get_code(torch.compile(f, backend="tunesmith"), a, b)
    assert close(out, f(a, b)) and "tunesmith.gemm" not in code
    register(Mine())
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="tunesmith", options={"backends": ["mine"]})
    out, (code,) = run_and_get_code(compiled, a, b)
    assert close(out, f(a, b)) and "tunesmith.gemm" in code


def test_static_calls_are_bound_when_compiling(register, monkeypatch):
    """With static shapes a call finds its kernel by its recipe alone: no layout key, no
    selection, at any call after the compile."""
    register(Mine())
    a, b, bias = rand(16, 8), rand(8, 12), rand(12)

    def f(a, b, bias):
        return torch.relu(a @ b + bias)

    options = {"backends": ["mine"], "graph_compiler": "eager"}
    compiled = torch.compile(f, backend="tunesmith", options=options)
    compiled(a, b, bias)
    assert len(dispatch._bound) == 1

    def forbidden(*args):
        raise AssertionError("a bound call computed a layout key or selected")

    monkeypatch.setattr(dispatch, "layout_key", forbidden)
    monkeypatch.setattr(dispatch, "select", forbidden)
    for _ in range(3):
        a, b, bias = rand(16, 8), rand(8, 12), rand(12)
        assert close(compiled(a, b, bias), f(a, b, bias))


def test_nothing_is_selected_while_a_cuda_graph_is_captured(register, monkeypatch, caplog):
    """A call whose kernel is not known yet (a new shape under ``dynamic=True``) that first runs
    inside a capture runs torch's own ops; the next call outside a capture selects."""
    register(Mine())
    capture = {"on": True}
    monkeypatch.setattr(dispatch, "capturing", lambda: capture["on"])
    monkeypatch.setattr(selection, "capturing", lambda: capture["on"])
    real_select = dispatch.select

    def guarded(*args, **kwargs):
        assert not capture["on"], "selection ran inside a CUDA graph capture"
        return real_select(*args, **kwargs)

    monkeypatch.setattr(dispatch, "select", guarded)

    def f(a, b):
        return torch.relu(a @ b)

    options = {"backends": ["mine"], "graph_compiler": "eager"}
    compiled = torch.compile(f, backend="tunesmith", options=options, dynamic=True)
    a, b = rand(10, 6), rand(6, 7)
    with caplog.at_level(logging.WARNING, logger="tunesmith"):
        assert close(compiled(a, b), f(a, b))
    assert "while a CUDA graph was captured" in caplog.text
    assert tunesmith.counters["autotune_local_put"] == 0
    capture["on"] = False
    assert close(compiled(a, b), f(a, b))
    assert tunesmith.counters["autotune_local_put"] == 1
    capture["on"] = True
    with pytest.raises(CaptureError, match="while a CUDA graph is captured"):
        tunesmith.tune("mm", rand(4, 4), rand(4, 4))


@pytest.mark.parametrize(("options", "timed"), [({}, False), ({"pointwise_autotune": True}, True)])
def test_inductor_times_pointwise_launch_configs_only_when_asked(monkeypatch, options, timed):
    """Inductor's pointwise autotuning is off in tunesmith's compiles unless ``pointwise_autotune``
    asks for it (its timings of small kernels are host time: docs/decisions.md)."""
    import torch._inductor.compile_fx as compile_fx

    seen = []
    real = compile_fx.compile_fx

    def spy(*args, **kwargs):  # called before any of Inductor's caches is looked at (then by itself)
        if "config_patches" in kwargs:
            seen.append(kwargs["config_patches"].get("triton.autotune_pointwise"))
        return real(*args, **kwargs)

    monkeypatch.setattr(compile_fx, "compile_fx", spy)
    fn = torch.compile(lambda x: torch.relu(x) * 2 + 1, backend="tunesmith", options=options)
    x = rand(16, 8)
    assert close(fn(x), torch.relu(x) * 2 + 1)
    assert seen and set(seen) == {timed}
