"""Static reading of launch shell scripts: a small bash subset, interpreted without running anything.

A launch script (Megatron-LM's ``examples/*/train_*.sh``, torchtitan's ``run_train.sh``, a
DeepSpeed ``deepspeed --num_gpus N train.py ...`` line) is mostly variable assignments, bash
arrays and one launcher command.  This module lexes and parses that subset and *evaluates* it
symbolically to recover the launcher command with its variables substituted:

* words, quoting (``'...'``, ``"..."``, ``$'...'``, backslashes), comments, line continuations,
  here-documents (skipped), redirections (dropped), ``;``/``&&``/``||``/``|``/``&``;
* ``VAR=value``, ``export``/``declare``/``local``/``readonly VAR=value``, arrays
  ``A=( ... )`` / ``A+=( ... )``, ``unset``;
* ``$VAR``, ``${VAR}``, ``${VAR:-default}`` (also ``-``, ``:=``, ``=``, ``:+``, ``+``, ``:?``,
  ``?``), ``${A[@]}``, ``"${A[@]}"``, ``${A[*]}``, ``${A[i]}``, ``${#A[@]}``, ``$((...))``
  arithmetic on integers, bash word splitting of unquoted expansions;
* ``if``/``elif``/``else`` whose tests (``[ ]``, ``[[ ]]``, ``test``, ``true``/``false``) can be
  decided from the file; an undecidable test takes the ``then`` branch and says so in a note;
* ``eval WORDS`` (re-read as shell text, as bash does) -- scripts often build ``CMD="..."``.

Never executed: command substitutions ``$(...)``/backticks, ``source``, loops, ``case``,
function bodies.  Values that depend on them, on script arguments (``$1``, ``"$@"``) or on
variables the file never sets are *unresolved*: they keep their source text and carry the
reason, so a reader can report them instead of guessing.  ``${VAR:-default}`` with ``VAR`` never
set in the file takes the script's own default and records that assumption.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ArrayWord",
    "Command",
    "Interpreter",
    "Op",
    "ShellLimitError",
    "ShellSyntaxError",
    "Text",
    "Word",
    "interpret",
    "lex",
]

MAX_VALUE_CHARS = 1 << 20  # one expanded value (a variable, a word)
MAX_FIELDS = 200_000  # fields of one command / array
MAX_EVAL_DEPTH = 8
MAX_COMMANDS = 100_000

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN_RE = re.compile(rf"^({_NAME})(\[[^\]]*\])?(\+?)=")
_ARRAY_ASSIGN_RE = re.compile(rf"^({_NAME})(\+?)=$")
_OPERATORS = (
    ";;&",
    "&>>",
    "<<<",
    "<<-",
    ";;",
    ";&",
    "&&",
    "||",
    "|&",
    "&>",
    "<<",
    ">>",
    ">&",
    "<&",
    ">|",
    "<>",
    ";",
    "&",
    "|",
    "(",
    ")",
    "<",
    ">",
)
_REDIRECTS = frozenset({"<", ">", ">>", "<<", "<<-", "<<<", ">&", "<&", ">|", "<>", "&>", "&>>"})
_RESERVED = frozenset(
    {"if", "then", "elif", "else", "fi", "for", "select", "while", "until", "do", "done", "case", "esac", "{", "}"}
)
_IFS_SPLIT = re.compile(r"([ \t\n]+)")


class ShellSyntaxError(Exception):
    """The text is not shell this reader understands (unterminated quote, unbalanced ``if``...)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


class ShellLimitError(Exception):
    """Expansion grew past the reader's limits (a value over 1 MiB, too many words, deep eval)."""


# --------------------------------------------------------------------------------------------
# Tokens


@dataclass(frozen=True)
class Part:
    """One piece of a word: literal text, or an expansion still to do."""

    kind: Literal["lit", "param", "cmdsub", "arith"]
    text: str  # lit: the characters; param: inside of ${...} (or the bare name); others: inner source
    quoted: bool  # inside quotes or escaped: not subject to word splitting
    raw: str  # as written in the source


@dataclass(frozen=True)
class Word:
    parts: tuple[Part, ...]
    line: int

    @property
    def raw(self) -> str:
        return "".join(p.raw for p in self.parts)

    def literal(self) -> str | None:
        """The word's text if it has no expansions (quotes removed), else None."""
        if all(p.kind == "lit" for p in self.parts):
            return "".join(p.text for p in self.parts)
        return None

    def bare(self) -> str | None:
        """The text if the word is entirely unquoted literal (reserved words, operators)."""
        if self.parts and all(p.kind == "lit" and not p.quoted for p in self.parts):
            return "".join(p.text for p in self.parts)
        return None


@dataclass(frozen=True)
class ArrayWord:
    """``NAME=( items )`` or ``NAME+=( items )``."""

    name: str
    append: bool
    items: tuple[Word, ...]
    line: int

    @property
    def raw(self) -> str:
        return f"{self.name}{'+' if self.append else ''}=({' '.join(w.raw for w in self.items)})"


@dataclass(frozen=True)
class Op:
    op: str
    line: int


Token = Word | ArrayWord | Op


