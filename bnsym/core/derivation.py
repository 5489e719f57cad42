"""A derivation: the SymPy steps that lead to a result, kept so a notebook can show them."""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp


@dataclass
class Derivation:
    """An ordered list of (sentence, equation) steps and the final expression."""

    title: str
    steps: list[tuple[str, sp.Basic]] = field(default_factory=list)
    result: sp.Expr | None = None

    def step(self, text: str, equation: sp.Basic) -> sp.Basic:
        """Record one step and return its equation (so derivations read top to bottom)."""
        self.steps.append((text, equation))
        return equation

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
