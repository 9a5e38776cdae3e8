"""Rank selectors: which ranks to profile, said by their place in the parallel layout.

A small explicit grammar, parsed by hand (never ``eval``)::

    selector = term , { "and" , term } ;
    term     = dim , "==" , value
             | dim , "in" , "{" , value , { "," , value } , "}"
             | "first_per_node" | "one_per_dp_group"
             | "every" , "(" , int , ")" ;
    dim      = "tp" | "pp" | "dp" | "cp" | "ep" | "rank" ;
    value    = int | "last" ;                 (* last: the dimension's size - 1 *)

Parsing checks the text only; what a term means for a rank (and what it needs to know: a
coordinate, a dimension's size, the rank on its node) is decided by
:class:`profdsl.core._selection.Selection`, the one home of the rank rule. Errors name the
field, the column and the bad token, with a caret under it.

Examples:
    >>> parse_selector("tp==0 and pp in {last, 0}").format()
    'tp == 0 and pp in {0, last}'
    >>> parse_selector("tp == 0 and pp in {0, lats}")
    Traceback (most recent call last):
    ...
    profdsl.errors.ConfigError: selector: expected an integer or 'last', got 'lats' at column 23
      tp == 0 and pp in {0, lats}
                            ^^^^
"""

from __future__ import annotations

import re
from typing import Final, Literal, NoReturn

import attrs

from profdsl.config._checks import MAX_WIDE_INDEX, suggest
from profdsl.config._parallel import DIMS as PARALLEL_DIMS
from profdsl.errors import ConfigError

__all__ = ["DIMS", "LAST", "Every", "FirstPerNode", "Match", "OnePerDpGroup", "Selector", "Term", "parse_selector"]

#: What a comparison may name: the parallel coordinates and the global rank.
DIMS: Final = (*PARALLEL_DIMS, "rank")
#: The value that stands for a dimension's last position.
LAST: Final = "last"
#: The words that stand alone as a term.
_WORDS: Final = ("first_per_node", "one_per_dp_group", "every")
#: Longest selector text accepted.
MAX_LEN: Final = 4096

Value = int | Literal["last"]


def _sorted_values(values: frozenset[Value]) -> list[Value]:
    ints: list[Value] = sorted(v for v in values if isinstance(v, int))
    return ints + ([LAST] if LAST in values else [])


@attrs.frozen
class Match:
    """``dim == v`` or ``dim in {v, ...}``: the rank's ``dim`` is one of ``values``."""

    dim: str
    values: frozenset[Value]

    def format(self) -> str:
        """Canonical text: ``==`` for one value, else ``in {..}`` with the integers sorted."""
        shown = [str(v) for v in _sorted_values(self.values)]
        if len(shown) == 1:
            return f"{self.dim} == {shown[0]}"
        return f"{self.dim} in {{{', '.join(shown)}}}"


@attrs.frozen
class FirstPerNode:
    """The first rank of each node (its local rank is 0)."""

    def format(self) -> str:
        """``first_per_node``."""
        return "first_per_node"


@attrs.frozen
class OnePerDpGroup:
    """One rank per data-parallel group: the first rank (every other coordinate 0) of each
    data-parallel index, i.e. of each model replica."""

    def format(self) -> str:
        """``one_per_dp_group``."""
        return "one_per_dp_group"


@attrs.frozen
class Every:
    """Every ``n``-th global rank: ranks 0, n, 2n, ..."""

    n: int

    def format(self) -> str:
        """``every(n)``."""
        return f"every({self.n})"


Term = Match | FirstPerNode | OnePerDpGroup | Every


@attrs.frozen
class Selector:
    """A parsed selector: a rank is selected when it matches every term."""

    terms: tuple[Term, ...]

    def format(self) -> str:
        """The canonical text (``parse_selector(s.format()) == s``)."""
        return " and ".join(term.format() for term in self.terms)

    def __str__(self) -> str:
        return self.format()


_TOKEN = re.compile(r"\s*(?:(?P<int>[0-9]+)|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>==|[^\sA-Za-z0-9_]))")