class _Lexer:
    def __init__(self, text: str, line: int = 1) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.line = line
        self.out: list[Token] = []
        self.pending_heredocs: list[tuple[str, bool]] = []
        self.in_dbl_bracket = False
        self.at_command_start = True

    # -- helpers
    def _err(self, msg: str, line: int | None = None) -> ShellSyntaxError:
        return ShellSyntaxError(self.line if line is None else line, msg)

    def _peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def tokens(self) -> list[Token]:
        while self.i < self.n:
            c = self.s[self.i]
            if c in " \t\r":
                self.i += 1
            elif c == "\\" and self._peek(1) == "\n":
                self.i += 2
                self.line += 1
            elif c == "\n":
                self._emit_op("\n")
                self.i += 1
                self.line += 1
                self._read_heredoc_bodies()
            elif c == "#":
                while self.i < self.n and self.s[self.i] != "\n":
                    self.i += 1
            elif c in ";&|()<>":
                self._read_operator()
            else:
                self._read_word_token()
        if self.pending_heredocs:
            self.pending_heredocs.clear()  # here-document at end of file: nothing to skip
        return self.out

    def _emit_op(self, op: str) -> None:
        self.out.append(Op(op, self.line))
        self.at_command_start = op not in _REDIRECTS

    def _read_operator(self) -> None:
        for op in _OPERATORS:
            if self.s.startswith(op, self.i):
                break
        else:  # pragma: no cover - every metachar starts some operator
            raise self._err(f"unexpected {self.s[self.i]!r}")
        if self.in_dbl_bracket and op in ("&&", "||", "(", ")", "<", ">"):
            # inside [[ ]] these are test operators, not shell syntax
            self.out.append(Word((Part("lit", op, False, op),), self.line))
            self.i += len(op)
            return
        self.i += len(op)
        self._emit_op(op)
        if op in ("<<", "<<-"):
            while self._peek() in (" ", "\t"):
                self.i += 1
            word = self._read_word(stop_at_blank=True)
            if word is None:
                raise self._err("here-document without a delimiter")
            delim = "".join(p.text if p.kind == "lit" else p.raw for p in word.parts)
            self.pending_heredocs.append((delim, op == "<<-"))
            self.out.append(word)

    def _read_heredoc_bodies(self) -> None:
        while self.pending_heredocs:
            delim, strip_tabs = self.pending_heredocs.pop(0)
            while True:
                if self.i >= self.n:
                    break  # bash reads an unterminated here-document to the end of the file
                j = self.s.find("\n", self.i)
                end = self.n if j < 0 else j
                line = self.s[self.i : end]
                self.i = end + 1 if j >= 0 else self.n
                self.line += 1
                if (line.lstrip("\t") if strip_tabs else line).rstrip("\r") == delim:
                    break

    def _read_word_token(self) -> None:
        start_line = self.line
        word = self._read_word(stop_at_blank=True)
        if word is None:  # pragma: no cover - callers only enter on a word character
            self.i += 1
            return
        nxt = self._peek()
        bare = word.bare()
        if bare is not None and bare.isdigit() and nxt in ("<", ">"):
            return  # IO number of a redirection (2>&1): dropped with the redirection
        if nxt == "(" and bare is not None and (m := _ARRAY_ASSIGN_RE.match(bare)):
            self.i += 1
            items = self._read_array_items(start_line)
            self.out.append(ArrayWord(m.group(1), m.group(2) == "+", tuple(items), start_line))
            self.at_command_start = False
            return
        if self.at_command_start and bare == "[[":
            self.in_dbl_bracket = True
        elif bare == "]]":
            self.in_dbl_bracket = False
        self.out.append(word)
        self.at_command_start = bare in _RESERVED or bare == "!"

    def _read_array_items(self, start_line: int) -> list[Word]:
        items: list[Word] = []
        while True:
            if self.i >= self.n:
                raise self._err("array '( ... )' never closed", start_line)
            c = self.s[self.i]
            if c in " \t\r":
                self.i += 1
            elif c == "\n":
                self.i += 1
                self.line += 1
            elif c == "\\" and self._peek(1) == "\n":
                self.i += 2
                self.line += 1
            elif c == "#":
                while self.i < self.n and self.s[self.i] != "\n":
                    self.i += 1
            elif c == ")":
                self.i += 1
                return items
            elif c in ";&|(<>":
                raise self._err(f"unexpected {c!r} inside an array")
            else:
                w = self._read_word(stop_at_blank=True)
                if w is not None:
                    items.append(w)

    def _read_word(self, stop_at_blank: bool) -> Word | None:
        """Read one word from the current position (stop_at_blank=False: the whole rest)."""
        line = self.line
        parts: list[Part] = []
        buf: list[str] = []

        def flush() -> None:
            if buf:
                t = "".join(buf)
                parts.append(Part("lit", t, False, t))
                buf.clear()

        while self.i < self.n:
            c = self.s[self.i]
            if stop_at_blank and (c in " \t\r\n" or c in ";&|()<>"):
                break
            if c == "\\":
                nxt = self._peek(1)
                if nxt == "\n":
                    self.i += 2
                    self.line += 1
                    continue
                flush()
                if nxt == "":
                    parts.append(Part("lit", "\\", True, "\\"))
                    self.i += 1
                else:
                    parts.append(Part("lit", nxt, True, "\\" + nxt))
                    self.i += 2
            elif c == "'":
                flush()
                j = self.s.find("'", self.i + 1)
                if j < 0:
                    raise self._err("unterminated single quote", line)
                body = self.s[self.i + 1 : j]
                self.line += body.count("\n")
                parts.append(Part("lit", body, True, self.s[self.i : j + 1]))
                self.i = j + 1
            elif c == '"':
                flush()
                parts.extend(self._read_double_quoted())
            elif c == "$":
                if self._peek(1) == "'":
                    flush()
                    parts.append(self._read_ansi_c())
                    continue
                if self._peek(1) == '"':  # $"..." (locale translation): same as "..."
                    flush()
                    self.i += 1
                    parts.extend(self._read_double_quoted())
                    continue
                p = self._read_dollar(quoted=False)
                if p is None:
                    buf.append("$")
                    self.i += 1
                else:
                    flush()
                    parts.append(p)
            elif c == "`":
                flush()
                parts.append(self._read_backtick(quoted=False))
            else:
                if c == "\n":
                    self.line += 1
                buf.append(c)
                self.i += 1
        flush()
        return Word(tuple(parts), line) if parts else None

    def _read_double_quoted(self) -> list[Part]:
        line = self.line
        self.i += 1
        parts: list[Part] = []
        buf: list[str] = []

        def flush(force: bool = False) -> None:
            if buf or force:
                t = "".join(buf)
                parts.append(Part("lit", t, True, _dq_raw(t)))
                buf.clear()

        while True:
            if self.i >= self.n:
                raise self._err("unterminated double quote", line)
            c = self.s[self.i]
            if c == '"':
                self.i += 1
                break
            if c == "\\" and self._peek(1) in ("$", "`", '"', "\\", "\n"):
                nxt = self._peek(1)
                if nxt == "\n":
                    self.line += 1
                else:
                    buf.append(nxt)
                self.i += 2
            elif c == "$":
                p = self._read_dollar(quoted=True) if self._peek(1) not in ("'", '"') else None
                if p is None:
                    buf.append("$")
                    self.i += 1
                else:
                    flush()
                    parts.append(p)
            elif c == "`":
                flush()
                parts.append(self._read_backtick(quoted=True))
            else:
                if c == "\n":
                    self.line += 1
                buf.append(c)
                self.i += 1
        flush(force=not parts)
        return parts

    def _read_ansi_c(self) -> Part:
        line = self.line
        start = self.i
        self.i += 2
        out: list[str] = []
        escapes = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "f": "\f", "v": "\v"}
        while True:
            if self.i >= self.n:
                raise self._err("unterminated $'...' quote", line)
            c = self.s[self.i]
            if c == "'":
                self.i += 1
                break
            if c == "\\" and self.i + 1 < self.n:
                nxt = self.s[self.i + 1]
                out.append(escapes.get(nxt, nxt))
                self.i += 2
                continue
            if c == "\n":
                self.line += 1
            out.append(c)
            self.i += 1
        return Part("lit", "".join(out), True, self.s[start : self.i])

    def _scan_balanced(self, start: int, open_: str, close: str, line: int, what: str) -> int:
        """Index just past the `close` that balances an `open_` already consumed before `start`."""
        depth = 1
        j = start
        while j < self.n:
            c = self.s[j]
            if c == "\\":
                j += 2
                continue
            if c == "'" and open_ != "{":
                k = self.s.find("'", j + 1)
                if k < 0:
                    raise self._err(f"unterminated single quote inside {what}", line)
                j = k + 1
                continue
            if c == '"':
                k = j + 1
                while k < self.n and self.s[k] != '"':
                    k += 2 if self.s[k] == "\\" else 1
                if k >= self.n:
                    raise self._err(f"unterminated double quote inside {what}", line)
                j = k + 1
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        raise self._err(f"{what} never closed", line)

    def _read_dollar(self, quoted: bool) -> Part | None:
        s, i, line = self.s, self.i, self.line
        nxt = self._peek(1)
        if nxt == "(" and self._peek(2) == "(":
            end = self._scan_balanced(i + 3, "(", ")", line, "$((...))")
            if end < self.n and s[end] == ")":
                inner = s[i + 3 : end - 1]
                self.line += s[i : end + 1].count("\n")
                self.i = end + 1
                return Part("arith", inner, quoted, s[i : end + 1])
            # "$( (" : a command substitution starting with a subshell
        if nxt == "(":
            end = self._scan_balanced(i + 2, "(", ")", line, "$(...)")
            self.line += s[i:end].count("\n")
            self.i = end
            return Part("cmdsub", s[i + 2 : end - 1], quoted, s[i:end])
        if nxt == "{":
            end = self._scan_balanced(i + 2, "{", "}", line, "${...}")
            self.line += s[i:end].count("\n")
            self.i = end
            return Part("param", s[i + 2 : end - 1], quoted, s[i:end])
        m = re.compile(_NAME).match(s, i + 1)
        if m:
            self.i = m.end()
            return Part("param", m.group(0), quoted, s[i : m.end()])
        if nxt and (nxt.isdigit() or nxt in "@*#?$!-"):
            self.i = i + 2
            return Part("param", nxt, quoted, s[i : i + 2])
        return None

    def _read_backtick(self, quoted: bool) -> Part:
        line = self.line
        j = self.i + 1
        while j < self.n and self.s[j] != "`":
            j += 2 if self.s[j] == "\\" else 1
        if j >= self.n:
            raise self._err("unterminated backquote", line)
        raw = self.s[self.i : j + 1]
        self.line += raw.count("\n")
        self.i = j + 1
        return Part("cmdsub", raw[1:-1], quoted, raw)


