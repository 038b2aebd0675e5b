"""Attention in compiled graphs: found in the Dynamo graph, before AOTAutograd, and tuned there.

Each attention of the graph becomes one call of its tuned kernel, which AOTAutograd then traces,
forward and backward: a ``F.scaled_dot_product_attention`` call (before torch picks its backend on
fake tensors), or the matmul-softmax-matmul pattern that hand-written attention and the math path
leave (with a scale, an added mask or bias, fp32 casts around the softmax, and dropout that does
nothing). A mask computed from shapes alone is evaluated when compiling: one that attends
everywhere is dropped, torch's causal triangle becomes ``is_causal``, anything else is passed
on; a mask that depends on the graph's inputs (padding, a learned bias) is always passed on.
Sites with symbolic shapes, dropout, or a mask that needs its gradient are left to torch.
"""

from __future__ import annotations

import logging
import numbers
import operator
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch._subclasses.fake_tensor import unset_fake_temporarily

from tunesmith import hooks
from tunesmith.attention import OP
from tunesmith.compile.swap import Background, select_or_queue
from tunesmith.config import Options
from tunesmith.counting import bump
from tunesmith.errors import NoValidChoicesError, ProblemError
from tunesmith.problem import build_problem, is_empty, tensor_like, tensor_meta
from tunesmith.selection import Selection
from tunesmith_hookspecs import ChoiceSpec

log = logging.getLogger(__name__)

_SDPA = F.scaled_dot_product_attention
_MATMULS = (torch.matmul, operator.matmul)
_SOFTMAXES = (torch.softmax, F.softmax)
_ADDS = (operator.add, torch.add, operator.iadd)
_SCALES = (operator.mul, operator.truediv, torch.mul, torch.div)
#: what an attention runs until it is tuned in the background: torch's own pick, through ATen
PLACEHOLDER = ChoiceSpec(hooks.BASELINE_BACKEND, "sdpa", {"backend": "default"})
#: an additive mask value at or below this is a masked-out position (exp of it is 0 in float32)
MASKED = -1e4


@attrs.define
class Site:
    """One attention found in the graph: its tensors' nodes, scalars, and the nodes it replaces."""

    output: fx.Node
    q: fx.Node
    k: fx.Node
    v: fx.Node
    mask: Any = None  # a node, or None
    is_causal: bool = False
    scale: float | None = None
    replaced: list[fx.Node] = attrs.field(factory=list)


# --- the kernels the rewritten graph calls ---

_kernels: dict[str, Callable[..., torch.Tensor]] = {}


def call(key: str, *tensors: torch.Tensor) -> torch.Tensor:
    """What a rewritten graph calls: the kernel selected for its attention (traced by AOTAutograd)."""
    return _kernels[key](*tensors)


def clear() -> None:
    _kernels.clear()


# --- finding attention ---


def _val(node: Any) -> Any:
    return node.meta.get("example_value", node.meta.get("val")) if isinstance(node, fx.Node) else node


def _calls(node: Any, functions: Sequence[Any] = (), methods: Sequence[str] = ()) -> bool:
    if not isinstance(node, fx.Node):
        return False
    if node.op == "call_function":
        return any(node.target is f for f in functions)
    return node.op == "call_method" and node.target in methods


def _arg(node: fx.Node, index: int, name: str, default: Any = None) -> Any:
    return node.kwargs[name] if name in node.kwargs else node.args[index] if len(node.args) > index else default


def _sdpa_site(node: fx.Node) -> Site | None:
    if not _calls(node, (_SDPA,)):
        return None
    dropout = _arg(node, 4, "dropout_p", 0.0)
    if dropout != 0:
        return None
    q, k, v = (_arg(node, i, n) for i, n in enumerate(("query", "key", "value")))
    mask, causal = _arg(node, 3, "attn_mask"), _arg(node, 5, "is_causal", False)
    scale = _arg(node, 6, "scale")
    if not isinstance(causal, bool) or not (scale is None or isinstance(scale, numbers.Real)):
        return None
    return Site(node, q, k, v, mask, causal, None if scale is None else float(scale), [node])


