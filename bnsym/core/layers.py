"""Architectures as values: the layers a network description is built from, shared by theory and simulator.

A network is a :class:`Serial` of layers, each a frozen value (the premise "network" of the book's flow, beside
the activation): :class:`Dense`, :class:`BatchNorm`, :class:`LayerNorm`, :class:`RMSNorm`, :class:`Activation` and
:class:`Residual`, composed with :func:`serial` and :func:`repeat`. The infinite-width theory
(:mod:`bnsym.arch`) and the finite torch twin (:mod:`bnsym.sim.arch`) read the same value; the conventions
they share (a contract) are stated in :mod:`bnsym.arch`.

:func:`parse_architecture` reads the command line's spec strings (:data:`~bnsym.core.grammar.SPEC_GRAMMAR`)::

    dense,bn,relu*20                       20 blocks of Dense, BatchNorm, relu
    dense,res(bn,relu,dense)*50            a Dense, then 50 pre-activation residual blocks
    dense(2,0.1),relu,ln                   weight_var 2, bias_var 0.1; LayerNorm after the activation
    dense,tanh,rms                         RMSNorm (the uncentred LayerNorm) after the activation
    dense,res(alpha=0.2,relu,dense)*10     SkipInit-style alpha
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Union

from .activations import Activation as Phi
from .activations import parse_activation
from .grammar import SPEC_GRAMMAR  # noqa: F401 (public here too)
from .validation import (
    check_choice,
    check_eps,
    check_flag,
    check_number,
    check_variance,
    check_whole_number,
    shown,
)

MODES = ("train", "eval")
STATISTICS = ("batch", "population", "reference")  # BatchNorm's statistics: MODE_OF names their torch mode
MODE_OF = {"batch": "train", "population": "eval", "reference": "eval"}
INITS = ("gaussian", "orthogonal", "looks_linear", "uniform", "uniform_positive")
MAX_REPEATS = 10_000  # a description longer than this is a typo, not a network
MAX_SERIAL = 10**6  # top-level layers of one Serial: repeats of repeats multiply, and each is held in a list
MAX_NESTING = 100  # parentheses and res( ) inside each other in a spec: the reader recurses once per level


@dataclass(frozen=True)
class Kind:
    """A layer kind as the spec grammar spells it: its ``name`` ("dense"; "PHI" for an activation, spelled by its
    phi), its ``options`` in positional order, a one-line ``summary`` and an ``example`` spec setting every option.

    The kind's other parts live in tables keyed by its class: its help line in
    :data:`~bnsym.core.grammar.SPEC_GRAMMAR`, its infinite-width map (``bnsym.arch.network.theory_map``, or a
    stated reason in ``bnsym.arch.network.NO_LIMIT``), its twin module (``bnsym.sim.arch.twin_module``) and its
    torch reader (``bnsym.sim.arch.READERS``, or a stated reason in ``bnsym.sim.arch.NOT_READABLE``);
    ``tests/test_layer_kinds.py`` holds every kind complete."""

    name: str
    options: tuple[str, ...]
    summary: str
    example: str


#: Every layer kind by its class, in the order they are declared (:func:`layer_kind`).
KINDS: dict[type, Kind] = {}


def layer_kind(name: str, options: tuple[str, ...], summary: str, example: str):
    """Declare a layer class as a kind (:class:`Kind`): a spec name, options, summary and example, once."""

    def declare(cls: type) -> type:
        KINDS[cls] = Kind(name, options, summary, example)
        return cls

    return declare


def _option_number(values: dict[str, str], key: str, default: float) -> float:
    """The option ``key`` of a spec as a number (``default`` when not given)."""
    text = values.get(key)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{key} must be a number, got {text!r}") from None


def _option_flag(values: dict[str, str], key: str) -> bool:
    """The option ``key`` of a spec, true or false (true when not given)."""
    text = values.get(key, "true").lower()
    if text not in ("true", "false"):
        raise ValueError(f"{key} must be true or false, got {values[key]!r}")
    return text == "true"


@layer_kind("dense", ("weight_var", "bias_var", "init"), "h = sqrt(weight_var) W x / sqrt(n_in) + sqrt(bias_var) b",
            "dense(2,0.1,init=orthogonal)")
@dataclass(frozen=True)
class Dense:
    """h = sqrt(weight_var) W x / sqrt(n_in) + sqrt(bias_var) b, the entries of W and b of variance 1:

    * ``init="gaussian"``: standard normal;
    * ``"orthogonal"``: W = sqrt(max(n_out, n_in)) Q, Q a Haar-random matrix with orthonormal columns (or rows),
      b standard normal; its infinite-width kernels and gradients are the Gaussian ones (the same entry variance);
    * ``"looks_linear"`` (Balduzzi et al. 2017; Philipp et al.'s intermediate layers): neurons in pairs (2i, 2i + 1),
      W = [[Q', -Q'], [-Q', Q']] on each pair of inputs and pair of outputs, Q' = sqrt(max(n_out, n_in) / 2) Q, and
      b = (b', -b') per pair: each pair holds (h, -h), so relu(h) - relu(-h) = h makes a relu network linear at
      initialisation; widths must be even. The theory has no map for it (its neurons are not independent);
    * ``"uniform"``: W and b uniform on [-sqrt(3), sqrt(3)] (nn.Linear's default is ``Dense(1/3, 1/(3 n_in),
      "uniform")``); each preactivation sums n_in independent terms of the same variance as the Gaussian ones, so by
      the central limit theorem its infinite-width limit is the Gaussian one;
    * ``"uniform_positive"`` (Daneshmand et al.'s asymmetric init, their Fig. 5): W uniform on [0, 2 sqrt(3)] (mean
      sqrt(3), variance 1), b as for ``"uniform"``. The theory refuses it: the mean of the weights adds
      sqrt(3 weight_var n_in) times the mean of the input features to every neuron, a common term that grows like
      sqrt(n_in) rather than a per-neuron Gaussian of fixed variance.
    """

    weight_var: float = 1.0
    bias_var: float = 0.0
    init: str = "gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight_var", check_variance(self.weight_var, "weight_var", positive=True))
        object.__setattr__(self, "bias_var", check_variance(self.bias_var, "bias_var", positive=False))
        check_choice(self.init, "Dense init", INITS)

    def spec_options(self) -> list[str]:
        """The options ``describe`` writes (none at the defaults)."""
        default = (self.weight_var, self.bias_var) == (1, 0)
        variances = [] if default else [f"{self.weight_var:g}", f"{self.bias_var:g}"]
        return variances + ([] if self.init == "gaussian" else [f"init={self.init}"])

    @classmethod
    def from_spec(cls, values: dict[str, str]) -> Dense:
        return cls(_option_number(values, "weight_var", 1.0), _option_number(values, "bias_var", 0.0),
                   values.get("init", "gaussian"))


def _affine(affine: object) -> tuple[float, float] | None:
    """A norm layer's affine map (scale, shift), two finite numbers, or None (none)."""
    if affine is None:
        return None
    if not (isinstance(affine, (tuple, list)) and len(affine) == 2):
        raise ValueError(f"affine must be None or two numbers (scale, shift), got {shown(affine)}")
    scale, shift = (check_number(value, f"the affine {name}") for value, name in zip(affine, ("scale", "shift")))
    if not (math.isfinite(scale) and math.isfinite(shift)):
        raise ValueError(f"the affine scale and shift must be finite, got {shown(affine)}")
    return scale, shift