def _dq_raw(t: str) -> str:
    for ch in ("\\", '"', "$", "`"):
        t = t.replace(ch, "\\" + ch)
    return f'"{t}"'


def lex(text: str, line: int = 1) -> list[Token]:
    """Tokens of shell `text` (words, arrays, operators; comments and here-document bodies dropped)."""
    return _Lexer(text, line).tokens()


def _lex_value(text: str) -> Word:
    """Lex `text` as one word whose blanks are literal (the word of ``${X:-word}``)."""
    lx = _Lexer(text)
    w = lx._read_word(stop_at_blank=False)
    return w if w is not None else Word((), 1)


# --------------------------------------------------------------------------------------------
# Syntax tree


@dataclass(frozen=True)
class Assign:
    name: str
    append: bool
    value: Word | None  # scalar assignment (None: empty value)
    items: tuple[Word, ...] | None  # array assignment
    line: int


@dataclass(frozen=True)
class Simple:
    assigns: tuple[Assign, ...]
    words: tuple[Word | ArrayWord, ...]
    line: int


@dataclass(frozen=True)
class AndOr:
    items: tuple[Node, ...]
    ops: tuple[str, ...]


@dataclass(frozen=True)
class Pipeline:
    items: tuple[Node, ...]
    negate: bool


@dataclass(frozen=True)
class If:
    clauses: tuple[tuple[tuple[Node, ...], tuple[Node, ...]], ...]
    else_body: tuple[Node, ...] | None
    line: int


@dataclass(frozen=True)
class Skipped:
    """A construct read but not evaluated (loop, case, function body)."""

    what: str
    line: int


@dataclass(frozen=True)
class Group:
    body: tuple[Node, ...]
    subshell: bool


