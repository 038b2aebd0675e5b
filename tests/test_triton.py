"""The Triton plugin's templates, run in Triton's interpreter on the CPU (``TRITON_INTERPRET=1``,
in a subprocess: the flag is read when the kernels are defined): every template, float32 and
float16, odd shapes, transposed and strided inputs, every epilogue step, each choice against the
float64 reference."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import threading
import weakref

import pytest
import torch
from tunesmith_triton.choice import TritonChoice, _Direct

import tunesmith
from tunesmith.problem import build_problem
from tunesmith_hookspecs import ChoiceSpec

from conftest import run_env, run_interpreted

CHECK = r"""
import json, torch
import tunesmith
from tunesmith import hooks
from tunesmith.ops import reference, relative_error, tolerance
from tunesmith.problem import build_problem
from tunesmith_hookspecs import ChoiceSpec
from tunesmith_triton.choice import TritonChoice, _Direct
from tunesmith_triton import tunesmith_choices, tunesmith_rebuild_choice

torch.manual_seed(0)
M, N, K, K2, B = 17, 19, 18, 7, 3

def mat(rows, cols, dtype, layout):
    if layout == "transposed":
        return torch.randn(cols, rows).to(dtype).t()
    if layout == "strided":
        return torch.randn(rows, 2 * cols).to(dtype)[:, ::2]
    return torch.randn(rows, cols).to(dtype)

def batched(rows, cols, dtype, layout):
    if layout == "transposed":
        return torch.randn(B, cols, rows).to(dtype).transpose(1, 2)
    return torch.randn(B, rows, cols).to(dtype)

def tensors(op, dtype, layout):
    if op == "mm":
        return [mat(M, K, dtype, layout), mat(K, N, dtype, "contiguous")], {}
    if op == "addmm":
        bias = torch.randn(N).to(dtype)
        return [bias, mat(M, K, dtype, layout), mat(K, N, dtype, layout)], {"alpha": 0.5, "beta": 2.0}
    if op == "bmm":
        return [batched(M, K, dtype, layout), batched(K, N, dtype, "contiguous")], {}
    if op == "baddbmm":
        bias = torch.randn(M, N).to(dtype)
        return [bias, batched(M, K, dtype, layout), batched(K, N, dtype, layout)], {"beta": 0.5}
    second = [mat(M, K2, dtype, "contiguous"), mat(K2, N, dtype, layout)]
    return [mat(M, K, dtype, layout), mat(K, N, dtype, "contiguous"), *second], {}

STEPS = ["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", ("add", 1.5), ("mul", -0.5), "add_tensor",
         "mul_row", ("cast", torch.float16), ("cast", torch.float32)]

def step(item, shape, dtype):
    if item == "add_tensor":
        return ("add", torch.randn(shape).to(dtype))
    if item == "mul_row":
        return ("mul", torch.randn(shape[-1]).to(torch.float32))
    return item

cases = []
for op in ("mm", "addmm", "bmm", "baddbmm", "mm_plus_mm"):
    for dtype in (torch.float32, torch.float16):
        for layout in ("contiguous", "transposed", "strided"):
            if layout == "strided" and op in ("bmm", "baddbmm"):
                continue
            cases.append((op, dtype, layout, []))
        cases.append((op, dtype, "contiguous", ["relu", ("mul", 0.5), "add_tensor", ("cast", torch.float16)]))
for item in STEPS:
    cases.append(("mm", torch.float32, "contiguous", [item]))

# TMA-readable shapes (16-byte aligned rows: the TMA template, and its persistent loop when the
# tiles outnumber the programs) and decode shapes (few output tiles, long K: split-K)
def aligned(op, dtype, layout):
    a = mat(70, 40, dtype, "contiguous")
    b = mat(40, 24, dtype, "contiguous") if layout == "contiguous" else torch.randn(24, 40).to(dtype).t()
    return ([torch.randn(24).to(dtype), a, b], {"beta": 0.5}) if op == "addmm" else ([a, b], {})

def batched_aligned(op, dtype, layout):
    a = torch.randn(B, 70, 40).to(dtype)
    b = torch.randn(B, 40, 24).to(dtype) if layout == "contiguous" else torch.randn(B, 24, 40).to(dtype).transpose(1, 2)
    return ([torch.randn(B, 70, 24).to(dtype), a, b], {"beta": 0.5}) if op == "baddbmm" else ([a, b], {})

