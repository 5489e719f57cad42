"""Every docstring the API page (book/api.md) renders is valid reStructuredText.

In RST ``|x|`` is a substitution reference and an unmatched ``*`` opens emphasis; the book builds with warnings
as errors, so one such docstring breaks it. This renders each docstring with docutils alone (Sphinx's
cross-reference roles registered as literals): milliseconds instead of a book build.
"""

from __future__ import annotations

import importlib
import inspect
import io
import re
from pathlib import Path
from typing import Iterator

import docutils.core
import docutils.nodes
import pytest
from docutils.parsers.rst import roles

API_PAGE = Path(__file__).resolve().parent.parent / "book" / "api.md"
for _role in ("func", "mod", "class", "data", "meth", "attr", "obj", "exc"):
    roles.register_generic_role(_role, docutils.nodes.literal)


def _resolve(path: str) -> object:
    """The module, or the module's attribute, that a dotted name of the API page names."""
    try:
        return importlib.import_module(path)
    except ImportError:
        module, _, name = path.rpartition(".")
        return getattr(importlib.import_module(module), name)


def _members(obj: object) -> Iterator[tuple[str, object]]:
    """The object and the public members autodoc documents with it (a module's ``__all__``, or what it defines;
    a class's own methods and properties)."""
    yield f"{getattr(obj, '__module__', None) or ''}.{getattr(obj, '__qualname__', obj.__name__)}".lstrip("."), obj
    if inspect.ismodule(obj):
        names = getattr(obj, "__all__", None) or [name for name, member in vars(obj).items()
                                                   if getattr(member, "__module__", None) == obj.__name__]
        for name in names:
            member = getattr(obj, name)
            if not name.startswith("_") and (inspect.isfunction(member) or inspect.isclass(member)):
                yield from _members(member)
    elif inspect.isclass(obj):
        for name, member in vars(obj).items():
            function = member.fget if isinstance(member, property) else member
            if not name.startswith("_") and callable(function):
                yield f"{obj.__module__}.{obj.__qualname__}.{name}", function


def _documented() -> dict[str, str]:
    text = API_PAGE.read_text()
    targets = [name if "." in name else f"bnsym.{name}"  # the page's currentmodule is bnsym
               for name in re.findall(r"^\.\. auto(?:module|function|class):: (\S+)", text, re.MULTILINE)]
    assert targets, "no autodoc directive found on the API page"
    return {name: inspect.getdoc(obj) for target in targets for name, obj in _members(_resolve(target))
            if inspect.getdoc(obj)}


DOCUMENTED = _documented()


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_docstring_is_valid_rst(name):
    docstring = DOCUMENTED[name]
    messages = io.StringIO()
    docutils.core.publish_doctree(docstring, settings_overrides={"warning_stream": messages, "report_level": 2,
                                                                 "halt_level": 5})
    assert not messages.getvalue(), f"{name}:\n{messages.getvalue()}"