def _through_casts(node: Any, chain: list[fx.Node]) -> Any:
    """Walk up past dtype casts (``.float()``, ``.to(dtype)``, ``.type_as(x)``)."""
    while _calls(node, (), ("float", "to", "type_as", "half", "bfloat16")) and _cast_only(node):
        chain.append(node)
        node = node.args[0]
    return node


def _cast_only(node: fx.Node) -> bool:
    out, src = _val(node), _val(node.args[0])
    return isinstance(out, torch.Tensor) and isinstance(src, torch.Tensor) and out.shape == src.shape


def _dropout_off(node: Any) -> bool:
    if not _calls(node, (F.dropout, torch.dropout)):
        return False
    p, training = _arg(node, 1, "p", 0.5), _arg(node, 2, "training", True)
    return p == 0 or training is False


def _transposed_key(node: Any) -> Any:
    """The key under ``k.transpose(-2, -1)`` (or of dims 2 and 3, or ``permute(0, 1, 3, 2)``)."""
    if _calls(node, (torch.transpose,), ("transpose",)):
        dims = {d % 4 for d in node.args[1:3] if isinstance(d, int)}
        return node.args[0] if dims == {2, 3} else None
    if _calls(node, (), ("permute",)):
        order = node.args[1] if len(node.args) == 2 and isinstance(node.args[1], list | tuple) else node.args[1:]
        return node.args[0] if tuple(order) == (0, 1, 3, 2) else None
    return None


def _scale_of(node: fx.Node, gm: fx.GraphModule) -> tuple[Any, float] | None:
    """(the scaled operand, the factor) of ``x * c``, ``x / c`` (c a number, or a constant 0-d tensor)."""
    if not _calls(node, _SCALES, ("mul", "div")):
        return None
    x, c = node.args[:2]
    if isinstance(c, fx.Node):
        value = constant(c, gm)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            return None
        c = float(value.item())
    if isinstance(c, bool) or not isinstance(c, numbers.Real) or c == 0:
        return None
    divides = node.target in (operator.truediv, torch.div, "div")
    return x, (1.0 / c if divides else float(c))


def _pattern_site(node: fx.Node, gm: fx.GraphModule) -> Site | None:
    """``softmax(q @ k.T * scale + bias) @ v``, read backwards from its last product."""
    if not _calls(node, _MATMULS, ("matmul",)) or len(node.args) != 2:
        return None
    probs, v = node.args
    chain: list[fx.Node] = []
    while _dropout_off(probs):
        chain.append(probs)
        probs = probs.args[0]
    probs = _through_casts(probs, chain)
    if not _calls(probs, _SOFTMAXES, ("softmax",)):
        return None
    dim = _arg(probs, 1, "dim")
    if dim not in (-1, 3):
        return None
    chain.append(probs)
    scores = _through_casts(probs.args[0], chain)
    mask = None
    if _calls(scores, _ADDS, ("add", "add_")) and len(scores.args) == 2 and "alpha" not in scores.kwargs:
        chain.append(scores)
        a, b = scores.args
        scores, mask = (a, b) if _calls(a, (*_MATMULS, *_SCALES), ("matmul", "mul", "div")) else (b, a)
        scores = _through_casts(scores, chain)
    scale = 1.0
    scaled = _scale_of(scores, gm) if isinstance(scores, fx.Node) else None
    if scaled is not None:
        chain.append(scores)
        scores, scale = scaled
    if not _calls(scores, _MATMULS, ("matmul",)) or len(scores.args) != 2:
        return None
    chain.append(scores)
    q, kt = scores.args
    k = _transposed_key(kt)
    if k is None:
        return None
    if isinstance(kt, fx.Node) and len(kt.users) == 1:
        chain.append(kt)
    inside = {node, *chain}
    if any(not set(n.users) <= inside for n in chain):
        return None  # an intermediate is used elsewhere (attention weights returned, say)
    out, qv = _val(node), _val(q)
    if not isinstance(out, torch.Tensor) or not isinstance(qv, torch.Tensor) or out.dtype != qv.dtype:
        return None
    return Site(node, q, k, v, mask, False, scale, [node, *chain])