def _affine_options(affine: tuple[float, float] | None) -> list[str]:
    return [] if affine is None else [f"scale={affine[0]:g}", f"shift={affine[1]:g}"]


def _affine_from_spec(values: dict[str, str]) -> tuple[float, float] | None:
    if "scale" not in values and "shift" not in values:
        return None
    return _option_number(values, "scale", 1.0), _option_number(values, "shift", 0.0)


@layer_kind("bn", ("eps", "mode", "centre", "scale", "shift", "statistics"),
            "batch norm per neuron, over the batch (train), the population or a reference set (eval)",
            "bn(eps=0.001,mode=eval,centre=false,scale=0.5,shift=0.1)")
@dataclass(frozen=True)
class BatchNorm:
    """Batch norm per neuron: y = scale (x - m) / sqrt(v + eps) + shift.

    * ``statistics``: "batch" (train mode: m, v the mean and biased variance of the neuron over the batch,
      differentiated through), or one of the two eval meanings, which bnsym keeps apart by name:

      - "population": m, v the mean and variance of **all n x B entries** of the layer's input, constants for the
        gradient: the network at initialisation, whose neurons are exchangeable (its infinite-width limit
        :func:`~bnsym.arch.derive_eval_batch_norm`);
      - "reference": m, v **per neuron**, over a reference set (a trained network's eval mode, the role of torch's
        running statistics; Yang et al.'s trainability runs evaluate with the training set's): the twin takes the
        reference inputs beside the inputs (:meth:`bnsym.sim.arch.ArchNetwork.layer_outputs`). The theory refuses
        it (its limit depends on the reference set's own Gram, which a description does not hold).

      ``mode`` is the torch name of the choice: "train" is "batch", "eval" is "population", the eval meaning a
      description needs where one is enough; give either (mode="eval" with statistics="reference" agrees).
    * ``centre``: False leaves out m (x / sqrt(mean x^2 + eps)).
    * ``affine``: None (no affine map) or constants (scale, shift), the same for every neuron; not parameters (the
      tangent kernel of :mod:`bnsym.arch` trains the Dense layers only).
    """

    eps: float = 0.0
    mode: str | None = None
    centre: bool = True
    affine: tuple[float, float] | None = None
    statistics: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "eps", check_eps(self.eps))
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"BatchNorm mode must be 'train' or 'eval', got {shown(self.mode)}")
        if self.statistics is not None:
            check_choice(self.statistics, "BatchNorm statistics", STATISTICS)
        by_mode = None if self.mode is None else STATISTICS[MODES.index(self.mode)]
        if None not in (by_mode, self.statistics) and self.mode != MODE_OF[self.statistics]:
            raise ValueError(f"BatchNorm mode={self.mode!r} means statistics={by_mode!r}, but statistics="
                             f"{self.statistics!r} is given: give one of them")
        statistics = self.statistics or by_mode or "batch"
        object.__setattr__(self, "statistics", statistics)
        object.__setattr__(self, "mode", MODE_OF[statistics])
        object.__setattr__(self, "centre", check_flag(self.centre, "BatchNorm centre"))
        object.__setattr__(self, "affine", _affine(self.affine))

    def spec_options(self) -> list[str]:
        statistics = {"batch": [], "population": ["mode=eval"], "reference": ["statistics=reference"]}
        return (([f"eps={self.eps:g}"] if self.eps else []) + statistics[self.statistics]
                + ([] if self.centre else ["centre=false"]) + _affine_options(self.affine))

    @classmethod
    def from_spec(cls, values: dict[str, str]) -> BatchNorm:
        return cls(_option_number(values, "eps", 0.0), values.get("mode"), _option_flag(values, "centre"),
                   _affine_from_spec(values), values.get("statistics"))


