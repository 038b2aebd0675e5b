"""tunesmith-memcache: a cache layer over a memcached pool, with single-flight locks.

Configure it with ``memcache_servers`` (``TUNESMITH_MEMCACHE_SERVERS``, ``host:port,host:port``;
keys are spread over the servers); unset, the plugin offers no layer and ``tunesmith plugins``
says so.
"""

from __future__ import annotations

import os
from typing import Any

from tunesmith.plugin import parse_seconds
from tunesmith_hookspecs import PluginStatus, hookimpl
from tunesmith_memcache.layer import MemcacheLayer, parse_servers

__all__ = ["MemcacheLayer"]


@hookimpl
def tunesmith_add_options(options: Any) -> None:
    options.add(
        "memcache_servers", None, parse_servers, "host:port,host:port of the shared memcached pool; none = no layer"
    )
    options.add(
        "memcache_timeout_s",
        0.5,
        lambda v: parse_seconds(v, optional=False),
        "connect and read timeout of each memcached call",
    )
    options.add("memcache_ttl_s", None, parse_seconds, "expiry of the entries written to memcached; none = never")


@hookimpl
def tunesmith_plugin_status(options: Any) -> PluginStatus:
    if not options.memcache_servers:
        return PluginStatus(
            False, "not configured: set memcache_servers (TUNESMITH_MEMCACHE_SERVERS) to share results in memcached"
        )
    layer = _layer(options)
    down = []
    for server, client in layer.clients.items():
        try:
            client.version()
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            down.append(f"{server} ({type(exc).__name__}: {exc})")
    if down:
        return PluginStatus(False, f"cannot reach {len(down)} of {len(layer.clients)} servers: {', '.join(down)}")
    return PluginStatus(True)


@hookimpl
def tunesmith_cache_layers(options: Any) -> list[MemcacheLayer]:
    return [_layer(options)] if options.memcache_servers else []


_layers: dict[tuple[int, Any], MemcacheLayer] = {}


def _layer(options: Any) -> MemcacheLayer:
    """One layer (one connection pool per server) per configuration, kept for the process; a
    forked child makes its own (pymemcache's sockets must not be shared with the parent)."""
    config = (options.memcache_servers, options.memcache_timeout_s, options.memcache_ttl_s)
    if (os.getpid(), config) not in _layers:
        _layers[os.getpid(), config] = MemcacheLayer(*config)
    return _layers[os.getpid(), config]
