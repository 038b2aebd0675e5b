"""The plugin conformance suite: ``pytest --pyargs tunesmith.conformance --tunesmith-plugin NAME``.

It loads the named plugin alone (with the aten reference), works out which kinds of plugin it is
from the hooks it implements, and runs the matching checks: ``test_backend`` (every choice on a
matrix of problems against a float64 reference, in crash-isolated worker processes),
``test_cache_layer`` and ``test_graph_pass``. See docs/conformance.md.
"""
