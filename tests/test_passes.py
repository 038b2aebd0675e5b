"""Pass identity: what enters cache keys and the conformance suite's uuid checks."""

from __future__ import annotations

import functools

from tunesmith.passes import pass_uuid


def scale(graph, factor):
    return factor


def make_pass(factor):
    def run(graph):
        return factor

    return run


class WithUuid:
    uuid = "fixed-1"

    def __call__(self, graph):
        return None


class WithUuidMethod:
    def uuid(self):
        return "method-2"

    def __call__(self, graph):
        return None


def test_declared_uuids_win():
    assert pass_uuid(WithUuid()) == "fixed-1" and pass_uuid(WithUuidMethod()) == "method-2"


def test_plain_functions_hash_their_source_and_closures():
    assert pass_uuid(scale) == pass_uuid(scale) and len(pass_uuid(scale)) == 64
    assert pass_uuid(make_pass(2)) != pass_uuid(make_pass(3))
    assert pass_uuid(make_pass(2)) == pass_uuid(make_pass(2))


def test_partials_differ_by_their_arguments():
    assert pass_uuid(functools.partial(scale, factor=2)) != pass_uuid(functools.partial(scale, factor=3))
    assert pass_uuid(functools.partial(scale, factor=2)) != pass_uuid(functools.partial(make_pass(1)))