Node = Simple | AndOr | Pipeline | If | Skipped | Group


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.t = tokens
        self.i = 0

    def _peek(self) -> Token | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def _line(self) -> int:
        tok = self._peek()
        if tok is None:
            return self.t[-1].line if self.t else 1
        return tok.line

    def _is_word(self, tok: Token | None, *texts: str) -> bool:
        return isinstance(tok, Word) and tok.bare() in texts

    def _is_op(self, tok: Token | None, *ops: str) -> bool:
        return isinstance(tok, Op) and tok.op in ops

    def _expect_word(self, text: str) -> None:
        tok = self._peek()
        if not self._is_word(tok, text):
            got = "end of file" if tok is None else repr(tok.op if isinstance(tok, Op) else tok.raw)
            raise ShellSyntaxError(self._line(), f"expected {text!r}, found {got}")
        self.i += 1

    def _skip_newlines(self) -> None:
        while self._is_op(self._peek(), "\n"):
            self.i += 1

    def parse(self) -> list[Node]:
        nodes = self.parse_list(frozenset())
        tok = self._peek()
        if tok is not None:
            what = tok.op if isinstance(tok, Op) else tok.raw
            raise ShellSyntaxError(tok.line, f"unexpected {what!r}")
        return nodes

    def parse_list(self, stop: frozenset[str]) -> list[Node]:
        nodes: list[Node] = []
        while True:
            while self._is_op(self._peek(), "\n", ";", "&"):
                self.i += 1
            tok = self._peek()
            if tok is None:
                break
            if isinstance(tok, Word) and tok.bare() in stop:
                break
            if isinstance(tok, Op) and tok.op in stop:
                break
            if isinstance(tok, Op) and tok.op in (")", ";;", ";&", ";;&"):
                raise ShellSyntaxError(tok.line, f"unexpected {tok.op!r}")
            if isinstance(tok, Word) and tok.bare() in ("then", "elif", "else", "fi", "do", "done", "esac", "}"):
                raise ShellSyntaxError(tok.line, f"unexpected {tok.bare()!r}")
            nodes.append(self.parse_and_or())
        return nodes

    def parse_and_or(self) -> Node:
        items = [self.parse_pipeline()]
        ops: list[str] = []
        while isinstance(tok := self._peek(), Op) and tok.op in ("&&", "||"):
            self.i += 1
            self._skip_newlines()
            ops.append(tok.op)
            items.append(self.parse_pipeline())
        return AndOr(tuple(items), tuple(ops)) if ops else items[0]

    def parse_pipeline(self) -> Node:
        negate = False
        if self._is_word(self._peek(), "!"):
            negate = True
            self.i += 1
        items = [self.parse_command()]
        while self._is_op(self._peek(), "|", "|&"):
            self.i += 1
            self._skip_newlines()
            items.append(self.parse_command())
        return Pipeline(tuple(items), negate) if negate or len(items) > 1 else items[0]

    def parse_command(self) -> Node:
        tok = self._peek()
        line = self._line()
        if tok is None:
            raise ShellSyntaxError(line, "command expected at end of file")
        if isinstance(tok, Word):
            kw = tok.bare()
            if kw == "if":
                return self._parse_if()
            if kw in ("for", "select"):
                return self._parse_for()
            if kw in ("while", "until"):
                self.i += 1
                self.parse_list(frozenset({"do"}))
                self._expect_word("do")
                self.parse_list(frozenset({"done"}))
                self._expect_word("done")
                self._skip_redirects()
                return Skipped(f"'{kw}' loop", line)
            if kw == "case":
                return self._parse_case()
            if kw == "{":
                self.i += 1
                body = self.parse_list(frozenset({"}"}))
                self._expect_word("}")
                self._skip_redirects()
                return Group(tuple(body), subshell=False)
            if kw == "function":
                self.i += 1
                name = self._peek()
                if not isinstance(name, Word):
                    raise ShellSyntaxError(line, "function name expected")
                self.i += 1
                if self._is_op(self._peek(), "("):
                    self.i += 1
                    if not self._is_op(self._peek(), ")"):
                        raise ShellSyntaxError(line, "expected ')' after function name")
                    self.i += 1
                self._skip_newlines()
                self.parse_command()
                return Skipped(f"function {name.raw}", line)
            nxt = self.t[self.i + 1] if self.i + 1 < len(self.t) else None
            nxt2 = self.t[self.i + 2] if self.i + 2 < len(self.t) else None
            if self._is_op(nxt, "(") and self._is_op(nxt2, ")"):
                self.i += 3
                self._skip_newlines()
                self.parse_command()
                return Skipped(f"function {tok.raw}", line)
        if isinstance(tok, Op) and tok.op == "(":
            self.i += 1
            body = self.parse_list(frozenset({")"}))
            if not self._is_op(self._peek(), ")"):
                raise ShellSyntaxError(line, "'(' never closed")
            self.i += 1
            self._skip_redirects()
            return Group(tuple(body), subshell=True)
        return self._parse_simple()

    def _skip_redirects(self) -> None:
        while isinstance(tok := self._peek(), Op) and tok.op in _REDIRECTS:
            self.i += 1
            if isinstance(self._peek(), Word):
                self.i += 1

    def _parse_simple(self) -> Simple:
        line = self._line()
        assigns: list[Assign] = []
        words: list[Word | ArrayWord] = []
        while True:
            tok = self._peek()
            if isinstance(tok, Op):
                if tok.op in _REDIRECTS:
                    self.i += 1
                    if isinstance(self._peek(), Word):
                        self.i += 1
                    continue
                break
            if tok is None:
                break
            self.i += 1
            if not words and isinstance(tok, ArrayWord):
                assigns.append(Assign(tok.name, tok.append, None, tok.items, tok.line))
            elif not words and isinstance(tok, Word) and (a := _as_assign(tok)) is not None:
                assigns.append(a)
            else:
                words.append(tok)
        if not assigns and not words:
            tok = self._peek()
            what = "end of file" if tok is None else repr(tok.op if isinstance(tok, Op) else tok.raw)
            raise ShellSyntaxError(line, f"command expected, found {what}")
        return Simple(tuple(assigns), tuple(words), line)

    def _parse_if(self) -> If:
        line = self._line()
        self.i += 1
        clauses: list[tuple[tuple[Node, ...], tuple[Node, ...]]] = []
        cond = self.parse_list(frozenset({"then"}))
        self._expect_word("then")
        body = self.parse_list(frozenset({"elif", "else", "fi"}))
        clauses.append((tuple(cond), tuple(body)))
        else_body: tuple[Node, ...] | None = None
        while True:
            tok = self._peek()
            if self._is_word(tok, "elif"):
                self.i += 1
                cond = self.parse_list(frozenset({"then"}))
                self._expect_word("then")
                body = self.parse_list(frozenset({"elif", "else", "fi"}))
                clauses.append((tuple(cond), tuple(body)))
            elif self._is_word(tok, "else"):
                self.i += 1
                else_body = tuple(self.parse_list(frozenset({"fi"})))
            else:
                break
        self._expect_word("fi")
        self._skip_redirects()
        return If(tuple(clauses), else_body, line)

    def _parse_for(self) -> Skipped:
        line = self._line()
        kw = self._peek()
        self.i += 1
        # skip the header up to `do` at a command start
        prev_sep = False
        while True:
            tok = self._peek()
            if tok is None:
                raise ShellSyntaxError(line, "'for' without 'do'")
            if self._is_word(tok, "do") and prev_sep:
                break
            prev_sep = self._is_op(tok, ";", "\n")
            self.i += 1
        self.i += 1
        self.parse_list(frozenset({"done"}))
        self._expect_word("done")
        self._skip_redirects()
        return Skipped(f"'{kw.raw if isinstance(kw, Word) else 'for'}' loop", line)

    def _parse_case(self) -> Skipped:
        line = self._line()
        depth = 0
        while True:
            tok = self._peek()
            if tok is None:
                raise ShellSyntaxError(line, "'case' without 'esac'")
            self.i += 1
            if self._is_word(tok, "case"):
                depth += 1
            elif self._is_word(tok, "esac"):
                depth -= 1
                if depth == 0:
                    break
        self._skip_redirects()
        return Skipped("'case' statement", line)


