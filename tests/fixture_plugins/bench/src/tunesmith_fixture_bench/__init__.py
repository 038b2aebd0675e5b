"""Backends that misbehave while being benchmarked: the benchmarker must survive each of them."""
