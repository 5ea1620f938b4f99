"""The README and docs/ hold together: every relative link (and #anchor) resolves, the README
stays a landing page, and every `tvm-pool ...` command in a shell block parses with the CLI's
own argparse parser (a real subcommand, only options it has, values of the right type).

Fast: no TVM compile (building the CLI's parser imports tvm_pool.cli, hence TVM)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import shlex
import sys
import textwrap
from pathlib import Path
from unittest import mock
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 250
DOC_FILES = [README] + sorted((ROOT / "docs").glob("*.md"))
SHELL_INFO = {"sh", "bash", "console", "shell", "shell-session"}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --------------------------------------------------------------------------------------------
# Markdown: code fences, headings, links
# --------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^`\s]*)")


def _blocks(text: str):
    """Yields (line_number, line, fence) for every line: fence is None outside fenced code, else
    (info string, first line number of the block); the fence lines themselves are skipped."""
    fence = None  # (marker char, marker length, info, start line)
    for number, line in enumerate(text.split("\n"), start=1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = (m.group(1)[0], len(m.group(1)), m.group(2).lower(), number + 1)
            continue
        if fence is not None and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1] and not m.group(2):
            fence = None
            continue
        yield number, line, (None if fence is None else (fence[2], fence[3]))


def _strip_code_spans(line: str) -> str:
    """Removes inline code (`...`, ``...``): links inside it are not links."""
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading's text: the rendered text (links by their text, code and
    emphasis markers gone) lowercased, every character that is not a letter, digit, space, '-' or
    '_' dropped, each space turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w: Unicode letters, digits and '_'
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file, duplicates numbered -1, -2, ... as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for _, line, fence in _blocks(path.read_text(encoding="utf-8")):
        if fence is not None:
            continue
        m = re.match(r"^ {0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$", line)
        if not m:
            continue
        slug = github_slug(m.group(2))
        if slug in seen:
            seen[slug] += 1
            out.add(f"{slug}-{seen[slug]}")
        else:
            seen[slug] = 0
            out.add(slug)
    return out


_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")


def links(path: Path):
    """(line number, target) of every inline link, image and reference definition outside code."""
    for number, line, fence in _blocks(path.read_text(encoding="utf-8")):
        if fence is not None:
            continue
        line = _strip_code_spans(line)
        for m in _INLINE_LINK.finditer(line):
            yield number, m.group(1).strip("<>")
        m = _REF_DEF.match(line)
        if m:
            yield number, m.group(1).strip("<>")


def link_problem(source: Path, target: str) -> str | None:
    """Why `target`, linked from `source`, does not resolve on GitHub; None when it does."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto:, ...: not checked here
        return None
    path_part, _, anchor = target.partition("#")
    path_part = unquote(path_part)
    if not path_part:
        dest = source
    elif path_part.startswith("/"):
        dest = ROOT / path_part.lstrip("/")
    else:
        dest = (source.parent / path_part).resolve()
    if not dest.exists():
        return f"{target}: {path_part} does not exist"
    try:
        dest.relative_to(ROOT)
    except ValueError:
        return f"{target}: points outside the repository"
    if not anchor:
        return None
    anchor = unquote(anchor)
    if dest.suffix.lower() == ".md" and dest.is_file():
        if anchor.lower() not in anchors(dest):
            return f"{target}: no heading of {_rel(dest)} has the anchor #{anchor}"
        return None
    if dest.is_file() and re.fullmatch(r"L\d+(-L\d+)?", anchor):  # a line of a source file
        return None
    return f"{target}: an anchor into {_rel(dest)}, which has no headings"


@pytest.mark.parametrize("doc", DOC_FILES, ids=_rel)
def test_relative_links_resolve(doc):
    problems = [f"{_rel(doc)}:{n}: {why}" for n, target in links(doc) if (why := link_problem(doc, target))]
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_readme_is_a_landing_page():
    lines = README.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move the depth to a page of docs/")