@layer_kind("ln", ("eps", "centre", "scale", "shift"), "layer norm over the features of each example",
            "ln(eps=0.001,centre=false,scale=2,shift=0.5)")
@dataclass(frozen=True)
class LayerNorm:
    """Layer norm over the features of each example, population variance: y = scale (x - m) / sqrt(v + eps) +
    shift; ``centre=False`` leaves out the mean (x / sqrt(mean x^2 + eps) over the features: Philipp et al.'s layer
    norm without centring, the RMS norm); ``affine`` None (none) or constants (scale, shift) as for
    :class:`BatchNorm`."""

    eps: float = 0.0
    centre: bool = True
    affine: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "eps", check_eps(self.eps))
        object.__setattr__(self, "centre", check_flag(self.centre, "LayerNorm centre"))
        object.__setattr__(self, "affine", _affine(self.affine))

    def spec_options(self) -> list[str]:
        return (([f"eps={self.eps:g}"] if self.eps else []) + ([] if self.centre else ["centre=false"])
                + _affine_options(self.affine))

    @classmethod
    def from_spec(cls, values: dict[str, str]) -> LayerNorm:
        return cls(_option_number(values, "eps", 0.0), _option_flag(values, "centre"), _affine_from_spec(values))


@layer_kind("rms", ("eps", "scale", "shift"), "RMS norm over the features of each example (no centring)",
            "rms(eps=0.001,scale=2,shift=0.5)")
