"""Public names loaded on first use, so importing a package stays cheap (icl, icl_core)."""

from __future__ import annotations

import importlib


def lazy_attribute(package: str, table: dict[str, str], namespace: dict, name: str):
    """`name` of `package` from `table` ({name: "module" or "module:attribute"}), imported
    now and kept in `namespace` (the package's globals()); AttributeError when not public."""
    if name not in table:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    module, _, attr = table[name].partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    namespace[name] = value
    return value