def test_readme_has_the_ci_setup_commands():
    """.ci/run runs the README's two set-up commands; they stay there, literally, in sh blocks."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    blocks = {}
    for _, line, fence in _blocks(README.read_text(encoding="utf-8")):
        if fence is not None and fence[0] == "sh":
            blocks.setdefault(fence[1], []).append(line)
    sh_lines = {line.strip() for block in blocks.values() for line in block}
    for command in (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/tvm-pool demo",
        ".venv/bin/python -m pytest -q",
    ):
        assert command in sh_lines, f"README.md lost the set-up command: {command}"
        assert command.replace("pip install -e", "pip install -q -e") in ci or command in ci


# Self-test of the checker: a broken link and a wrong anchor are caught, GitHub's slugs hold.
def test_link_checker_catches_breakage(tmp_path, monkeypatch):
    assert github_slug("From PyTorch (`torch.export`)") == "from-pytorch-torchexport"
    assert github_slug("PyTorch (`tvm_pool.from_exported_program`)") == "pytorch-tvm_poolfrom_exported_program"
    assert github_slug("Run on a GPU (an NVIDIA H100 80GB HBM3, 2026-11-26)") == "run-on-a-gpu-an-nvidia-h100-80gb-hbm3-2026-11-26"
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Title\n\n## Part\n\n## Part\n\n```sh\n# not a heading\n```\n")
    src = tmp_path / "b.md"
    src.write_text("[ok](a.md#part-1) [bad](a.md#not-a-heading) [gone](c.md) `[code](x.md)`\n")
    assert anchors(tmp_path / "a.md") == {"title", "part", "part-1"}
    assert [t for _, t in links(src)] == ["a.md#part-1", "a.md#not-a-heading", "c.md"]
    assert link_problem(src, "a.md#part-1") is None
    assert "no heading" in link_problem(src, "a.md#not-a-heading")
    assert "does not exist" in link_problem(src, "c.md")


# --------------------------------------------------------------------------------------------
# Commands in shell blocks
# --------------------------------------------------------------------------------------------


def shell_commands(path: Path):
    """(line number, argv) of every simple command in the file's sh/bash/console blocks: line
    continuations joined, comments dropped, split at &&, ||, ;, | and &, leading VAR=value
    assignments and redirections removed. In console blocks only `$ ` prompt lines count."""
    logical: list[tuple[int, str]] = []
    pending = None
    for number, line, fence in _blocks(path.read_text(encoding="utf-8")):
        if fence is None or fence[0] not in SHELL_INFO:
            pending = None
            continue
        if fence[0] in ("console", "shell-session") and pending is None:
            if not line.lstrip().startswith("$ "):
                continue
            line = line.lstrip()[2:]
        if pending is not None:
            pending = (pending[0], pending[1] + " " + line.strip())
        else:
            pending = (number, line.strip())
        if pending[1].endswith("\\"):
            pending = (pending[0], pending[1][:-1])
            continue
        logical.append(pending)
        pending = None
    for number, line in logical:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
        words: list[str] = []
        skip_next = False
        for token in tokens + [";"]:
            if skip_next:
                skip_next = False
                continue
            if token and all(c in "();<>|&" for c in token):
                if "<" in token or ">" in token:  # redirection: drop its fd and its file
                    if words and words[-1].isdigit():
                        words.pop()
                    skip_next = True
                    continue
                while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                    words.pop(0)
                if words:
                    yield number, words
                words = []
                continue
            words.append(token)


def _exact_options(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """Options in `args` that `parser` does not have under exactly that name (argparse itself would
    accept an abbreviation)."""
    unknown = []
    actions = parser._option_string_actions  # pylint: disable=protected-access
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if not arg.startswith("-") or arg == "-" or re.fullmatch(r"-\d+(\.\d*)?", arg):
            continue
        name, has_value = arg.split("=", 1)[0], "=" in arg
        action = actions.get(name)
        if action is None:
            unknown.append(name)
        elif action.nargs != 0 and not has_value and action.nargs not in ("?", "*"):
            i += 1  # its value
    return unknown


def _parses(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """None if `parser` parses `args` (or prints --help); else argparse's message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(args)
    except SystemExit as stop:
        if stop.code not in (0, None):
            return err.getvalue().strip() or f"exit {stop.code}"
    return None


@pytest.fixture(scope="module")
def cli_parsers():
    """tvm-pool's parser as `tvm_pool.cli:main` builds it, its subcommands, and the parser of
    `tvm-pool bench` (tvm_pool.bench.runner.parse_args: main hands bench its arguments untouched)."""
    from tvm_pool import cli  # pylint: disable=import-outside-toplevel
    from tvm_pool.bench import runner  # pylint: disable=import-outside-toplevel

    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # pylint: disable=protected-access
    captured = []

    def capture(self, args=None, namespace=None):
        captured.append(self)
        return argparse.Namespace()

    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture):
        runner.parse_args([])
    return parser, dict(subparsers.choices), captured[0]


def check_tvm_pool(args: list[str], parsers) -> str | None:
    """Why `tvm-pool ARGS` is not a command the CLI takes; None when it is."""
    parser, commands, bench_parser = parsers
    i = 0
    while i < len(args) and args[i].startswith("-"):  # global flags before the subcommand
        i += 1
    glob, rest = args[:i], args[i:]
    if glob and (bad := _exact_options(parser, glob)):
        return f"unknown option(s) {bad} before the subcommand"
    if not rest:
        return "no subcommand"
    sub, sub_args = rest[0], rest[1:]
    if sub not in commands:
        return f"no subcommand {sub!r} (there are: {', '.join(commands)})"
    if sub == "bench":
        target, full = bench_parser, sub_args
    else:
        target, full = commands[sub], args
    if bad := _exact_options(target, sub_args):
        return f"`tvm-pool {sub}` has no option(s) {', '.join(bad)}"
    if (why := _parses(bench_parser if sub == "bench" else parser, full)) is not None:
        return why
    return None