@attrs.frozen
class _Token:
    kind: str  # "int", "word", "op", "end"
    text: str
    column: int  # 0-based


class _Parser:
    def __init__(self, text: str, where: str) -> None:
        self.text, self.where = text, where
        # The tokens of text, then its end (every character but a space is a token: none is skipped).
        found = [
            _Token(kind, match[kind], match.start(kind)) for match in _TOKEN.finditer(text) if (kind := match.lastgroup)
        ]
        self.tokens = [*found, _Token("end", "", len(text))]
        self.at = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.at]

    def fail(self, problem: str, token: _Token | None = None) -> NoReturn:
        token = token or self.token
        shown = "the end" if token.kind == "end" else repr(token.text)
        caret = " " * token.column + "^" * max(len(token.text), 1)
        raise ConfigError(
            f"{self.where}: {problem}, got {shown} at column {token.column + 1}\n  {self.text}\n  {caret}"
        )

    def take(self, text: str, problem: str) -> None:
        if self.token.text != text or self.token.kind == "end":
            self.fail(problem)
        self.at += 1

    def integer(self, minimum: int, maximum: int) -> int:
        token = self.token
        if token.kind != "int":
            self.fail("expected an integer")
        value = int(token.text)
        if not minimum <= value <= maximum:
            self.fail(f"expected an integer in {minimum}..{maximum}")
        self.at += 1
        return value

    def value(self) -> Value:
        token = self.token
        if token.kind == "word" and token.text == LAST:
            self.at += 1
            return LAST
        if token.kind != "int":
            self.fail(f"expected an integer or {LAST!r}")
        return self.integer(0, MAX_WIDE_INDEX)

    def term(self) -> Term:
        token = self.token
        if token.kind != "word":
            self.fail(
                "expected a term (tp, pp, dp, cp, ep or rank with == or in; first_per_node, "
                "one_per_dp_group or every(N))"
            )
        self.at += 1
        if token.text == "first_per_node":
            return FirstPerNode()
        if token.text == "one_per_dp_group":
            return OnePerDpGroup()
        if token.text == "every":
            self.take("(", "expected '(' after 'every'")
            n = self.integer(1, MAX_WIDE_INDEX)
            self.take(")", "expected ')' after the number of every(N)")
            return Every(n)
        if token.text not in DIMS:
            self.fail(
                f"unknown term{suggest(token.text, (*DIMS, *_WORDS))} (known: {', '.join(DIMS)}, {', '.join(_WORDS)})",
                token,
            )
        op = self.token
        if op.text == "==" and op.kind == "op":
            self.at += 1
            return Match(token.text, frozenset({self.value()}))
        if op.text == "in" and op.kind == "word":
            self.at += 1
            self.take("{", "expected '{' after 'in'")
            values = {self.value()}
            while self.token.text == ",":
                self.at += 1
                values.add(self.value())
            self.take("}", "expected ',' or '}' in the set")
            return Match(token.text, frozenset(values))
        self.fail(f"expected '==' or 'in' after {token.text!r}")

    def selector(self) -> Selector:
        if self.token.kind == "end":
            self.fail("empty selector: expected a term")
        terms = [self.term()]
        while self.token.kind != "end":
            if self.token.text != "and" or self.token.kind != "word":
                self.fail("expected 'and' or the end")
            self.at += 1
            terms.append(self.term())
        return Selector(tuple(terms))


def parse_selector(text: object, *, where: str = "selector") -> Selector:
    """Parse a selector such as ``"tp == 0 and pp in {0, last}"``.

    Args:
        text: the selector.
        where: how error messages name it, e.g. ``"ProfilerConfig.select"``.

    Raises:
        ConfigError: not a string, too long, or not in the grammar; the message gives the column
            and the bad token.
    """
    if not isinstance(text, str):
        raise ConfigError(f"{where} must be a selector string such as 'tp == 0', got {text!r}")
    if len(text) > MAX_LEN:
        raise ConfigError(f"{where} must be at most {MAX_LEN} characters, got {len(text)}")
    if "\n" in text or "\r" in text:
        raise ConfigError(f"{where} must be one line, got {text!r}")
    return _Parser(text, where).selector()