def find(gm: fx.GraphModule) -> list[Site]:
    """Every attention of a Dynamo graph, in graph order."""
    sites = []
    taken: set[fx.Node] = set()
    for node in gm.graph.nodes:
        site = _sdpa_site(node) or _pattern_site(node, gm)
        if site is not None and not taken & set(site.replaced):
            taken |= set(site.replaced)
            sites.append(site)
    return sites


# --- masks computed from shapes alone ---


#: calls whose value is not a function of their arguments alone (random draws), never evaluated
_RANDOM = frozenset(
    [
        "rand",
        "randn",
        "randint",
        "rand_like",
        "randn_like",
        "randint_like",
        "randperm",
        "bernoulli",
        "multinomial",
        "normal",
        "poisson",
        "dropout",
    ]
)


def _evaluable(node: fx.Node, gm: fx.GraphModule) -> bool:
    """A constant, or a call that computes its value from its arguments alone: not a graph input,
    parameter or buffer (each can change between steps), not a random draw, not an in-place update."""
    if node.op == "get_attr":  # a GraphModule keeps a tensor constant as a buffer too: kept, never wrong
        return not _is_state(gm, str(node.target))
    if node.op not in ("call_function", "call_method"):
        return False
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    in_place = (name.endswith("_") and not name.endswith("__")) or name in ("iadd", "setitem", "__setitem__")
    return name not in _RANDOM and not in_place


def _is_state(gm: fx.GraphModule, target: str) -> bool:
    for get in (gm.get_parameter, gm.get_buffer):
        try:
            get(target)
            return True
        except AttributeError:
            continue
    return False


def constant(node: fx.Node, gm: fx.GraphModule) -> Any:
    """The value of ``node`` when it depends on no graph input, parameter or buffer (shapes and
    constants alone), computed now; None when it does, or cannot be computed here (symbolic
    sizes, random draws, in-place updates)."""
    order: list[fx.Node] = []
    seen: set[fx.Node] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if not _evaluable(n, gm):
            return None
        order.append(n)
        stack.extend(n.all_input_nodes)
    values: dict[fx.Node, Any] = {}
    try:
        with unset_fake_temporarily(), torch.no_grad():
            for n in sorted(order, key=_position(gm)):
                args = fx.map_arg(n.args, values.__getitem__)
                kwargs = fx.map_arg(n.kwargs, values.__getitem__)
                if any(isinstance(a, torch.SymInt | torch.SymFloat | torch.SymBool) for a in _flat(args, kwargs)):
                    return None
                if n.op == "get_attr":
                    values[n] = operator.attrgetter(str(n.target))(gm)
                elif n.op == "call_method":
                    values[n] = getattr(args[0], str(n.target))(*args[1:], **kwargs)
                else:
                    values[n] = n.target(*args, **kwargs)  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001 - a value that cannot be computed here stays in the graph
        log.debug("attention mask %s not evaluated: %s", node.name, exc)
        return None
    return values[node]


def _position(gm: fx.GraphModule) -> Callable[[fx.Node], int]:
    index = {n: i for i, n in enumerate(gm.graph.nodes)}
    return index.__getitem__


def _flat(args: Any, kwargs: Any) -> list[Any]:
    out: list[Any] = []
    fx.node.map_aggregate((args, kwargs), out.append)
    return out


def mask_kind(mask: torch.Tensor, q_len: int, kv_len: int) -> str:
    """What a known mask does: ``none`` (attends everywhere), ``causal`` (torch's top-left lower
    triangle), or ``other``."""
    if mask.dtype == torch.bool:
        attends = mask
    elif mask.is_floating_point():
        if not bool(((mask == 0) | (mask <= MASKED)).all()):
            return "other"
        attends = mask == 0
    else:
        return "other"
    if bool(attends.all()):
        return "none"
    triangle = torch.ones(q_len, kv_len, dtype=torch.bool, device=mask.device).tril()
    return "causal" if bool((attends == triangle).all()) else "other"


