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


def with_none(names: np.ndarray) -> np.ndarray:
    """``names`` (``category_strings``) then None: the entry a missing name's code -1 picks."""
    return np.append(names, np.array([None], dtype=object))


def strings(s: pd.Series) -> np.ndarray:
    """``s.astype(str).to_numpy()``: an object array of ``str`` (NaN where missing)."""
    if not isinstance(s.dtype, pd.CategoricalDtype):
        return s.astype(str).to_numpy()
    cats = np.append(category_strings(s), np.nan)  # code -1 picks the final NaN
    return cats[s.cat.codes.to_numpy()]


def strings_at(s: pd.Series, rows: np.ndarray) -> np.ndarray:
    """``strings(s)[rows]``, building strings for those rows only."""
    if not isinstance(s.dtype, pd.CategoricalDtype):
        return s.astype(str).to_numpy()[rows]
    return np.append(category_strings(s), np.nan)[s.cat.codes.to_numpy()[rows]]


class Lookup:
    """``strings(s)[row]`` one row at a time, without a string array the length of ``s``
    (a thread's Python frames can number hundreds of thousands; a report names a few)."""

    def __init__(self, s: pd.Series) -> None:
        c = _categorical(s)
        self._names = np.append(category_strings(c), np.nan)
        self._codes = c.cat.codes.to_numpy()

    def __getitem__(self, row: int):
        return self._names[self._codes[row]]

    @property
    def size(self) -> int:
        """How many codes there are (the names, and one for missing)."""
        return len(self._names)

    def codes(self, rows) -> np.ndarray:
        """Each row's name as a code, from 0 (a missing name: the last one)."""
        c = self._codes[np.asarray(rows, dtype=np.int64)].astype(np.int64)
        return np.where(c < 0, len(self._names) - 1, c)

    def names_of(self, codes) -> list:
        return self._names[np.asarray(codes, dtype=np.int64)].tolist()


def unique(s: pd.Series) -> np.ndarray:
    """``pd.unique(strings(s))``: the names present, in order of first appearance."""
    present = pd.unique(_categorical(s).cat.codes.to_numpy())
    return np.append(category_strings(s), np.nan)[present]


def text(values, index=None) -> pd.Series:
    """A per-unit text column (phase, category, bound, reasons) as an object Series.

    pandas 3 would store an object array of strings in its Arrow-backed string dtype:
    building that, and reading it back as numpy for every vector test, cost more than
    the rest of the analysis of a serving trace. Missing values stay None.
    """
    return pd.Series(values, index=index, dtype=object)


class Values:
    """A text column factorised once: ``eq(value)`` is ``column == value`` as a bool array,
    tested on integer codes. Summing a phase's time by bound, limiter and cost source
    would otherwise compare a million Python strings per value asked about."""

    def __init__(self, values) -> None:
        self.codes, uniques = pd.factorize(np.asarray(values, dtype=object))  # missing: code -1
        self._code = {u: i for i, u in enumerate(uniques.tolist())}

    @property
    def n_values(self) -> int:
        """How many distinct (non-missing) values the column holds."""
        return len(self._code)

    def eq(self, value) -> np.ndarray:
        code = self._code.get(value)
        return self.codes == code if code is not None else np.zeros(len(self.codes), dtype=bool)

    def isin(self, values) -> np.ndarray:
        return np.isin(self.codes, [self._code[v] for v in values if v in self._code])


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


def objects(values: list) -> np.ndarray:
    """``values`` as a 1-d object array (np.array would nest tuples or infer a string dtype): one
    result per distinct name, say, to take by code."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