@dataclass(frozen=True)
class RMSNorm(LayerNorm):
    """RMS norm (Zhang & Sennrich 2019; torch's ``nn.RMSNorm``) over the features of each example: y = scale x /
    sqrt(mean_j x_j^2 + eps) + shift, no centring; ``affine`` as for :class:`LayerNorm`.

    It is the uncentred :class:`LayerNorm`, ``LayerNorm(eps, centre=False, affine)``, named: a subclass with
    ``centre`` fixed to False, so the infinite-width map (K_ab / sqrt((K_aa + eps)(K_bb + eps)) on any input law,
    :func:`~bnsym.arch.derive_layer_norm` with c = 0), the gradient and the twin are LayerNorm's, one source; only
    its spec name (``rms``) and its torch reader (``nn.RMSNorm``) are its own."""

    eps: float = 0.0
    centre: bool = field(default=False, init=False, repr=False)
    affine: tuple[float, float] | None = None

    def spec_options(self) -> list[str]:
        return ([f"eps={self.eps:g}"] if self.eps else []) + _affine_options(self.affine)

    @classmethod
    def from_spec(cls, values: dict[str, str]) -> RMSNorm:
        return cls(_option_number(values, "eps", 0.0), _affine_from_spec(values))


@layer_kind("PHI", (), "phi coordinatewise, spelled as for `bnsym predict --phi`", "tanh(gamma=0.5)")
@dataclass(frozen=True)
class Activation:
    """phi applied to every coordinate; ``phi`` is any activation bnsym accepts (a name such as "tanh(gamma=0.5)"
    or a :class:`bnsym.Activation`). Two layers are equal when their phi have the same name."""

    phi: Phi = field(compare=False)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        phi = parse_activation(self.phi)
        object.__setattr__(self, "phi", phi)
        object.__setattr__(self, "name", phi.name)


@dataclass(frozen=True)
class Serial:
    """Layers applied in order (build it with :func:`serial`; nested Serials are flattened there)."""

    layers: tuple[Layer, ...]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)


@layer_kind("res", ("alpha", "skip"), "skip(x) + alpha branch(x), the branch a spec itself, skip the identity",
            "res(alpha=0.5,skip=dense(2,0),bn,relu,dense)")
@dataclass(frozen=True)
class Residual:
    """skip(x) + alpha * branch(x); ``branch`` is a layer, a list of layers or a Serial; ``skip`` the same, or
    None / empty for the identity (the default; e.g. ``Dense()`` for a projection)."""

    branch: Serial
    alpha: float = 1.0
    skip: Serial | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "branch", serial(self.branch))
        object.__setattr__(self, "skip", serial(() if self.skip is None else self.skip))
        alpha = check_number(self.alpha, "alpha")
        if not math.isfinite(alpha):
            raise ValueError(f"the residual weight alpha must be finite, got {shown(self.alpha)}")
        object.__setattr__(self, "alpha", alpha)
        if not len(self.branch):
            raise ValueError("a Residual needs a branch with at least one layer (x + alpha * x is a scaling)")


Layer = Union[Dense, BatchNorm, LayerNorm, RMSNorm, Activation, Residual]
LAYER_TYPES = (Dense, BatchNorm, LayerNorm, RMSNorm, Activation, Residual)  # the kinds declared here (KINDS may grow)