def _as_assign(tok: Word) -> Assign | None:
    if not tok.parts or tok.parts[0].kind != "lit" or tok.parts[0].quoted:
        return None
    m = _ASSIGN_RE.match(tok.parts[0].text)
    if m is None:
        return None
    if m.group(2):  # A[i]=x: element assignment, treated as a no-op on A
        return Assign("", False, None, None, tok.line)
    rest = tok.parts[0].text[m.end() :]
    first = (Part("lit", rest, False, rest),) if rest else ()
    value = Word(first + tok.parts[1:], tok.line)
    return Assign(m.group(1), m.group(3) == "+", value, None, tok.line)


def parse(text: str, line: int = 1) -> list[Node]:
    return _Parser(lex(text, line)).parse()


# --------------------------------------------------------------------------------------------
# Evaluation


Hole = tuple[int, int, tuple[str, ...]]  # [start, end) of `value` that is unknown, and why


@dataclass(frozen=True)
class Text:
    """An expanded string.  `holes` mark the spans that are not known (their source text is kept
    in `value`) with the reasons; a Text without holes is fully resolved."""

    value: str
    holes: tuple[Hole, ...] = ()

    @staticmethod
    def unknown(raw: str, *why: str) -> Text:
        return Text(raw, ((0, len(raw), tuple(why)),))

    @property
    def resolved(self) -> bool:
        return not self.holes

    @property
    def unresolved(self) -> tuple[str, ...]:
        out: dict[str, None] = {}
        for h in self.holes:
            out.update(dict.fromkeys(h[2]))
        return tuple(out)

    @staticmethod
    def concat(texts: Iterable[Text]) -> Text:
        value: list[str] = []
        holes: list[Hole] = []
        at = 0
        for t in texts:
            value.append(t.value)
            holes.extend((s + at, e + at, w) for s, e, w in t.holes)
            at += len(t.value)
        return Text("".join(value), tuple(holes))

    def regions(self) -> list[tuple[str, tuple[str, ...] | None]]:
        """The text cut into (piece, None) known runs and (piece, reasons) holes, in order."""
        out: list[tuple[str, tuple[str, ...] | None]] = []
        at = 0
        for s, e, w in sorted(self.holes):
            if s > at:
                out.append((self.value[at:s], None))
            out.append((self.value[s:e], w))
            at = max(at, e)
        if at < len(self.value):
            out.append((self.value[at:], None))
        return out


@dataclass(frozen=True)
class Command:
    """A simple command the script would run, with its words expanded."""

    words: tuple[Text, ...]
    env: dict[str, Text]  # prefix assignments (VAR=x cmd ...)
    line: int
    assumed: tuple[str, ...] = ()  # undecidable `if` tests taken as true to reach it

    @property
    def argv(self) -> list[str]:
        return [w.value for w in self.words]


@dataclass
class _Field:
    parts: list[Text] = field(default_factory=list)
    started: bool = False

    def text(self) -> Text:
        return Text.concat(self.parts)


Value = Text | list[Text]


def _join(texts: list[Text], sep: str = " ") -> Text:
    out: list[Text] = []
    for k, t in enumerate(texts):
        if k:
            out.append(Text(sep))
        out.append(t)
    return Text.concat(out)