# --- the stage ---


def rewrite(gm: fx.GraphModule, options: Options, background: Background | None = None) -> int:
    """Tune every attention of ``gm`` whose shapes are known, and call its kernel instead; returns
    how many were rewritten. With ``background`` (background tuning), one the caches do not know calls
    torch's own SDPA (``PLACEHOLDER``) until it is tuned."""
    done = 0
    for site in find(gm):
        try:
            done += _rewrite_site(gm, site, options, background)
        except ProblemError as exc:
            log.debug("attention at %s left to torch: %s", site.output.name, exc)
        except NoValidChoicesError as exc:  # the graph still compiles, with torch's own attention
            log.warning("tunesmith: attention at %s left to torch: %s", site.output.name, exc)
    if done:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return done


def _rewrite_site(gm: fx.GraphModule, site: Site, options: Options, background: Background | None) -> int:
    q, k, v = (_val(n) for n in (site.q, site.k, site.v))
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (q, k, v)):
        return 0
    if any(_symbolic(t) for t in (q, k, v)):
        return 0
    mask, causal = site.mask, site.is_causal
    if isinstance(mask, fx.Node):
        value = constant(mask, gm)
        kind = "other"
        if isinstance(value, torch.Tensor) and value.dim() <= 4:
            kind = mask_kind(value.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2]), q.shape[2], k.shape[2])
        if kind == "none":
            mask = None
            bump("attention_mask_dropped")
        elif kind == "causal":
            mask, causal = None, True
            bump("attention_mask_causal")
    elif mask is not None:
        return 0
    maskv = _val(mask) if mask is not None else None
    if maskv is not None and (not isinstance(maskv, torch.Tensor) or _symbolic(maskv)):
        return 0
    with unset_fake_temporarily():
        metas = [tensor_meta(t) for t in (q, k, v, *([maskv] if maskv is not None else []))]
        tensors = [tensor_like(m, q.device) for m in metas]
        out = _val(site.output)
        needs = isinstance(out, torch.Tensor) and out.requires_grad  # False under no_grad
        scalars: dict[str, Any] = {
            "is_causal": causal,
            "scale": site.scale,
            "grad": needs and any(t.requires_grad for t in (q, k, v)),
        }
        if needs and maskv is not None and maskv.requires_grad:
            raise ProblemError("its mask needs a gradient")
        problem, inputs = build_problem(OP, tensors, scalars)
        if is_empty(problem):
            return 0
        chosen = select_or_queue(problem, inputs, options, background, PLACEHOLDER)
        spec = chosen.spec
        kernel = chosen.kernel if isinstance(chosen, Selection) else chosen.kernel()
    key = f"{problem.key()}:{spec}"  # the same in every process: AOTAutograd's cache keys on it
    _kernels[key] = kernel
    args = [site.q, site.k, site.v, *([mask] if mask is not None else [])]
    if maskv is not None and maskv.dim() < 4:
        with gm.graph.inserting_before(site.output):
            shape = (1,) * (4 - maskv.dim()) + tuple(maskv.shape)
            args[3] = gm.graph.call_method("reshape", (mask, shape))
    with gm.graph.inserting_before(site.output):
        node = gm.graph.call_function(call, (key, *args))
    node.meta["example_value"] = _val(site.output)
    site.output.replace_all_uses_with(node)
    for dead in site.replaced:
        if not dead.users:
            gm.graph.erase_node(dead)
    bump("attention_rewritten")
    log.info("attention %s: %s", site.output.name, spec)
    return 1


def _symbolic(t: torch.Tensor) -> bool:
    return any(not isinstance(x, int) for x in (*t.shape, *t.stride(), t.storage_offset()))


__all__ = ["MASKED", "PLACEHOLDER", "Site", "call", "clear", "constant", "find", "mask_kind", "rewrite"]