def decode(op, dtype, layout):
    a, b = mat(5, 100, dtype, "contiguous"), mat(100, 19, dtype, layout)
    return ([torch.randn(19).to(dtype), a, b], {"alpha": 2.0}) if op == "addmm" else ([a, b], {})

extra = []
for make, ops in ((aligned, ("mm", "addmm")), (decode, ("mm", "addmm")), (batched_aligned, ("bmm", "baddbmm"))):
    for op in ops:
        for dtype in (torch.float32, torch.float16):
            for layout in ("contiguous", "transposed"):
                extra.append((make, op, dtype, layout, ["relu"] if op in ("addmm", "baddbmm") else []))

def kind(spec):
    params = dict(spec.params)
    split = "-split" if params.get("split_k", 1) > 1 else ""
    return (spec.template + split + ("-persistent" if params.get("persistent") else "")
            + ("-subtile" if params.get("subtile", 1) > 1 else "") + ("-ws" if params.get("warp_specialize") else ""))

rows = []
for make, op, dtype, layout, chain in [(tensors, *c) for c in cases] + extra:
    ts, scalars = make(op, dtype, layout)
    shape = (B, M, N) if op in ("bmm", "baddbmm") else (M, N)
    epilogue = [step(s, shape, dtype) for s in chain]
    problem, inputs = build_problem(op, ts, scalars, epilogue)
    ref = reference(problem, inputs)
    choices = tunesmith_choices(problem, None)
    errors = []
    for choice in choices:
        choice.precompile()
        run = choice.kernel()
        errors.append(relative_error(run(*inputs), ref))
        errors.append(relative_error(run(*inputs), ref))  # again: split-K left its sums at zero
        again = tunesmith_rebuild_choice(choice.spec, problem)
        errors.append(relative_error(again.kernel()(*inputs), ref))
    label = "" if make is tensors else f"{make.__name__}:"
    rows.append({"case": f"{label}{op}-{str(dtype)[6:]}-{layout}-{'+'.join(str(s) for s in chain)}",
                 "choices": len(choices), "worst": max(errors, default=None), "tolerance": tolerance(problem),
                 "kinds": sorted({kind(c.spec) for c in choices})})
bf16 = build_problem("mm", [torch.randn(4, 4).bfloat16(), torch.randn(4, 4).bfloat16()], {})[0]
from triton.runtime import interpreter
from tunesmith_triton import kernels

# the language patches of one launch of the GEMM template over 4 programs (each calls helpers),
# against those of patching for its kernel once
patches = []
count_patches = interpreter._patch_builtin
interpreter._patch_builtin = lambda *args: (patches.append(1), count_patches(*args))[1]
interpreter._patch_lang(kernels.gemm_kernel.fn).restore()
once = len(patches)
problem, inputs = build_problem("mm", [torch.randn(64, 32), torch.randn(32, 64)], {})
(small,) = [c for c in tunesmith_choices(problem, None) if str(c.spec).startswith("triton:gemm[block_k=32,block_m=32,")]
patches.clear()
small.kernel()(*inputs)
print(json.dumps({"rows": rows, "bf16_choices": len(tunesmith_choices(bf16, None)),
                  "status": hooks.plugin_status("triton").reason,
                  "overflow_checks": interpreter.interpreter_builder.options.sanitize_overflow,
                  "language_patches": {"once": once, "launch_of_4_programs": len(patches)}}))