class Interpreter:
    """Evaluate parsed shell symbolically; collects variables, commands and notes."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.vars: dict[str, Value] = {k: Text(v) for k, v in (env or {}).items()}
        self.commands: list[Command] = []
        self.notes: list[str] = []
        self.assumed: list[str] = []
        self.defaults_used: dict[str, str] = {}
        self._eval_depth = 0

    # ---- driving
    def run_text(self, text: str, line: int = 1) -> None:
        self.run(parse(text, line))

    def run(self, nodes: Iterable[Node]) -> None:
        for node in nodes:
            self._exec(node)

    def _note(self, msg: str) -> None:
        if msg not in self.notes:
            self.notes.append(msg)

    def _exec(self, node: Node) -> None:
        if isinstance(node, Simple):
            self._exec_simple(node)
        elif isinstance(node, AndOr):
            self._exec_and_or(node)
        elif isinstance(node, Pipeline):
            for item in node.items:
                self._exec(item)
        elif isinstance(node, Group):
            self.run(node.body)
        elif isinstance(node, If):
            self._exec_if(node)
        elif isinstance(node, Skipped):
            self._note(f"line {node.line}: {node.what} not evaluated")

    def _exec_and_or(self, node: AndOr) -> None:
        """`a && b || c`: a decidable test on the left decides whether the right runs;
        otherwise every part is run (the commands are only recorded anyway)."""
        self._exec(node.items[0])
        prev = node.items[0]
        for op, item in zip(node.ops, node.items[1:], strict=True):
            verdict = self._truth(prev) if _is_test(prev) else None
            if not ((op == "&&" and verdict is False) or (op == "||" and verdict is True)):
                self._exec(item)
            prev = item

    def _exec_if(self, node: If) -> None:
        for cond, body in node.clauses:
            verdict = self._condition(cond)
            if verdict is True:
                self.run(body)
                return
            if verdict is None:
                desc = _describe(cond)
                self._note(f"line {node.line}: could not decide `{desc}`; assumed true")
                self.assumed.append(f"line {node.line}: `{desc}` assumed true")
                try:
                    self.run(body)
                finally:
                    self.assumed.pop()
                return
        if node.else_body is not None:
            self.run(node.else_body)

    # ---- simple commands
    def _exec_simple(self, node: Simple) -> None:
        if not node.words:
            for a in node.assigns:
                self._assign(a)
            return
        first = node.words[0]
        prog = first.literal() if isinstance(first, Word) else None
        if prog in ("export", "declare", "typeset", "local", "readonly"):
            for a in node.assigns:
                self._assign(a)
            for w in node.words[1:]:
                if isinstance(w, ArrayWord):
                    self._assign(Assign(w.name, w.append, None, w.items, w.line))
                elif (declared := _as_assign(w)) is not None:
                    self._assign(declared)
            return
        env = {a.name: self._expand_text(a.value) for a in node.assigns if a.name and a.value is not None}
        words: list[Text] = []
        for tok in node.words:
            if isinstance(tok, ArrayWord):
                words.append(Text(tok.raw))  # declare-style array argument of another command
            else:
                words.extend(self._expand_fields(tok))
            if len(words) > MAX_FIELDS:
                raise ShellLimitError(f"line {node.line}: command has more than {MAX_FIELDS} words")
        if not words:
            return
        name = words[0].value
        if name == "unset":
            for t in words[1:]:
                self.vars.pop(t.value, None)
            return
        if name == "eval":
            self._eval(words[1:], node.line)
            return
        if name in ("source", "."):
            target = words[1].value if len(words) > 1 else ""
            self._note(f"line {node.line}: `{name} {target}` not followed")
            return
        if len(self.commands) >= MAX_COMMANDS:
            raise ShellLimitError(f"more than {MAX_COMMANDS} commands")
        self.commands.append(Command(tuple(words), env, node.line, tuple(self.assumed)))

    def _eval(self, args: list[Text], line: int) -> None:
        if self._eval_depth >= MAX_EVAL_DEPTH:
            raise ShellLimitError(f"line {line}: eval nested more than {MAX_EVAL_DEPTH} deep")
        text = " ".join(a.value for a in args)
        self._eval_depth += 1
        try:
            self.run(parse(text, line))
        except ShellSyntaxError as e:
            raise ShellSyntaxError(line, f"in eval: {e.message}") from None
        finally:
            self._eval_depth -= 1

    def _assign(self, a: Assign) -> None:
        if not a.name:
            return
        if a.items is not None:
            items: list[Text] = []
            for w in a.items:
                items.extend(self._expand_fields(w))
                if len(items) > MAX_FIELDS:
                    raise ShellLimitError(f"line {a.line}: array {a.name} has more than {MAX_FIELDS} items")
            old = self.vars.get(a.name)
            if a.append:
                base = old if isinstance(old, list) else ([old] if isinstance(old, Text) else [])
                self.vars[a.name] = [*base, *items]
            else:
                self.vars[a.name] = items
            return
        value = self._expand_text(a.value) if a.value is not None else Text("")
        old = self.vars.get(a.name)
        if a.append:
            if isinstance(old, list):
                head = old[0] if old else Text("")
                self.vars[a.name] = [_checked(Text.concat([head, value])), *old[1:]]
                return
            value = Text.concat([old, value]) if isinstance(old, Text) else value
        self.vars[a.name] = _checked(value)

    # ---- expansion
    def _expand_text(self, word: Word | None) -> Text:
        """Expand without word splitting (assignments, [[ ]], here: one string)."""
        if word is None:
            return Text("")
        pieces: list[Text] = []
        for p in word.parts:
            if p.kind == "lit":
                pieces.append(Text(p.text))
                continue
            exp = self._expand_part(p)
            pieces.append(_join(exp) if isinstance(exp, list) else exp)
        return _checked(Text.concat(pieces))

    def _expand_fields(self, word: Word) -> list[Text]:
        """Expand with bash word splitting of unquoted expansions (no globbing).  Unknown spans
        are never split: they stay inside the field they start in."""
        fields: list[Text] = []
        cur = _Field()

        def finish() -> None:
            nonlocal cur
            if cur.started:
                fields.append(_checked(cur.text()))
            cur = _Field()

        def add_quoted(t: Text) -> None:
            cur.parts.append(t)
            cur.started = True

        def add_split(t: Text) -> None:
            for piece, why in t.regions():
                if why is not None:
                    cur.parts.append(Text.unknown(piece, *why))
                    cur.started = True
                    continue
                for tok in _IFS_SPLIT.split(piece):
                    if not tok:
                        continue
                    if tok[0] in " \t\n":
                        finish()
                    else:
                        cur.parts.append(Text(tok))
                        cur.started = True

        for p in word.parts:
            if p.kind == "lit":
                cur.parts.append(Text(p.text))
                cur.started = cur.started or p.quoted or bool(p.text)
                continue
            exp = self._expand_part(p)
            if isinstance(exp, list):  # ${A[@]} / ${A[*]}
                if p.quoted and _is_star(p):
                    add_quoted(_join(exp))
                    continue
                for k, t in enumerate(exp):
                    if k:
                        finish()
                    if p.quoted:
                        add_quoted(t)
                    else:
                        add_split(t)
            elif p.quoted:
                add_quoted(exp)
            else:
                add_split(exp)
        finish()
        return fields

    def _expand_part(self, p: Part) -> Text | list[Text]:
        if p.kind == "cmdsub":
            return Text.unknown(p.raw, f"{_short(p.raw)} is a command substitution (not run)")
        if p.kind == "arith":
            return self._arith(p)
        return self._param(p)

    def _param(self, p: Part) -> Text | list[Text]:
        inner = p.text
        raw = p.raw
        if inner.startswith("#") and len(inner) > 1:
            m = re.fullmatch(rf"#({_NAME})(\[[@*]\])?", inner)
            if m is None:
                return Text.unknown(raw, f"{raw} is an unsupported expansion")
            v = self.vars.get(m.group(1))
            if v is None:
                return Text.unknown(raw, self._why_unset(m.group(1)))
            if isinstance(v, list) and m.group(2):
                return Text(str(len(v)))
            t = (v[0] if v else Text("")) if isinstance(v, list) else v
            return Text(str(len(t.value))) if t.resolved else Text.unknown(raw, *t.unresolved)
        m = re.match(rf"({_NAME}|[0-9]+|[@*#?$!-])(?:\[([^\]]*)\])?", inner)
        if m is None:
            return Text.unknown(raw, f"{raw} is an unsupported expansion")
        name, index = m.group(1), m.group(2)
        rest = inner[m.end() :]
        op, arg = "", ""
        for candidate in (":-", ":=", ":+", ":?", "-", "=", "+", "?"):
            if rest.startswith(candidate):
                op, arg = candidate, rest[len(candidate) :]
                break
        if rest and not op:
            return Text.unknown(raw, f"{raw} is an unsupported expansion")

        state, value = self._resolve_name(name, index, raw)
        if state == "unresolved":
            assert isinstance(value, Text)
            if value.holes == ((0, len(value.value), value.holes[0][2]),) or op:
                return Text.unknown(raw, *value.unresolved)
            return value  # partly known: keep the known text around the unknown spans
        if not op:
            if state == "set":
                assert value is not None
                return value
            return Text.unknown(raw, self._why_unset(name))
        colon = op.startswith(":")
        kind = op[-1]
        is_set = state == "set"
        empty = is_set and _is_empty(value)
        if kind in "-=":
            if is_set and not (colon and empty):
                assert value is not None
                return value
            default = self._expand_text(_lex_value(arg))
            if not is_set:
                self.defaults_used.setdefault(name, default.value)
                self._note(f"{raw}: {self._what(name)} is not set in the file; used the default {default.value!r}")
            if kind == "=" and re.fullmatch(_NAME, name):
                self.vars[name] = default
            return default
        if kind == "+":
            if is_set and not (colon and empty):
                return self._expand_text(_lex_value(arg))
            if is_set:
                return Text("")
            return Text.unknown(raw, self._why_unset(name))
        # "?"
        if is_set and not (colon and empty):
            assert value is not None
            return value
        return Text.unknown(raw, self._why_unset(name))

    @staticmethod
    def _what(name: str) -> str:
        if name.isdigit():
            return f"script argument ${name}"
        return f"${name}"

    @staticmethod
    def _why_unset(name: str) -> str:
        if name.isdigit() and name != "0":
            return f"${name} is a script argument"
        if name in ("@", "*", "#"):
            return f"${name} stands for the script's own arguments"
        if name in ("?", "$", "!", "-", "0"):
            return f"${name} is only known when the script runs"
        return f"${name} is not set in the file"

    def _resolve_name(self, name: str, index: str | None, raw: str) -> tuple[str, Text | list[Text] | None]:
        """('set', value) | ('unresolved', Text) | ('unset', None)."""
        v = self.vars.get(name)
        if v is None:
            return "unset", None
        if index in ("@", "*"):
            return "set", list(v) if isinstance(v, list) else [v]
        if index is not None:
            items = v if isinstance(v, list) else [v]
            idx = index.strip()
            if not re.fullmatch(r"-?\d+", idx):
                return "unresolved", Text.unknown(raw, f"{raw}: index {idx!r} is not a number")
            k = int(idx)
            return ("set", items[k]) if -len(items) <= k < len(items) else ("unset", None)
        t = (v[0] if v else Text("")) if isinstance(v, list) else v
        return ("set", t) if t.resolved else ("unresolved", t)

    def _arith(self, p: Part) -> Text:
        text = self._expand_text(_lex_value(p.text))
        if not text.resolved:
            return Text.unknown(p.raw, *text.unresolved)
        expr_tokens: list[str] = []
        for m in re.finditer(r"0[xX][0-9a-fA-F]+|\d+|[A-Za-z_][A-Za-z0-9_]*|\*\*|<<|>>|\S", text.value):
            tok = m.group(0)
            if re.fullmatch(_NAME, tok):
                v = self.vars.get(tok)
                t = (v[0] if v else None) if isinstance(v, list) else v
                if t is None:
                    return Text.unknown(p.raw, f"{tok} in {_short(p.raw)} is not set in the file")
                if not t.resolved:
                    return Text.unknown(p.raw, *t.unresolved)
                val = t.value.strip()
                if not re.fullmatch(r"-?\d+", val):
                    return Text.unknown(p.raw, f"{tok}={val!r} in {_short(p.raw)} is not an integer")
                tok = f"({val})"
            expr_tokens.append(tok)
        result = _safe_arith(" ".join(expr_tokens))
        if result is None:
            return Text.unknown(p.raw, f"{_short(p.raw)} is arithmetic this reader does not evaluate")
        return Text(str(result))

    # ---- tests
    def _condition(self, nodes: tuple[Node, ...]) -> bool | None:
        if not nodes:
            return None
        for node in nodes[:-1]:
            self._exec(node)
        return self._truth(nodes[-1])

    def _truth(self, node: Node) -> bool | None:
        if isinstance(node, Pipeline):
            if len(node.items) != 1:
                return None
            r = self._truth(node.items[0])
            return None if r is None else (not r if node.negate else r)
        if isinstance(node, AndOr):
            acc = self._truth(node.items[0])
            for op, item in zip(node.ops, node.items[1:], strict=True):
                if op == "&&":
                    if acc is False:
                        continue
                    r = self._truth(item)
                    acc = False if r is False else (r if acc is True else None)
                else:
                    if acc is True:
                        continue
                    r = self._truth(item)
                    acc = True if r is True else (r if acc is False else None)
            return acc
        if isinstance(node, Group):
            return self._condition(node.body)
        if not isinstance(node, Simple):
            return None
        if not node.words:
            for a in node.assigns:
                self._assign(a)
            return True
        first = node.words[0]
        prog = first.bare() if isinstance(first, Word) else None
        if prog in ("true", ":"):
            return True
        if prog == "false":
            return False
        if prog in ("[", "test", "[["):
            words = [w for w in node.words[1:] if isinstance(w, Word)]
            args = [self._expand_text(w) for w in words]
            if prog == "[" and args and args[-1].value == "]":
                args = args[:-1]
            if prog == "[[" and args and args[-1].value == "]]":
                args = args[:-1]
            return _Test(args).evaluate()
        return None


def _is_test(node: Node) -> bool:
    if isinstance(node, Pipeline):
        return len(node.items) == 1 and _is_test(node.items[0])
    if not isinstance(node, Simple) or not node.words:
        return False
    first = node.words[0]
    return isinstance(first, Word) and first.bare() in ("[", "[[", "test", "true", "false", ":")


def _checked(t: Text) -> Text:
    if len(t.value) > MAX_VALUE_CHARS:
        raise ShellLimitError(f"a value grew past {MAX_VALUE_CHARS} characters")
    return t


def _is_star(p: Part) -> bool:
    return bool(re.match(rf"(?:{_NAME}|[0-9]+)\[\*\]$", p.text)) or p.text == "*"


def _is_empty(v: Text | list[Text] | None) -> bool:
    if v is None:
        return True
    if isinstance(v, list):
        return not v
    return v.value == ""


def _short(raw: str, limit: int = 60) -> str:
    one = " ".join(raw.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


def _describe(nodes: tuple[Node, ...]) -> str:
    def words(n: Node) -> str:
        if isinstance(n, Simple):
            return " ".join(w.raw for w in n.words) or "assignment"
        if isinstance(n, AndOr):
            out = words(n.items[0])
            for op, item in zip(n.ops, n.items[1:], strict=True):
                out += f" {op} {words(item)}"
            return out
        if isinstance(n, Pipeline):
            return ("! " if n.negate else "") + " | ".join(words(i) for i in n.items)
        return "..."

    return _short("; ".join(words(n) for n in nodes), 80)


_INT_LIMIT = 1 << 63


def _safe_arith(expr: str) -> int | None:
    """Evaluate integer arithmetic (+ - * / % ** << >> & | ^ ~, parentheses) without eval()."""
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None

    def ev(n: ast.AST) -> int:
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return _bound(n.value)
        if isinstance(n, ast.UnaryOp):
            v = ev(n.operand)
            if isinstance(n.op, ast.USub):
                return _bound(-v)
            if isinstance(n.op, ast.UAdd):
                return v
            if isinstance(n.op, ast.Invert):
                return ~v
            if isinstance(n.op, ast.Not):
                return int(not v)
        if isinstance(n, ast.BinOp):
            a, b = ev(n.left), ev(n.right)
            op = n.op
            if isinstance(op, ast.Add):
                return _bound(a + b)
            if isinstance(op, ast.Sub):
                return _bound(a - b)
            if isinstance(op, ast.Mult):
                return _bound(a * b)
            if isinstance(op, ast.Div | ast.FloorDiv):
                if b == 0:
                    raise ArithmeticError
                q = abs(a) // abs(b)
                return q if (a >= 0) == (b >= 0) else -q
            if isinstance(op, ast.Mod):
                if b == 0:
                    raise ArithmeticError
                r = abs(a) % abs(b)
                return r if a >= 0 else -r
            if isinstance(op, ast.Pow):
                if b < 0 or (b > 64 and abs(a) > 1):
                    raise ArithmeticError
                return _bound(a**b)
            if isinstance(op, ast.LShift | ast.RShift):
                if not 0 <= b < 64:
                    raise ArithmeticError
                return _bound(a << b if isinstance(op, ast.LShift) else a >> b)
            if isinstance(op, ast.BitAnd):
                return a & b
            if isinstance(op, ast.BitOr):
                return a | b
            if isinstance(op, ast.BitXor):
                return a ^ b
        raise ArithmeticError

    try:
        return ev(tree)
    except (ArithmeticError, RecursionError):
        return None


def _bound(v: int) -> int:
    if not -_INT_LIMIT <= v < _INT_LIMIT:
        raise ArithmeticError
    return v


class _Test:
    """`test` / `[ ]` / `[[ ]]` expression over expanded words; None when undecidable."""

    _UNARY_STR = frozenset({"-z", "-n"})
    _UNARY_FILE = frozenset(
        {"-a", "-b", "-c", "-d", "-e", "-f", "-g", "-h", "-k", "-p", "-r", "-s", "-t", "-u", "-w", "-x", "-L", "-S",
         "-O", "-G", "-N", "-v", "-o", "-R"}
    )  # fmt: skip
    _BINARY = frozenset(
        {"=", "==", "!=", "<", ">", "-eq", "-ne", "-lt", "-le", "-gt", "-ge", "=~", "-nt", "-ot", "-ef"}
    )

    def __init__(self, args: list[Text]) -> None:
        self.a = args
        self.i = 0

    def evaluate(self) -> bool | None:
        if not self.a:
            return False
        try:
            r = self._or()
        except IndexError:
            return None
        return r if self.i == len(self.a) else None

    def _tok(self) -> str | None:
        return self.a[self.i].value if self.i < len(self.a) and self.a[self.i].resolved else None

    def _raw(self) -> str:
        return self.a[self.i].value

    def _or(self) -> bool | None:
        acc = self._and()
        while self.i < len(self.a) and self._raw() in ("-o", "||"):
            self.i += 1
            r = self._and()
            acc = True if (acc is True or r is True) else (None if (acc is None or r is None) else False)
        return acc

    def _and(self) -> bool | None:
        acc = self._not()
        while self.i < len(self.a) and self._raw() in ("-a", "&&"):
            self.i += 1
            r = self._not()
            acc = False if (acc is False or r is False) else (None if (acc is None or r is None) else True)
        return acc

    def _not(self) -> bool | None:
        if self._raw() == "!" and self.i + 1 < len(self.a):
            self.i += 1
            r = self._not()
            return None if r is None else not r
        return self._primary()

    def _primary(self) -> bool | None:
        cur = self.a[self.i]
        if cur.value == "(" and cur.resolved:
            self.i += 1
            r = self._or()
            if self.i < len(self.a) and self._raw() == ")":
                self.i += 1
            return r
        # binary?
        if self.i + 2 < len(self.a) and self.a[self.i + 1].value in self._BINARY:
            left, op, right = self.a[self.i], self.a[self.i + 1].value, self.a[self.i + 2]
            self.i += 3
            if not (left.resolved and right.resolved):
                return None
            return _binary(left.value, op, right.value)
        if cur.value in self._UNARY_STR | self._UNARY_FILE and self.i + 1 < len(self.a):
            operand = self.a[self.i + 1]
            self.i += 2
            if cur.value in self._UNARY_FILE or not operand.resolved:
                return None
            return (operand.value == "") if cur.value == "-z" else (operand.value != "")
        self.i += 1
        return None if not cur.resolved else cur.value != ""


def _binary(left: str, op: str, right: str) -> bool | None:
    if op in ("=", "=="):
        return None if any(c in right for c in "*?[") else left == right
    if op == "!=":
        return None if any(c in right for c in "*?[") else left != right
    if op in ("-eq", "-ne", "-lt", "-le", "-gt", "-ge"):
        try:
            a, b = int(left.strip()), int(right.strip())
        except ValueError:
            return None
        return {"-eq": a == b, "-ne": a != b, "-lt": a < b, "-le": a <= b, "-gt": a > b, "-ge": a >= b}[op]
    if op == "<":
        return left < right
    if op == ">":
        return left > right
    return None


def interpret(text: str, env: dict[str, str] | None = None) -> Interpreter:
    """Lex, parse and symbolically run `text`; the result holds commands, variables and notes."""
    it = Interpreter(env)
    it.run_text(text)
    return it
