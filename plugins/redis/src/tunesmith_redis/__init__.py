"""tunesmith-redis: a cache layer in a shared Redis, with single-flight locks.

Configure it with ``redis_url`` (``TUNESMITH_REDIS_URL``, e.g. ``redis://cache.internal:6379/0``);
unset, the plugin offers no layer and ``tunesmith plugins`` says so.
"""

from __future__ import annotations

from typing import Any

from tunesmith.plugin import parse_optional_str, parse_seconds, without_password
from tunesmith_hookspecs import PluginStatus, hookimpl
from tunesmith_redis.layer import RedisAuthError, RedisLayer

__all__ = ["RedisAuthError", "RedisLayer"]


@hookimpl
def tunesmith_add_options(options: Any) -> None:
    options.add("redis_url", None, parse_optional_str, "redis://host:port/db of the shared cache; none = no layer")
    options.add(
        "redis_timeout_s",
        0.5,
        lambda v: parse_seconds(v, optional=False),
        "connect and read timeout of each Redis call",
    )
    options.add("redis_ttl_s", None, parse_seconds, "expiry of the entries written to Redis; none = never")


@hookimpl
def tunesmith_plugin_status(options: Any) -> PluginStatus:
    if not options.redis_url:
        return PluginStatus(False, "not configured: set redis_url (TUNESMITH_REDIS_URL) to share results in Redis")
    try:
        _layer(options).ping()
    except RedisAuthError as exc:
        return PluginStatus(False, f"{without_password(options.redis_url)}: {exc}")
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return PluginStatus(False, f"cannot reach {without_password(options.redis_url)}: {type(exc).__name__}: {exc}")
    return PluginStatus(True)


@hookimpl
def tunesmith_cache_layers(options: Any) -> list[RedisLayer]:
    return [_layer(options)] if options.redis_url else []


_layers: dict[tuple[str, float, float | None], RedisLayer] = {}


def _layer(options: Any) -> RedisLayer:
    """One layer (one connection pool) per configuration, kept for the process."""
    config = (options.redis_url, options.redis_timeout_s, options.redis_ttl_s)
    if config not in _layers:
        _layers[config] = RedisLayer(*config)
    return _layers[config]