def _python_problem(argv: list[str]) -> str | None:
    """`python -m MODULE` names a module that exists; `python SCRIPT.py` a script that exists."""
    args = argv[1:]
    if "-c" in args:
        return None
    if "-m" in args:
        module = args[args.index("-m") + 1]
        return None if importlib.util.find_spec(module) is not None else f"no module {module}"
    script = next((a for a in args if not a.startswith("-")), None)
    if script and script.endswith(".py") and not (ROOT / script).exists():
        return f"no script {script}"
    return None


def _command_cases():
    for doc in DOC_FILES:
        for number, argv in shell_commands(doc):
            yield pytest.param(doc, argv, id=f"{_rel(doc)}:{number}: {shlex.join(argv)[:70]}")


COMMAND_CASES = list(_command_cases())


@pytest.mark.parametrize("doc, argv", [c for c in COMMAND_CASES if os.path.basename(c.values[1][0]) == "tvm-pool"])
def test_tvm_pool_commands_parse(doc, argv, cli_parsers):
    why = check_tvm_pool(argv[1:], cli_parsers)
    assert why is None, f"{_rel(doc)}: `{shlex.join(argv)}`: {why}"


@pytest.mark.parametrize(
    "doc, argv", [c for c in COMMAND_CASES if re.fullmatch(r"python(3(\.\d+)?)?", os.path.basename(c.values[1][0]))])
def test_python_commands_name_real_modules(doc, argv):
    why = _python_problem(argv)
    assert why is None, f"{_rel(doc)}: `{shlex.join(argv)}`: {why}"


@pytest.mark.parametrize("doc", DOC_FILES, ids=_rel)
def test_python_blocks_compile(doc):
    """Every ```python block is valid Python (compiled, not run)."""
    blocks: dict[int, list[str]] = {}
    for _, line, fence in _blocks(doc.read_text(encoding="utf-8")):
        if fence is not None and fence[0] in ("python", "py"):
            blocks.setdefault(fence[1], []).append(line)
    for start, lines in blocks.items():
        source = textwrap.dedent("\n".join(lines))  # a block inside a list item is indented
        try:
            compile(source, f"{_rel(doc)}:{start}", "exec")
        except SyntaxError as err:
            pytest.fail(f"{_rel(doc)}:{start}: the python block does not compile: {err}")


def test_readme_has_tvm_pool_commands():
    """The command check above is not vacuous: the README's tour has every road's commands."""
    subs = {argv[1] for doc, argv in (c.values for c in COMMAND_CASES)
            if doc == README and os.path.basename(argv[0]) == "tvm-pool" and len(argv) > 1}
    assert {"demo", "inspect", "compile", "run", "tune"} <= subs


def test_command_checker_catches_mistakes(cli_parsers):
    assert check_tvm_pool(["compile", "m.onnx", "-o", "m.so", "--target", "arm"], cli_parsers) is None
    assert check_tvm_pool(["-q", "run", "m.so", "--inputs", "in.npz", "--repeat", "3"], cli_parsers) is None
    assert check_tvm_pool(["bench", "--only", "nhwc"], cli_parsers) is None
    assert "no subcommand" in check_tvm_pool(["compiel", "m.onnx"], cli_parsers)
    assert "--tuning-logs" in check_tvm_pool(["compile", "m.onnx", "--tuning-logs", "d"], cli_parsers)
    assert "--trial" in check_tvm_pool(["tune", "m.onnx", "--trial", "8"], cli_parsers)  # an abbreviation
    assert "--bogus" in check_tvm_pool(["bench", "--bogus"], cli_parsers)
    assert check_tvm_pool(["tune", "m.onnx", "--trials", "many"], cli_parsers) is not None  # argparse's type
    assert check_tvm_pool(["run"], cli_parsers) is not None  # the model is required
    doc = ROOT / "x.md"
    with mock.patch.object(Path, "read_text", return_value=(
            "```sh\n# comment\nA=1 .venv/bin/tvm-pool compile m.onnx \\\n  --target arm -o m.so 2>&1  # note\n"
            "python -m venv .venv && .venv/bin/tvm-pool demo | tee log\n```\n"
            "```console\n$ tvm-pool run m.so\noutput line tvm-pool nonsense\n```\n")):
        got = list(shell_commands(doc))
    assert got == [
        (3, [".venv/bin/tvm-pool", "compile", "m.onnx", "--target", "arm", "-o", "m.so"]),
        (5, ["python", "-m", "venv", ".venv"]),
        (5, [".venv/bin/tvm-pool", "demo"]),
        (5, ["tee", "log"]),
        (8, ["tvm-pool", "run", "m.so"]),
    ]
