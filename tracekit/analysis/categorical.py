"""Name columns read once per distinct name.

The reader's name columns (kernel, op, runtime and annotation names, kinds) are pandas
categoricals: a million rows share a few thousand names. ``astype(str)`` on such a column
builds a million-row string array (an Arrow one under pandas 3) and every test on it runs
per row; these helpers work on ``.cat.categories`` once and take the result by code, with
the same values ``astype(str)`` would give (a missing name stays NaN).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd


def _categorical(s: pd.Series) -> pd.Series:
    return s if isinstance(s.dtype, pd.CategoricalDtype) else s.astype(str).astype("category")


def category_strings(s: pd.Series) -> np.ndarray:
    """The distinct names of ``s`` (its categories) as an object array of ``str``."""
    return np.array([str(c) for c in _categorical(s).cat.categories], dtype=object)


def codes(s: pd.Series) -> np.ndarray:
    """Each row's index into ``category_strings(s)``; -1 where the name is missing."""
    return _categorical(s).cat.codes.to_numpy()


def strings(s: pd.Series) -> np.ndarray:
    """``s.astype(str).to_numpy()``: an object array of ``str`` (NaN where missing)."""
    if not isinstance(s.dtype, pd.CategoricalDtype):
        return s.astype(str).to_numpy()
    cats = np.append(category_strings(s), np.nan)  # code -1 picks the final NaN
    return cats[s.cat.codes.to_numpy()]


def mask(s: pd.Series, predicate: Callable[[str], bool]) -> np.ndarray:
    """``predicate(name)`` per row as a bool array, evaluated once per distinct name;
    False where the name is missing."""
    c = _categorical(s)
    per_name = np.array([bool(predicate(str(x))) for x in c.cat.categories] + [False], dtype=bool)
    return per_name[c.cat.codes.to_numpy()]


def isin(s: pd.Series, values) -> np.ndarray:
    """``s.astype(str).isin(values).to_numpy()``, once per distinct name."""
    wanted = set(values)
    return mask(s, lambda n: n in wanted)