def serial(*layers: Layer | Serial | Iterable) -> Serial:
    """The layers in order, as one :class:`Serial`: nested Serials and lists are flattened, so the top-level layers
    are the atomic layers and the residual blocks. Anything else is an unknown layer (ValueError)."""
    flat: list[Layer] = []
    kinds = tuple(KINDS)
    for position, item in enumerate(layers):
        if isinstance(item, kinds):
            flat.append(item)
        elif isinstance(item, Serial):
            flat.extend(item.layers)
        elif isinstance(item, (list, tuple)):
            flat.extend(serial(*item).layers)
        else:
            names = ", ".join(kind.__name__ for kind in kinds)
            raise ValueError(f"unknown layer {shown(item)} at position {position}: a network is built from the layer "
                             f"kinds {names} (or lists and Serials of them)")
    return Serial(tuple(flat))


def repeat(layer: Layer | Serial | Iterable, n: int) -> Serial:
    """``layer`` (one layer or a block of them) ``n`` times in a row."""
    times = check_whole_number(n, "the number of repeats n", 1, MAX_REPEATS)
    block = serial(layer)
    if len(block) * times > MAX_SERIAL:
        raise ValueError(f"{times:,} repeats of a block of {len(block):,} layers make {len(block) * times:,} layers, "
                         f"above {MAX_SERIAL:,}: a description this long is a typo, not a network")
    return serial(*([block] * times))


def walk(net: Serial) -> Iterator[Layer]:
    """Every layer of ``net`` in order, the layers of residual blocks (skip, then branch) after their block."""
    for layer in net:
        yield layer
        if isinstance(layer, Residual):
            yield from walk(layer.skip)
            yield from walk(layer.branch)


def describe(layer: Layer) -> str:
    """A layer in the spec grammar (:data:`~bnsym.core.grammar.SPEC_GRAMMAR`): ``dense(2,0.1)``,
    ``bn(eps=0.001,mode=eval)``, ..."""
    if isinstance(layer, Activation):
        return layer.name
    if isinstance(layer, Residual):
        weight = [] if layer.alpha == 1 else [f"alpha={layer.alpha:g}"]
        skip = [describe(inner) for inner in layer.skip]
        skip = [] if not skip else [f"skip={skip[0]}" if len(skip) == 1 else f"skip=({','.join(skip)})"]
        return f"res({','.join(weight + skip + [describe(inner) for inner in layer.branch])})"
    options = layer.spec_options()
    return KINDS[type(layer)].name + (f"({','.join(options)})" if options else "")


#: The grammar of a network spec (:func:`parse_architecture`), shown by ``bnsym arch --help``.
_NAME = re.compile(r"\s*([a-z_][a-z_0-9]*)\s*", re.IGNORECASE)