"""


@pytest.fixture(scope="module")
def interpreted() -> dict:
    return run_interpreted(CHECK)


def test_every_template_and_epilogue_step_is_right_in_the_interpreter(interpreted):
    rows = interpreted["rows"]
    assert len(rows) == 5 * 2 * 3 - 4 + 10 + 12 + 24
    empty = [r["case"] for r in rows if not r["choices"]]
    assert not empty, f"no Triton choice for {empty}"
    wrong = [r for r in rows if not r["worst"] <= r["tolerance"]]
    assert not wrong, f"wrong results: {wrong[:5]}"


def test_tma_persistent_and_split_k_kernels_are_offered_where_they_fit(interpreted):
    kinds = {r["case"]: set(r["kinds"]) for r in interpreted["rows"]}
    # rows 70 x 40 x 24: TMA reads B row-major or column-major; 3 tiles of 32 rows outnumber the
    # interpreter's 2 programs, so the persistent loop is offered too
    for dtype in ("float32", "float16"):
        # (the epilogue in two column slices, and a warp-specialised producer, Hopper's variants)
        want = {"gemm", "gemm_tma-subtile", "gemm_tma-persistent-ws"}
        assert want <= kinds[f"aligned:addmm-{dtype}-contiguous-relu"]
        assert "gemm_tma-subtile" in kinds[f"aligned:mm-{dtype}-transposed-"]
        # batches: 3-D descriptors; 3 x 3 tiles outnumber the programs; no producer warp (slower there)
        batched = kinds[f"batched_aligned:baddbmm-{dtype}-transposed-relu"]
        assert {"gemm_tma-subtile", "gemm_tma-persistent"} <= batched and "gemm_tma-persistent-ws" not in batched
        assert "gemm_tma-subtile" in kinds[f"batched_aligned:bmm-{dtype}-contiguous-"]
    # a 5 x 19 output with K = 100: one tile, so K is split
    decode = [r for r in interpreted["rows"] if r["case"].startswith("decode:mm-") and "gemm-split" in r["kinds"]]
    assert len(decode) == 4, kinds
    # odd rows (18 floats) cannot be read by TMA
    assert kinds["mm-float32-contiguous-"] == {"gemm"}


def test_the_interpreter_offers_no_bfloat16_and_says_why(interpreted):
    assert interpreted["bf16_choices"] == 0
    assert "no bfloat16" in interpreted["status"] and "interpreter" in interpreted["status"]


def test_the_interpreter_computes_no_overflow_check_that_it_would_not_assert(interpreted):
    """Without debug the interpreter drops each int32 overflow check it computed (half a GEMM
    template's time there); the plugin turns them off, as a GPU compile drops them."""
    assert interpreted["overflow_checks"] is False


def test_the_interpreter_patches_the_language_once_per_launch_not_per_helper_call(interpreted):
    """The interpreter patched ``triton.language`` again at each helper call of each program (40% of
    a GEMM template's time there); the plugin makes a launch patch it once."""
    patches = interpreted["language_patches"]
    assert patches["once"] > 0 and patches["launch_of_4_programs"] == patches["once"], patches


def test_without_a_gpu_or_the_interpreter_the_plugin_says_why():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    status = tunesmith.hooks.plugin_status("triton")
    assert not status.runnable and "needs a CUDA GPU" in status.reason and "TRITON_INTERPRET=1" in status.reason
    assert "numpy" in status.reason  # the interpreter imports it; the plugin's wheels do not bring it


def test_loading_the_plugin_imports_no_triton_until_a_problem_it_may_serve():
    """Every process that loads plugins (each benchmark worker too) loads this one: it imports
    Triton, a third of a second, only for a Problem on the device its templates run on."""
    script = """if True:
        import json, sys, torch
        import tunesmith
        from tunesmith import hooks
        from tunesmith.problem import build_problem
        status = hooks.plugin_status("triton")
        loaded = "triton" in sys.modules
        problem, _ = build_problem("mm", [torch.randn(8, 8), torch.randn(8, 8)], {})
        offered, _ = hooks.choices(problem, tunesmith.current_options())
        ours = sum(c.spec.backend == "triton" for c in offered)
        print(json.dumps({"loaded": loaded, "after_cpu_problem": "triton" in sys.modules,
                          "runnable": status.runnable, "triton_choices": ours}))
    """
    env = {k: v for k, v in run_env().items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    runnable = torch.cuda.is_available()  # a GPU's templates are offered on CUDA Problems, not this CPU one
    assert seen == {"loaded": False, "after_cpu_problem": False, "runnable": runnable, "triton_choices": 0}, seen


def test_a_chain_longer_than_the_template_takes_is_not_offered():
    from tunesmith_triton.choice import epilogue_plan

    a, b = torch.randn(4, 4), torch.randn(4, 4)
    five, _ = build_problem("mm", [a, b], {}, ["relu"] * 5)
    four, _ = build_problem("mm", [a, b], {}, ["relu"] * 4)
    three_tensors, _ = build_problem("mm", [a, b], {}, [("add", a), ("add", a), ("add", a)])
    assert epilogue_plan(five) is None and epilogue_plan(three_tensors) is None
    assert epilogue_plan(four) == ([1, 1, 1, 1], [0, 0, 0, 0], [0.0] * 4, [])


class _Recorder:
    """Stands in for a compiled kernel: keeps the arguments of each launch."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[int, ...], tuple]] = []

    def __getitem__(self, grid):
        return lambda *args: self.calls.append((grid, args))


def _same(x, y) -> bool:
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return x is y
    if hasattr(x, "block_shape"):  # a TMA descriptor: the same tensor, read the same way
        return x.base is y.base and (x.shape, x.strides, x.block_shape) == (y.shape, y.strides, y.block_shape)
    return x == y


@pytest.mark.parametrize(
    "template, params",
    [("gemm", {"split_k": 2}), ("gemm_tma", {"persistent": True}), ("gemm_tma", {})],
)
def test_a_recorded_launch_takes_each_calls_tensors_and_keeps_none(template, params):
    """The direct launch (the GPU path past Triton's binder): replayed with new tensors, every
    argument is what Triton's own launch would be given, and the record holds no tensor."""

    def tensors():
        return [torch.randn(24), torch.randn(70, 40), torch.randn(24, 40).t()]

    problem, first = build_problem("addmm", tensors(), {"beta": 0.5}, ["relu"])
    tile = {"block_m": 32, "block_n": 32, "block_k": 16, "group_m": 8, "num_warps": 4, "num_stages": 1}
    choice = TritonChoice(ChoiceSpec("triton", template, {**tile, **params}), problem, "ieee", sms=2)

    def sources(inputs):
        out = choice._output(inputs)
        ws = choice._workspace(out)  # split-K's sums and counts: the choice's own, kept between calls
        return inputs, out, ws, (*inputs, out, *ws)

    inputs, out, ws, srcs = sources(first)
    recorders = [_Recorder() for _ in choice._launches(inputs, out, ws)]
    direct = _Direct.record(choice._launches(inputs, out, ws), recorders, srcs)
    kept = [weakref.ref(t) for t in (*inputs, out)]
    del inputs, out, ws, srcs, first
    gc.collect()
    assert not any(ref() is not None for ref in kept), "the record keeps a call's tensor alive"

    inputs, out, ws, srcs = sources(build_problem("addmm", tensors(), {"beta": 0.5}, ["relu"])[1])
    direct.launch(srcs)
    for (kernel, grid, args, meta), recorder in zip(choice._launches(inputs, out, ws), recorders, strict=True):
        [(got_grid, got)] = recorder.calls
        constants = tuple(meta[p.name] for p in kernel.params if p.is_constexpr)
        assert got_grid == (*grid, 1, 1)[:3]
        assert len(got) == len(args) + len(constants)
        assert all(_same(g, w) for g, w in zip(got, (*args, *constants), strict=True))


def test_specs_that_name_no_kernel_are_refused():
    tile = {"block_m": 32, "block_n": 32, "block_k": 16, "group_m": 8, "num_warps": 4, "num_stages": 1}
    mm2, _ = build_problem("mm_plus_mm", [torch.randn(8, 8) for _ in range(4)], {})
    with pytest.raises(ValueError, match="split_k"):
        TritonChoice(ChoiceSpec("triton", "gemm", {**tile, "split_k": 2}), mm2, "ieee")
    mm, _ = build_problem("mm", [torch.randn(8, 8), torch.randn(8, 8)], {})
    with pytest.raises(ValueError, match="persistent"):
        TritonChoice(ChoiceSpec("triton", "gemm", {**tile, "persistent": True}), mm, "ieee")
    with pytest.raises(ValueError, match="subtile"):
        TritonChoice(ChoiceSpec("triton", "gemm", {**tile, "subtile": 2}), mm, "ieee")
    with pytest.raises(ValueError, match="subtile"):
        TritonChoice(ChoiceSpec("triton", "gemm_tma", {**tile, "subtile": 4}), mm, "ieee")  # 8-column slices
    with pytest.raises(ValueError, match="warp_specialize"):
        TritonChoice(ChoiceSpec("triton", "gemm_tma", {**tile, "warp_specialize": True}), mm, "ieee")


def test_deterministic_mode_offers_no_split_k_and_keys_apart():
    """Split-K's atomic sums depend on the order slices finish: not offered, and not served from
    the cache, when torch must be deterministic."""
    from tunesmith_triton.configs import configs_for

    from tunesmith.cache.keys import selection_key

    problem, _ = build_problem("mm", [torch.randn(5, 100), torch.randn(100, 19)], {})
    key = selection_key(problem, torch.device("cpu"), [("triton", None)])
    assert any(c.split_k > 1 for _, c in configs_for(problem, interpreter=True))
    torch.use_deterministic_algorithms(True)
    try:
        assert not any(c.split_k > 1 for _, c in configs_for(problem, interpreter=True))
        assert selection_key(problem, torch.device("cpu"), [("triton", None)]) != key
    finally:
        torch.use_deterministic_algorithms(False)


def test_decode_problems_get_the_narrow_weight_streaming_tiles_first_and_others_do_not(monkeypatch):
    """On a Hopper GPU (its properties stubbed here), a GEMM of few rows is offered the decode
    tiles ahead of the rest, where the cost model's ties keep them; a large one is not."""
    from tunesmith_triton import configs

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(configs, "shared_memory", lambda device: 232448)
    monkeypatch.setattr(configs, "multiprocessors", lambda device: 132)
    weight = torch.randn(1100, 4096, dtype=torch.bfloat16)
    decode, _ = build_problem("mm", [torch.randn(16, 4096, dtype=torch.bfloat16), weight.t()], {})
    offered = configs.configs_for(decode, interpreter=False)
    first = [(c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages) for t, c in offered if t == "gemm"]
    assert first[: len(configs.DECODE_CONFIGS)] == list(configs.DECODE_CONFIGS)
    if configs.TensorDescriptor is not None:
        tma = [c for t, c in offered if t == "gemm_tma"]
        assert (tma[0].block_m, tma[0].block_n, tma[0].block_k) == configs.DECODE_TMA_CONFIGS[0][:3]
    large, _ = build_problem("mm", [torch.randn(512, 4096, dtype=torch.bfloat16), weight.t()], {})
    tiles = {(c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages) for _, c in configs.configs_for(large, False)}
    assert not tiles & set(configs.DECODE_CONFIGS)


def test_configs_of_a_template_share_a_launcher_key_and_the_first_precompile_claims_it(tmp_path):
    """The key of the signature's launcher (``launchers.py``): the same for every config of a
    template on one Problem; another for another layout; claimed once."""
    from tunesmith_triton.launchers import claim, signature_key

    def key(template, params, problem, inputs):
        choice = TritonChoice(ChoiceSpec("triton", template, params), problem, "ieee", sms=2)
        out = choice._output(inputs)
        [(kernel, _, args, _)] = choice._launches(inputs, out, choice._workspace(out))
        return signature_key(kernel, args)

    big = {"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 8, "num_stages": 3}
    addmm, inputs = build_problem("addmm", [torch.randn(24), torch.randn(70, 40), torch.randn(40, 24)], {}, ["relu"])
    mm, mm_inputs = build_problem("mm", [torch.randn(70, 40), torch.randn(40, 24)], {})
    variants = {"gemm": {**big, "split_k": 2}, "gemm_tma": {**big, "persistent": True}}
    for template, other in variants.items():
        keys = {key(template, p, addmm, inputs) for p in (big, other)}
        assert len(keys) == 1
        assert key(template, big, mm, mm_inputs) not in keys
    assert key("gemm", big, addmm, inputs) != key("gemm_tma", big, addmm, inputs)
    first = key("gemm", big, addmm, inputs)
    assert claim(tmp_path, first) and not claim(tmp_path, first) and claim(tmp_path, key("gemm", big, mm, mm_inputs))


def _as_triton_calls(hook, signature):
    """Call Triton's compile hook as Triton 3.6's ``JITFunction._do_compile`` does."""
    return hook(
        key=("k",), repr="k", fn=None, compile={"signature": signature}, is_manual_warmup=True, already_compiled=False
    )


def test_a_signature_is_built_early_once_from_its_compile_and_a_failed_build_is_only_logged(
    tmp_path, monkeypatch, caplog
):
    """``built_early`` on a Triton that builds launchers: around the first compile of a signature,
    Triton's compile hook starts the launcher's build from the signature, once, on a thread,
    joined on leaving; a compile on another thread starts nothing; a hook already installed is
    still called, and is back afterwards. The next compile of that signature builds nothing, a
    failing build is only logged, and on a Triton that builds no launchers nothing happens."""
    import logging

    import triton
    from tunesmith_triton import launchers

    built, order, runtime = [], [], triton.knobs.runtime
    monkeypatch.setattr(launchers, "cache_folder", lambda: tmp_path)
    monkeypatch.setattr(launchers, "build_launcher", lambda sig: built.append((sig, threading.current_thread().name)))
    monkeypatch.setattr(runtime, "jit_cache_hook", lambda **kw: order.append(kw["compile"]["signature"]) or "theirs")
    theirs = runtime.jit_cache_hook
    monkeypatch.setattr(launchers, "compiled_per_signature", lambda: False)
    with launchers.built_early("k", [1]):
        assert runtime.jit_cache_hook is theirs
    monkeypatch.setattr(launchers, "compiled_per_signature", lambda: True)
    with launchers.built_early("k", [1]):
        other = threading.Thread(target=_as_triton_calls, args=(runtime.jit_cache_hook, {"x": "i32"}))
        other.start()
        other.join()
        assert _as_triton_calls(runtime.jit_cache_hook, {"a": "*fp16"}) == "theirs"
        _as_triton_calls(runtime.jit_cache_hook, {"b": "*fp32"})
    assert built == [({"a": "*fp16"}, "tunesmith-launcher")]
    assert order == [{"x": "i32"}, {"a": "*fp16"}, {"b": "*fp32"}] and runtime.jit_cache_hook is theirs
    with launchers.built_early("k", [1]):
        assert runtime.jit_cache_hook is theirs  # claimed already
    monkeypatch.setattr(launchers, "build_launcher", lambda sig: 1 / 0)
    caplog.set_level(logging.DEBUG, logger="tunesmith_triton.launchers")
    with launchers.built_early("k", [2]):
        _as_triton_calls(runtime.jit_cache_hook, {"a": "*fp16"})
    assert "early launcher build failed: division by zero" in caplog.text and len(built) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="builds and loads a launcher on a GPU")
def test_a_precompile_builds_its_launcher_once_on_the_early_thread(tmp_path, monkeypatch):
    """On a Triton that builds launchers (3.6), in an empty cache, the launcher of a new signature
    is built once, by the thread ``built_early`` starts; the kernel's load finds it cached."""
    import triton
    import triton.runtime.build as build
    from tunesmith_triton import launchers

    if not launchers.compiled_per_signature():
        pytest.skip(f"Triton {triton.__version__} builds no launcher per signature")
    monkeypatch.setattr(triton.knobs.cache, "dir", str(tmp_path))
    builds, real = [], build._build
    record = lambda name, *args: builds.append((name, threading.current_thread().name)) or real(name, *args)  # noqa: E731
    monkeypatch.setattr(build, "_build", record)
    with torch.device("cuda"):
        problem, _ = build_problem("addmm", [torch.randn(72), torch.randn(40, 24), torch.randn(24, 72)], {}, ["relu"])
    params = {"block_m": 32, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4, "num_stages": 2}
    TritonChoice(ChoiceSpec("triton", "gemm", params), problem, "ieee", sms=132).precompile()
    assert [b for b in builds if b[0] == "__triton_launcher"] == [("__triton_launcher", "tunesmith-launcher")]


def test_the_interpreter_without_numpy_says_to_install_it():
    script = (
        "import sys, json; sys.modules['numpy'] = None\n"  # as if only the wheels were installed
        "from tunesmith.plugins import get_system\n"
        "print(json.dumps(get_system().records['triton'].error))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=run_env(TRITON_INTERPRET="1"), capture_output=True, text=True, timeout=300
    )
    error = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "needs numpy" in error and "tunesmith-triton[interpret]" in error
