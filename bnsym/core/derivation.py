"""A derivation: the SymPy steps that lead to a result, kept so a notebook can show them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from .lazy import lazy_module

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use


@dataclass
class Derivation:
    """An ordered list of (sentence, equation) steps, the final result and the named intermediate results.

    ``result`` is the derivation's answer: an expression, or a dict of expressions keyed by the entries it
    solves for (the 11 classes of an ultrasymmetric operator); None where the answer has several named parts.
    ``derivation[name]`` reads the right-hand side of a named step (eigenvalues by eigenspace, limits, ...).
    """

    title: str
    steps: list[tuple[str, sp.Basic]] = field(default_factory=list)
    result: sp.Basic | Mapping[str, sp.Basic] | None = None
    results: dict[str, sp.Basic] = field(default_factory=dict)

    def step(self, text: str, equation: sp.Basic, name: str | tuple[str, ...] | None = None) -> sp.Basic:
        """Record one step and return its equation (so derivations read top to bottom).

        With ``name``, the equation's right-hand side is kept under that name; a tuple of equations takes a
        tuple of names, one per equation. An equation that SymPy already evaluated to True or False (``Eq`` of
        two matrices does) is refused: the page would show the bare boolean; build it with ``evaluate=False``.
        """
        parts = equation.args if isinstance(equation, sp.Tuple) else (equation,)
        if any(isinstance(part, sp.logic.boolalg.BooleanAtom) for part in parts):
            raise TypeError(f"step {text!r} of {self.title!r} evaluated to a boolean ({equation}); "
                            "build its equation with evaluate=False")
        if name is not None:
            names = (name,) if isinstance(name, str) else tuple(name)
            equations = (equation,) if isinstance(name, str) or not isinstance(equation, sp.Tuple) else equation.args
            if len(names) != len(equations) or not all(isinstance(eq, sp.Equality) for eq in equations):
                raise TypeError(f"step names {names} need as many equations, got {equation}")
            repeated = set(names) & set(self.results)
            if repeated:
                raise KeyError(f"derivation {self.title!r} names two results {sorted(repeated)}")
            self.results.update({key: eq.rhs for key, eq in zip(names, equations)})
        self.steps.append((text, equation))
        return equation

    def __getitem__(self, name: str) -> sp.Basic:
        """The named result ``name`` (KeyError listing the known names otherwise)."""
        try:
            return self.results[name]
        except KeyError:
            raise KeyError(f"derivation {self.title!r} has no result {name!r}; it has {sorted(self.results)}") from None

    def show(self) -> None:
        """Display the steps in a notebook (plain text outside IPython)."""
        try:
            from IPython.display import Markdown, display
        except ImportError:  # pragma: no cover - only outside IPython
            print(self.title)
            for text, equation in self.steps:
                print(f"  {text}: {equation}")
            return
        display(Markdown(f"**{self.title}**"))
        for text, equation in self.steps:
            display(Markdown(text))
            display(equation)