class _Reader:
    """A recursive-descent reader of :data:`~bnsym.core.grammar.SPEC_GRAMMAR`; every error names the spec and the
    position."""

    def __init__(self, spec: str):
        self.spec, self.at, self.depth = spec, 0, 0

    def fail(self, why: str) -> ValueError:
        long = len(self.spec) > 200
        shown_spec = f"{self.spec[:100]!r}... ({len(self.spec):,} characters)" if long else repr(self.spec)
        return ValueError(f"cannot read network spec {shown_spec} at position {self.at}: {why}")

    def peek(self) -> str:
        while self.at < len(self.spec) and self.spec[self.at].isspace():
            self.at += 1
        return self.spec[self.at] if self.at < len(self.spec) else ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise self.fail(f"expected {char!r}, found {self.peek() or 'the end'!r}")
        self.at += 1

    def count(self) -> int:
        match = re.compile(r"\s*\*\s*(\d+)").match(self.spec, self.at)
        if not match:
            raise self.fail("'*' must be followed by a whole number of repeats")
        self.at = match.end()
        if not 1 <= int(match[1]) <= MAX_REPEATS:
            raise self.fail(f"the number of repeats must be between 1 and {MAX_REPEATS:,}, got {match[1]}")
        return int(match[1])

    def sequence(self) -> Serial:
        items: list[Layer | Serial] = []
        while True:
            unit = self.peek() == "(" or bool(re.compile(r"\s*res\s*\(", re.IGNORECASE).match(self.spec, self.at))
            items.append(self.element())
            if self.peek() == "*":  # after a parenthesised unit: that unit; after a plain layer: all so far
                times = self.count()
                items = items[:-1] + [repeat(items[-1], times)] if unit else [repeat(items, times)]
            if self.peek() != ",":
                return serial(*items)
            self.at += 1

    def arguments(self) -> str:
        """The text between a parenthesis and its partner (no nesting), or "" when there is none."""
        if self.peek() != "(":
            return ""
        close = self.spec.find(")", self.at)
        if close < 0:
            raise self.fail("unclosed '('")
        text, self.at = self.spec[self.at + 1:close], close + 1
        return text

    def options(self, text: str, names: tuple[str, ...]) -> dict[str, str]:
        """Positional then keyword options of a layer, by name."""
        values: dict[str, str] = {}
        for position, part in enumerate(p.strip() for p in text.split(",") if p.strip()):
            key, _, value = part.rpartition("=")
            key = key.strip() or (names[position] if position < len(names) else "")
            if key not in names:
                raise self.fail(f"unknown option {part!r}; this layer takes {', '.join(names)}")
            if key in values:
                raise self.fail(f"option {key!r} is given twice")
            values[key] = value.strip()
        return values

    def number(self, text: str, what: str) -> float:
        try:
            return _option_number({what: text}, what, 0.0)
        except ValueError as error:
            raise self.fail(str(error)) from None

    def nested(self, read):
        """``read()`` one level deeper: parentheses and res( ) nest at most ``MAX_NESTING`` deep."""
        if self.depth >= MAX_NESTING:
            raise self.fail(f"parentheses and res( ) nest more than {MAX_NESTING} deep: the reader recurses once per "
                            "level, and a network this deep in brackets is a typo")
        self.depth += 1
        value = read()
        self.depth -= 1
        return value

    def element(self) -> Layer | Serial:
        if self.peek() == "(":
            self.at += 1
            group = self.nested(self.sequence)
            self.expect(")")
            return group
        match = _NAME.match(self.spec, self.at)
        if not match:
            raise self.fail(f"expected a layer, found {self.peek() or 'the end'!r}")
        name, start = match[1].lower(), self.at
        self.at = match.end()
        if name == "res":
            self.expect("(")
            alpha = 1.0
            keyword = re.compile(r"\s*alpha\s*=\s*([^,()]+),").match(self.spec, self.at)
            if keyword:
                alpha, self.at = self.number(keyword[1].strip(), "alpha"), keyword.end()
            skip = None
            if re.compile(r"\s*skip\s*=").match(self.spec, self.at):
                self.at = self.spec.index("=", self.at) + 1
                skip = self.nested(self.element)
                self.expect(",")
            branch = self.nested(self.sequence)
            self.expect(")")
            return Residual(branch, alpha, skip)
        text = self.arguments()
        try:
            kind = _kinds_by_name().get(name)
            if kind is not None:
                return kind.from_spec(self.options(text, KINDS[kind].options))
            power = re.compile(r"\s*\^\s*[^,()*\s]+").match(self.spec, self.at)
            if power:
                self.at = power.end()
            return Activation(self.spec[start:self.at].strip())
        except ValueError as error:
            if str(error).startswith("cannot read"):
                raise
            raise self.fail(str(error)) from None


def _kinds_by_name() -> dict[str, type]:
    """The kinds the reader reads by their spec name and options (``res`` and activations have their own syntax)."""
    return {kind.name: cls for cls, kind in KINDS.items() if cls not in (Activation, Residual)}


def parse_architecture(spec: str) -> Serial:
    """The network a spec string describes (:data:`~bnsym.core.grammar.SPEC_GRAMMAR`); ValueError saying where it
    cannot be read."""
    if not isinstance(spec, str):
        raise ValueError(f"a network spec is a string, got {shown(spec)}")
    reader = _Reader(spec)
    if not reader.peek():
        raise reader.fail("the spec is empty")
    net = reader.sequence()
    if reader.peek():
        raise reader.fail(f"unexpected {reader.peek()!r}")
    return net
