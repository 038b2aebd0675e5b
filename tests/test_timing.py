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
