"""Timing and ranking: the early stop, the noise measure, and ties decided by order within the noise."""

from __future__ import annotations

import time

import pytest
import torch

from tunesmith.bench.timing import PROBE_REPEATS, noise, time_callable
from tunesmith.selection import ranked
from tunesmith_hookspecs import ChoiceSpec, Timing

A, B, C = ChoiceSpec("aten", "a"), ChoiceSpec("other", "b"), ChoiceSpec("other", "c")


def test_a_choice_far_slower_than_the_best_stops_after_its_probe_repeats():
    def sleep() -> None:
        time.sleep(0.002)

    cpu = torch.device("cpu")
    assert time_callable(sleep, cpu, warmup=0, repeat=8, give_up_ms=0.5).samples == PROBE_REPEATS
    full = time_callable(sleep, cpu, warmup=0, repeat=8, give_up_ms=100.0)
    assert full.samples == 8 and full.ms >= 2.0
    assert time_callable(sleep, cpu, warmup=0, repeat=8).samples == 8


def test_noise_is_the_interquartile_range_over_the_median():
    assert noise([1.0]) == 0.0
    assert noise([2.0, 2.0, 2.0, 2.0]) == 0.0
    assert noise([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx((4.0 - 2.0) / 3.0)


def test_times_within_the_tolerance_tie_and_the_earlier_choice_wins():
    assert ranked([Timing(A, 1.005), Timing(B, 1.0)], 0.01, 10) == [0, 1]
    assert ranked([Timing(A, 1.05), Timing(B, 1.0)], 0.01, 10) == [1, 0]
    assert ranked([Timing(B, 1.0), Timing(A, 1.005)], 0.01, 10) == [0, 1]


def test_measured_noise_widens_the_tie_by_twice_the_standard_error_of_the_difference():
    # IQR/median 0.1 over 10 samples: 0.93 * 0.1 / sqrt(10) = 2.9% standard error, a 5.9% margin
    # (capped at MAX_NOISE_TIE, 5%)
    assert ranked([Timing(A, 1.04), Timing(B, 1.0, noise=0.1)], 0.01, 10) == [0, 1]
    assert ranked([Timing(A, 1.04, noise=0.1), Timing(B, 1.0)], 0.01, 10) == [0, 1]
    assert ranked([Timing(A, 1.06, noise=0.1), Timing(B, 1.0)], 0.01, 10) == [1, 0]
    # a gap like decode_m16's on the H100 (4.7%) with both spreads at 5%: margin 2 * 0.93 *
    # 0.0707 / sqrt(10) = 4.2%, not a tie (the old margin, the larger spread, made it one); from
    # 3 samples the margin is 5% and it is a tie
    assert ranked([Timing(A, 1.047, noise=0.05), Timing(B, 1.0, noise=0.05)], 0.01, 10) == [1, 0]
    assert ranked([Timing(A, 1.047, noise=0.05), Timing(B, 1.0, noise=0.05)], 0.01, 3) == [0, 1]
    # more samples, a narrower margin, down to tie_tolerance
    assert ranked([Timing(A, 1.02, noise=0.05), Timing(B, 1.0, noise=0.05)], 0.01, 100) == [1, 0]
    assert ranked([Timing(A, 1.009, noise=0.05), Timing(B, 1.0, noise=0.05)], 0.01, 1000) == [0, 1]
    # Noise widens a tie by at most MAX_NOISE_TIE (5%): a measurement that noisy says little.
    assert ranked([Timing(A, 1.08, noise=0.5), Timing(B, 1.0)], 0.01, 10) == [1, 0]


def test_failed_choices_are_not_ranked_and_the_rest_follow_in_order():
    timings = [Timing(A, float("inf"), "boom"), Timing(B, 2.0), Timing(C, 1.0)]
    assert ranked(timings, 0.01, 10) == [2, 1]


def test_off_the_gpu_a_choice_reads_one_input_set():
    from tunesmith.bench.inprocess import input_sets
    from tunesmith.config import Options
    from tunesmith.problem import build_problem

    a, b = torch.randn(8, 4), torch.randn(4, 8)
    problem, _ = build_problem("mm", [a, b], {})
    sets = input_sets(problem, [a, b], Options())
    assert len(sets) == 1 and sets[0][0] is a and sets[0][1] is b


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs: run by scripts/gpu_tests.sh")


@needs_gpu
def test_on_the_gpu_copies_of_the_inputs_fill_twice_the_l2_cache_with_their_layout():
    from tunesmith.bench.timing import FLUSH_FACTOR, MAX_INPUT_COPIES, _l2_bytes, rotating_inputs
    from tunesmith.problem import build_problem

    a = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16).t()  # a transposed operand
    problem, _ = build_problem("mm", [a, b], {})
    sets = rotating_inputs(problem, [a, b])
    per_set = a.nbytes + b.nbytes
    assert sets[0] == (a, b)
    assert len(sets) == min(MAX_INPUT_COPIES, -(-FLUSH_FACTOR * _l2_bytes(a.device) // per_set))
    for x, y in sets[1:]:
        assert x.stride() == a.stride() and y.stride() == b.stride() and y.dtype == b.dtype
        assert not torch.equal(x, a) and x.ne(0).float().mean() > 0.99  # random, not zeros


@needs_gpu
def test_on_the_gpu_every_input_set_holds_the_callers_mask():
    from tunesmith.bench.timing import rotating_inputs
    from tunesmith.problem import build_problem

    q, k = torch.randn(2, 4, 64, 64, device="cuda"), torch.randn(2, 4, 256, 64, device="cuda")
    mask = (torch.arange(256, device="cuda") < 100)[None, None, None, :].expand(2, 1, 64, 256)
    problem, inputs = build_problem("attention", [q, k, k, mask], {})
    sets = rotating_inputs(problem, inputs)
    assert len(sets) > 1 and all(s[3] is inputs[3] for s in sets)
    assert all(not torch.equal(s[0], inputs[0]) for s in sets[1:])  # the rest are random copies


def test_boolean_inputs_travel_to_the_worker_as_bits_with_their_layout():
    """``tunesmith.bench.masks``: the storage each boolean view reaches, expanded, offset or
    strided, comes back equal, with its strides and offset; other inputs do not travel."""
    from tunesmith.bench import masks
    from tunesmith.problem import tensor_meta

    expanded = (torch.arange(77) < 30)[None, None, None, :].expand(3, 1, 5, 77)
    offset = (torch.rand(200) > 0.3)[7:73].view(2, 3, 11)
    strided = (torch.rand(4, 9, 13) > 0.5)[:, ::2, 1:]
    given = [torch.randn(2, 2), expanded, offset, strided]
    metas = [tensor_meta(t) for t in given]
    values = masks.payload(metas, given)
    assert sorted(values) == ["1", "2", "3"] and all(isinstance(v, str) for v in values.values())
    got = [torch.zeros(1) for _ in given]
    masks.apply(metas, got, values, torch.device("cpu"))
    for want, back in zip(given[1:], got[1:], strict=True):
        assert torch.equal(back, want) and back.stride() == want.stride()
        assert back.storage_offset() == want.storage_offset()


@needs_gpu
def test_a_kernel_timed_in_a_graph_takes_what_its_calls_take_back_to_back():
    from tunesmith.bench.timing import time_in_graph

    device = torch.device("cuda")
    sets = [(torch.randn(4096, 4096, device=device), torch.randn(4096, 4096, device=device)) for _ in range(2)]
    calls = [lambda a=a, b=b: torch.mm(a, b) for a, b in sets]
    timed = time_in_graph(calls, device, warmup=1, repeat=5)
    assert timed is not None and timed.samples == 5
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        for call in calls:
            call()
    end.record()
    end.synchronize()
    back_to_back = start.elapsed_time(end) / 20
    assert 0.8 < timed.ms / back_to_back < 1.2, (timed.ms, back_to_back)


@needs_gpu
def test_calls_that_cannot_be_captured_are_not_timed_in_a_graph():
    from tunesmith.bench.timing import time_in_graph

    x = torch.randn(64, device="cuda")
    assert time_in_graph([lambda: x.sum().item()], x.device, warmup=1, repeat=3) is None
    assert torch.cuda.is_current_stream_capturing() is False
    # the process goes on: random inputs of the next Problem, a kernel timed in a graph
    a, b = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    assert time_in_graph([lambda: torch.mm(a, b)], a.device, warmup=1, repeat=3) is not None
