"""``torch.compile(..., backend="tunesmith")`` on the CPU: results and gradients against eager,
what gets lowered, the graph passes, dynamic shapes and the compiled-graph cache."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tunesmith
import tunesmith_hookspecs
from tunesmith.compile.dispatch import Recipe

from conftest import Mine, rand, run_env

TOL = 1e-4  # float32 against eager float32, relative by norm


@pytest.fixture(autouse=True)
def fresh_dynamo(monkeypatch):
    """A fresh Dynamo, and the ``eager`` graph compiler: these tests read the lowered graph as
    AOTAutograd gives it, before the decompositions of Inductor (the default, which
    test_compile_modes.py and the tests below that name it cover)."""
    monkeypatch.setenv("TUNESMITH_GRAPH_COMPILER", "eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a - b).norm().item() <= TOL * max(b.norm().item(), 1e-12)


class Recorder:
    """A run-time plugin whose post-grad "post" pass records every lowered call and every op."""

    def __init__(self) -> None:
        self.calls: list[Recipe] = []
        self.ops: Counter[str] = Counter()

    @tunesmith.hookimpl
    def tunesmith_post_grad_passes(self, stage):
        return [self.record] if stage == "post" else []

    def record(self, graph) -> None:
        for node in graph.nodes:
            if node.op == "call_function":
                self.ops[str(node.target)] += 1
                if str(node.target) == "tunesmith.gemm.default":
                    self.calls.append(Recipe.from_json(node.args[0]))

    def lowered(self) -> list[str]:
        return [c.op + "".join(f"+{s.name}" for s in c.epilogue) for c in self.calls]


@pytest.fixture
def recorder(register):
    rec = Recorder()
    register(rec, "recorder")
    return rec


def leaves(*tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_() for t in tensors]


def test_mm_plus_mm_with_relu_and_its_backward(recorder):
    def f(a, b, c, d):
        return torch.relu(a @ b + c @ d).sum()

    inputs = [rand(33, 20), rand(20, 17), rand(33, 9), rand(9, 17)]
    mine, ref = leaves(*inputs), leaves(*inputs)
    out = torch.compile(f, backend="tunesmith")(*mine)
    out.backward()
    f(*ref).backward()
    assert close(out, f(*inputs))
    assert all(close(x.grad, y.grad) for x, y in zip(mine, ref, strict=True))
    assert recorder.lowered()[0] == "mm_plus_mm+relu"  # the forward; the backward's four mms follow
    assert sorted(recorder.lowered()[1:]) == ["mm"] * 4
    assert tunesmith.counters["autotune_local_put"] == 5


def test_addmm_with_a_1d_bias_and_a_fused_epilogue(recorder):
    bias, a, b = rand(17), rand(33, 20), rand(20, 17)

    def f(bias, a, b):
        return F.gelu(torch.addmm(bias, a, b, beta=0.5)) * 2.0

    assert close(torch.compile(f, backend="tunesmith")(bias, a, b), f(bias, a, b))
    assert recorder.lowered() == ["addmm+gelu+mul"]
    assert recorder.calls[0].scalars == {"alpha": 1, "beta": 0.5}


def test_cat_of_two_addmms(recorder):
    a, b, c = rand(16, 16), rand(16, 16), rand(16, 16)

    def f(a, b, c):
        return torch.cat([torch.addmm(a, b, c), torch.addmm(b, c, a)], 1)

    assert close(torch.compile(f, backend="tunesmith")(a, b, c), f(a, b, c))
    assert recorder.lowered() == ["addmm", "addmm"]


def test_dynamic_shapes_tune_each_new_shape_without_recompiling(recorder):
    compiles = Counter()

    def counting(gm, example_inputs):
        compiles["graphs"] += 1
        return tunesmith.compile.backend(gm, example_inputs)

    def f(x, w, bias, scale):
        return torch.relu(x.T @ w.T + bias) * scale

    g = torch.compile(f, backend=counting, dynamic=True)
    for m in (24, 40):
        x, w, bias, scale = rand(19, m), rand(13, 19), rand(13), rand(m, 13)
        assert close(g(x, w, bias, scale), f(x, w, bias, scale))
    assert compiles["graphs"] == 1
    assert recorder.lowered() == ["mm+add+relu+mul"]
    assert tunesmith.counters["autotune_local_put"] == 2  # one tuning per concrete shape, at first sight


def test_matmul_then_dropout_with_backward():
    x, w = rand(32, 24), rand(24, 16)
    mine = leaves(x, w)

    def f(x, w):
        return F.dropout(x @ w, p=0.5, training=True)

    out = torch.compile(f, backend="tunesmith")(*mine)
    out.sum().backward()
    kept = out != 0
    assert 0 < kept.float().mean().item() < 1
    assert close(out[kept], ((x @ w) * 2)[kept])  # the surviving values are scaled by 1 / (1 - p)
    assert close(mine[1].grad, x.T @ (kept.float() * 2))


def test_channels_last_1x1_conv(recorder):
    x = rand(2, 16, 9, 7).to(memory_format=torch.channels_last)
    w = rand(8, 16, 1, 1).to(memory_format=torch.channels_last)
    bias = rand(8)

    def f(x, w, bias):
        return torch.relu(F.conv2d(x, w, bias))

    assert close(torch.compile(f, backend="tunesmith")(x, w, bias), f(x, w, bias))
    assert recorder.lowered() == ["conv+relu"]


def test_zero_size_and_non_contiguous_inputs():
    def f(a, b):
        return torch.relu(a @ b)

    g = torch.compile(f, backend="tunesmith")
    empty = (rand(0, 5), rand(5, 4))
    assert g(*empty).shape == (0, 4)
    a, b = rand(20, 33)[:, ::2], rand(40, 17).T.contiguous().T[:17]  # strided, and column-major
    torch._dynamo.reset()
    assert close(torch.compile(f, backend="tunesmith")(a, b), f(a, b))


def test_linear_stacks_in_training_match_eager_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.GELU(), torch.nn.Linear(32, 8), torch.nn.Tanh())
    twin = torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.GELU(), torch.nn.Linear(32, 8), torch.nn.Tanh())
    twin.load_state_dict(model.state_dict())
    x = rand(16, 24)
    compiled = torch.compile(model, backend="tunesmith")
    for _ in range(2):
        compiled(x).square().sum().backward()
        twin(x).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
        assert close(p.grad, q.grad), name


# --- graph passes ---


def cos_to_sin(graph):
    for node in graph.nodes:
        if node.target is torch.ops.aten.cos.default:
            node.target = torch.ops.aten.sin.default


@pytest.mark.parametrize("stage", ["pre", "post"])
@pytest.mark.parametrize("grad", [False, True])
def test_a_joint_graph_pass_changes_the_result(register, stage, grad):
    class Joint:
        @tunesmith.hookimpl
        def tunesmith_joint_graph_passes(self, stage):
            return [cos_to_sin] if stage == wanted else []

    wanted = stage
    register(Joint(), "joint")
    x, w = rand(8, 6), rand(6, 5)
    (mine,) = leaves(x)
    with torch.set_grad_enabled(grad):
        out = torch.compile(lambda x, w: torch.cos(x) @ w, backend="tunesmith")(mine if grad else x, w)
    assert close(out, torch.sin(x) @ w)


def test_post_grad_passes_run_once_each(register):
    runs = Counter()

    class Post:
        @tunesmith.hookimpl
        def tunesmith_post_grad_passes(self, stage):
            return [lambda graph: runs.update([stage])]

    register(Post(), "post")
    torch.compile(lambda a, b: a @ b, backend="tunesmith")(rand(4, 3), rand(3, 2))
    assert runs == {"pre": 1, "post": 1}


def merge_shared_weight_mms(graph):
    """[x1 @ W, x2 @ W] -> one mm on cat([x1, x2]), split back."""
    mms = [n for n in graph.nodes if n.op == "call_function" and n.target is torch.mm]
    first, second = mms
    assert first.args[1] is second.args[1]
    with graph.inserting_before(first):
        cat = graph.call_function(torch.cat, ([first.args[0], second.args[0]],))
        both = graph.call_function(torch.mm, (cat, first.args[1]))
        top = graph.call_function(torch.Tensor.__getitem__, (both, slice(None, first.meta["example_value"].shape[0])))
        rest = graph.call_function(torch.Tensor.__getitem__, (both, slice(first.meta["example_value"].shape[0], None)))
    first.replace_all_uses_with(top)
    second.replace_all_uses_with(rest)
    graph.erase_node(second)
    graph.erase_node(first)


def test_a_pre_grad_pass_merges_two_mms_into_one(register, recorder):
    class Merge:
        @tunesmith.hookimpl
        def tunesmith_pre_grad_passes(self):
            return [merge_shared_weight_mms]

    register(Merge(), "merge")
    x1, x2, w = rand(8, 6), rand(5, 6), rand(6, 4)

    def f(x1, x2, w):
        return torch.mm(x1, w) + 1, torch.mm(x2, w) * 2

    out = torch.compile(f, backend="tunesmith")(x1, x2, w)
    assert all(close(a, b) for a, b in zip(out, f(x1, x2, w), strict=True))
    assert [c.op for c in recorder.calls] == ["mm"] and recorder.ops["aten.mm.default"] == 0


# --- the compiled-graph cache ---


def compile_and_run(f, *args, options=None, **kwargs):
    torch._dynamo.reset()
    tunesmith.reset()
    return torch.compile(f, backend="tunesmith", options=options)(*args, **kwargs)


def test_a_second_compile_is_a_hit_with_no_tuning():
    a, b, bias = rand(33, 20), rand(20, 17), rand(17)

    def f(a, b, bias):
        return torch.relu(a @ b + bias)

    first = compile_and_run(f, a, b, bias)
    assert tunesmith.counters["compiled_graph_cache_miss"] == 1 and tunesmith.counters["autotune_local_put"] == 1
    second = compile_and_run(f, a, b, bias)
    assert close(first, second)
    assert tunesmith.counters["compiled_graph_cache_hit"] == 1
    tuning = ("autotune_local_hit", "autotune_local_miss", "autotune_local_put", "precompile")
    assert [tunesmith.counters[c] for c in tuning] == [0, 0, 0, 0]


def test_a_tensor_constant_a_setting_and_kwargs_order():
    w = rand(6, 4)

    def one(x):
        return (x @ w) * torch.tensor([1.0, 2.0, 3.0, 4.0])

    def other(x):
        return (x @ w) * torch.tensor([1.0, 2.0, 3.0, 5.0])

    x = rand(5, 6)
    compile_and_run(one, x)
    compile_and_run(other, x)
    assert tunesmith.counters["compiled_graph_cache_miss"] == 1, "a changed constant hit"
    compile_and_run(one, x, options={"tie_tolerance": 0.02})
    assert tunesmith.counters["compiled_graph_cache_miss"] == 1, "a changed setting hit"
    compile_and_run(one, x, options={"tie_tolerance": 0.02})
    assert tunesmith.counters["compiled_graph_cache_hit"] == 1

    def kw(x, *, scale, shift):
        return (x @ w) * scale + shift

    scale, shift = rand(4), rand(4)
    compile_and_run(kw, x, scale=scale, shift=shift)
    assert tunesmith.counters["compiled_graph_cache_miss"] == 1
    out = compile_and_run(kw, x, shift=shift, scale=scale)
    assert tunesmith.counters["compiled_graph_cache_hit"] == 1, "kwargs in another order missed"
    assert close(out, kw(x, scale=scale, shift=shift))


def test_a_graph_with_a_higher_order_op_is_bypassed(caplog):
    w = rand(6, 4)

    def f(x, pred):
        return torch.cond(pred, lambda x: x @ w, lambda x: x @ w * 2, (x,))

    x = rand(5, 6)
    with caplog.at_level("INFO", logger="tunesmith.compile.stages"):
        assert close(compile_and_run(f, x, torch.tensor(False)), x @ w * 2)
    assert tunesmith.counters["compiled_graph_cache_bypass"] == 1
    assert "higher-order op cond" in caplog.text


def test_options_are_checked_and_reach_the_tuning():
    with pytest.raises(Exception, match="no_such_setting"):
        compile_and_run(lambda a, b: a @ b, rand(3, 3), rand(3, 3), options={"no_such_setting": 1})
    compile_and_run(lambda a, b: a @ b, rand(3, 4), rand(4, 5), options={"caches": []})
    assert tunesmith.counters["autotune_local_miss"] == 0 and tunesmith.counters["compiled_graph_local_miss"] == 0


def test_the_backend_is_found_through_its_entry_point():
    from torch._dynamo.backends.registry import list_backends, lookup_backend

    assert "tunesmith" in list_backends(exclude_tags=())
    assert lookup_backend("tunesmith") is tunesmith.compile.backend


def test_the_recipe_round_trips():
    recipe = Recipe("addmm", {"beta": 0.5}, (), 3, "abc").to_json()
    assert Recipe.from_json(recipe).to_json() == recipe and json.loads(recipe)["op"] == "addmm"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: run by scripts/gpu_tests.sh")
def test_on_every_visible_gpu_the_kernels_run_where_the_tensors_are(recorder):
    for index in range(torch.cuda.device_count()):
        device = torch.device("cuda", index)
        bias, a, b = (t.to(device, torch.bfloat16) for t in (rand(64), rand(48, 80), rand(80, 64)))

        def f(bias, a, b):
            return F.gelu(torch.addmm(bias, a, b), approximate="tanh").to(torch.float32)

        torch._dynamo.reset()
        out = torch.compile(f, backend="tunesmith")(bias, a, b)
        ref = f(bias.double(), a.double(), b.double())
        assert out.device == device and out.dtype == torch.float32
        assert (out - ref).norm() <= 1e-2 * ref.norm()
    assert recorder.lowered()[-1] == "addmm+gelu_tanh+cast"


# --- plugins: lowerings and graph compilers ---


def test_a_plugins_lowering_is_asked_first_and_may_pass(register, recorder):
    asked = []

    class Shy:
        name = "shy"

        def match(self, node):
            asked.append(node.name)
            return None

    class Plugin:
        @tunesmith.hookimpl
        def tunesmith_lowerings(self):
            return [Shy()]

    register(Plugin(), "lowerings")
    a, b = rand(3, 5, 4), rand(3, 4, 6)
    assert close(torch.compile(lambda a, b: torch.bmm(a, b) * 0.5, backend="tunesmith")(a, b), torch.bmm(a, b) * 0.5)
    assert asked and recorder.lowered() == ["bmm+mul"]


def test_a_plugins_lowering_that_matches_wins(register, recorder):
    class MmAsBmm:
        """mm read as a bmm of one batch: a plugin's own lowering, chosen over the core's."""

        name = "mm_as_bmm"

        def match(self, node):
            if node.target is not torch.ops.aten.mm.default:
                return None
            graph = node.graph
            with graph.inserting_before(node):
                a, b = (graph.call_function(torch.ops.aten.unsqueeze.default, (x, 0)) for x in node.args[:2])
            for new, old in zip((a, b), node.args[:2], strict=True):
                new.meta["val"] = old.meta["val"].unsqueeze(0)
            with graph.inserting_after(node):
                squeeze = graph.call_function(torch.ops.aten.squeeze.dim, (node, 0))
            node.replace_all_uses_with(squeeze, delete_user_cb=lambda user: user is not squeeze)
            node.target, node.args = torch.ops.aten.bmm.default, (a, b)
            node.meta["val"] = torch.ops.aten.bmm.default(a.meta["val"], b.meta["val"])
            squeeze.meta["val"] = node.meta["val"].squeeze(0)
            return tunesmith_hookspecs.LoweringMatch("bmm", (a, b), node)

    class Plugin:
        @tunesmith.hookimpl
        def tunesmith_lowerings(self):
            return [MmAsBmm()]

    register(Plugin(), "lowerings")
    a, b = rand(5, 4), rand(4, 6)
    assert close(torch.compile(lambda a, b: a @ b, backend="tunesmith")(a, b), a @ b)
    assert recorder.lowered() == ["bmm"]


def test_a_plugins_graph_compiler_gets_the_lowered_graph(register):
    from torch._functorch.aot_autograd import make_boxed_func

    seen = []

    class Compiler:
        @tunesmith.hookimpl
        def tunesmith_graph_compiler(self, options):
            if options.graph_compiler != "counting":
                return None

            def compile_graph(gm, example_inputs):
                seen.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
                return make_boxed_func(gm.forward)

            return compile_graph

    register(Compiler(), "counting")
    register(Mine())
    a, b = rand(5, 4), rand(4, 6)
    options = {"graph_compiler": "counting", "backends": ["mine"]}
    out = torch.compile(lambda a, b: a @ b, backend="tunesmith", options=options)(a, b)
    assert close(out, a @ b) and seen == [["tunesmith.gemm.default"]]
    torch._dynamo.reset()
    torch.compile(lambda a, b: a @ b, backend="tunesmith", options={"graph_compiler": "counting"})(a, b)
    assert seen[-1] == ["aten.mm.default"], "ATen's winner was not given back to the graph as ATen's op"
    torch._dynamo.reset()
    with pytest.raises(Exception, match="graph_compiler='nonesuch': no plugin compiles graphs by that name"):
        torch.compile(lambda a, b: a @ b, backend="tunesmith", options={"graph_compiler": "nonesuch"})(a, b)


def test_the_inductor_graph_compiler_calls_tunesmiths_kernels(recorder):
    a, b, c = rand(33, 20), rand(20, 17), rand(33, 17)

    def f(a, b, c):
        return torch.relu(a @ b) * c + 1

    with torch._inductor.config.patch(fx_graph_cache=False):  # so that the passes run, not a cached graph
        out = torch.compile(f, backend="tunesmith", options={"graph_compiler": "inductor"})(a, b, c)
    assert close(out, f(a, b, c))
    assert recorder.lowered() and recorder.lowered()[0].startswith("mm+relu")
    assert tunesmith.counters["autotune_local_put"] == 1


def test_tunesmith_tune_runs_a_model_script(tmp_path, capsys):
    from tunesmith.cli import main

    script = tmp_path / "model.py"
    script.write_text(
        "import torch\n"
        "model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))\n"
        "example_inputs = lambda: (torch.randn(4, 16),)\n"
        "train = True\n"
    )
    out_json = tmp_path / "rows.json"
    assert main(["tune", str(script), "--json", str(out_json)]) == 0
    table = capsys.readouterr().out
    rows = json.loads(out_json.read_text())
    assert len(rows) == 5 and {r["source"] for r in rows} == {"tuned"}  # 2 forward, 3 backward GEMMs
    assert "tunesmith selections" in table and "aten:eager" in table
    (tmp_path / "bad.py").write_text("x = 1\n")
    assert main(["tune", str(tmp_path / "bad.py")]) == 2
    assert "does not define model and example_inputs" in capsys.readouterr().err


# --- layouts, odd graphs and the key itself ---


def test_the_result_keeps_the_layout_the_graph_expects(recorder):
    x = rand(2, 6, 3, 3).to(memory_format=torch.channels_last)
    w = rand(6, 6, 1, 1).to(memory_format=torch.channels_last)

    def cl(x, w):  # the view is valid only on conv's channels-last result
        return F.conv2d(x, w).permute(0, 2, 3, 1).view(-1, 6)

    a, b, y = rand(4, 3), rand(3, 5), rand(5, 4)

    def operand_first(a, b, y):  # the add's result follows y.t()'s column-major layout
        return (y.t() + a @ b).t().view(-1)

    for f, args in ((cl, (x, w)), (operand_first, (a, b, y))):
        torch._dynamo.reset()
        out, ref = torch.compile(f, backend="tunesmith")(*args), f(*args)
        assert close(out, ref) and out.stride() == ref.stride()
    assert recorder.lowered() == ["conv", "mm+add"]


def test_a_scalar_constant_and_a_broadcasting_add_of_two_mms():
    x, w, y, v = rand(4, 3), rand(3, 5), rand(1, 2), rand(2, 5)

    def f(x, w, y, v):
        return (x @ w + y @ v) * torch.tensor(2.0)

    assert close(torch.compile(f, backend="tunesmith")(x, w, y, v), f(x, w, y, v))


def test_the_key_ignores_kwargs_order_and_sees_their_values():
    from tunesmith.compile.graphcache import graph_key

    def graph(kwargs):
        g = torch.fx.Graph()
        bias, a, b = (g.placeholder(n) for n in ("bias", "a", "b"))
        g.output(g.call_function(torch.ops.aten.addmm.default, (bias, a, b), kwargs))
        return torch.fx.GraphModule(torch.nn.Module(), g)

    options = tunesmith.current_options()
    keys = [graph_key(graph(kw), options, "forward", []) for kw in ({"beta": 2, "alpha": 3}, {"alpha": 3, "beta": 2})]
    assert keys[0] == keys[1]
    assert graph_key(graph({"alpha": 3, "beta": 4}), options, "forward", []) != keys[0]


def test_a_second_run_of_a_model_script_reports_the_plan(tmp_path, capsys):
    from tunesmith.cli import main

    script = tmp_path / "model.py"
    script.write_text("import torch\nmodel = torch.nn.Linear(8, 4)\nexample_inputs = (torch.randn(3, 8),)\n")
    for source in ("tuned", "plan"):
        tunesmith.reset()
        assert main(["tune", str(script), "--json", str(tmp_path / "rows.json")]) == 0
        assert [r["source"] for r in json.loads((tmp_path / "rows.json").read_text())] == [source]
    assert "plan" in capsys.readouterr().out


def test_compile_options_reach_a_graph_that_inductor_serves_from_its_cache(tmp_path, monkeypatch):
    """A fresh process whose graph comes from Inductor's FX graph cache still tunes with the
    options given to torch.compile (here: the cache folder)."""
    script = (  # a backend that is not ATen's plain op, so that the graph keeps a tunesmith call
        "import sys, torch, tunesmith, conftest\n"
        "tunesmith.register(conftest.Mine())\n"
        "f = torch.compile(lambda a, b: torch.relu(a @ b), backend='tunesmith',\n"
        "                  options={'graph_compiler': 'inductor', 'cache_dir': sys.argv[1], 'backends': ['mine']})\n"
        "f(torch.randn(8, 4), torch.randn(4, 6))\n"
    )
    env = run_env(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), PYTHONPATH=str(Path(__file__).parent))
    for run in ("first", "second"):
        subprocess.run([sys.executable, "-c", script, str(tmp_path / run)], env=env, check=True, timeout=300)
        assert list((tmp_path / run).glob("entries/*/*.json")), f"the {run} process did not use its cache_dir"


WARM_START = (  # tunesmith tune model.py in this process, then the counters as JSON
    "import json, sys, tunesmith\n"
    "from tunesmith.cli import main\n"
    "assert main(['tune', sys.argv[1]]) == 0\n"
    "print(json.dumps(dict(tunesmith.counters)))\n"
)
WARM_MODEL = (  # one function, forward and backward, with the default graph compiler (Inductor)
    "import torch\n"
    "def model(a, b):\n"
    "    return a @ b  # nothing for Inductor to generate C++ for: a quick cold compile\n"
    "example_inputs = lambda: (torch.randn(8, 4, requires_grad=True), torch.randn(4, 6))\n"
    "train = True\n"
)


def test_a_warm_start_that_inductors_cache_serves_is_counted_and_reported(tmp_path, capsys):
    """Two processes share Inductor's cache folder and tunesmith's: in the second, Inductor's own
    caches serve both graphs and no tunesmith stage runs, yet each counts as a compiled-graph hit,
    ``tunesmith tune model.py`` says that Inductor served them, and ``tunesmith report`` (a third
    process, in effect) says that the warm start happened."""
    from tunesmith.cli import main

    (tmp_path / "model.py").write_text(WARM_MODEL)
    env = run_env(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), TUNESMITH_GRAPH_COMPILER="inductor")
    runs = []
    for _ in range(2):
        argv = [sys.executable, "-c", WARM_START, str(tmp_path / "model.py")]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append((json.loads(proc.stdout.strip().splitlines()[-1]), " ".join(proc.stdout.split())))
    (cold, cold_out), (warm, warm_out) = runs
    assert cold["compiled_graph_cache_miss"] == 2 and cold["autotune_tuned"] == 2, cold
    assert "compiled_graph_cache_hit" not in cold and "compiled_graph_inductor_hit" not in cold, cold
    assert "tuned" in cold_out and "a warm start" not in cold_out
    # nothing tuned; Inductor's hashes of torch and Triton taken from the cold process (install_keys)
    assert warm == {"compiled_graph_cache_hit": 2, "compiled_graph_inductor_hit": 2, "install_keys_remembered": 2}, warm
    assert "a warm start: Inductor's cache served 2 of the model's compiled graphs" in warm_out
    assert "no GEMM-family problem" not in warm_out
    assert main(["report"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "compiled graphs: 2 compiled cold, 2 served warm from a cache (2 of them by Inductor's own cache" in said
    assert main(["cache", "clear"]) == 0 and main(["report"]) == 0
    assert "compiled graphs" not in capsys.readouterr().out  # cleared with the entries
