"""The README against the code: every `beamwise ...` command it shows names options its subcommand has, every
subcommand is shown, and its links and named synthetic models exist. The README grew over many sessions while
options changed under it; these tests keep it from drifting again."""

from __future__ import annotations

import argparse
import re
from itertools import pairwise
from pathlib import Path

import pytest

from app.cli import build_parser
from engine.synthetic import SYNTHETIC_MODELS
from engine.verifiers.synthetic_prm import SYNTHETIC_PRMS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

# `beamwise` as a command: at a line's or code span's start, after a space, or after the venv's Scripts\ or bin/
# folder; not a folder of that name (`%LOCALAPPDATA%\beamwise\`, `dist/Beamwise/beamwise-gui`).
_COMMAND = re.compile(r"(?:^|(?<=[\s`(])|(?<=Scripts\\)|(?<=bin/))(?:beamwise(?:\.exe)?|-m app\.cli)(?=\s|$)")
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")
_OPTION = re.compile(r"(?<![\w-])--?[a-zA-Z][\w-]*")


def _code_texts(text: str) -> list[str]:
    """Every code block line (fenced or indented by four spaces, `\\` continuations joined) and inline code span."""
    texts, fenced = [], False
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            while line.rstrip().endswith("\\") and index < len(lines):
                line = line.rstrip()[:-1] + " " + lines[index].strip()
                index += 1
            texts.append(line)
        else:
            texts.extend(re.findall(r"`([^`]+)`", line))
    return texts


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _leaf(parser: argparse.ArgumentParser, words: list[str], path: tuple[str, ...] = ()):
    """The subcommand the leading `words` name: (its path, its parser, the words after it)."""
    while words and words[0] in _subcommands(parser):
        parser, path, words = _subcommands(parser)[words[0]], (*path, words[0]), words[1:]
    return path, parser, words


def readme_commands() -> list[tuple[str, tuple[str, ...], list[str]]]:
    """(the README's text, the subcommand path, the words after it) for every beamwise command the README shows.

    A comment after `#` is dropped; `a | b` alternatives (`sessions list | show ID | export ID ...`,
    `--db my.db | --no-save`) are each a command: a sibling subcommand after `|` replaces the last one,
    anything else continues the same command. Quoted text (a question) is one opaque word."""
    root, commands = build_parser(), []
    for text in _code_texts(README):
        match = _COMMAND.search(text)
        if match is None:
            continue
        rest = re.sub(r"(^|\s)#.*", "", text[match.end():])
        parent_path: tuple[str, ...] = ()
        for piece in rest.split(" | "):
            words = _QUOTED.sub("TEXT", piece).split()
            path, _, tail = _leaf(root, words)
            if not path and parent_path:  # `| show ID`: a sibling of the last subcommand, or more of its options
                path, _, tail = _leaf(root, [*parent_path[:-1], *words])
                path = path if len(path) == len(parent_path) else parent_path
            parent_path = path or parent_path
            commands.append((text.strip(), path, tail))
    return commands


def _parser_at(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        parser = _subcommands(parser)[name]
    return parser


def test_the_readme_shows_many_commands():
    commands = readme_commands()
    assert len(commands) > 60  # the parsing found the README's commands, not a handful
    assert ("run",) in {path for _, path, _ in commands} and ("sessions", "export") in {p for _, p, _ in commands}


def test_every_option_the_readme_gives_a_command_exists_in_its_parser():
    missing = []
    for text, path, words in readme_commands():
        parser = _parser_at(path)
        known = {name for action in parser._actions for name in action.option_strings}
        missing += [(" ".join(("beamwise", *path)), word, text) for word in words
                    if _OPTION.fullmatch(word.strip("[]")) and word.strip("[]") not in known]
    assert missing == []


def test_every_choice_the_readme_gives_an_option_is_one_it_takes():
    """`--policy lbs`, `--theme dark|light`, `--format md|json|html`: each value one of the option's choices."""
    wrong = []
    for text, path, words in readme_commands():
        choices = {name: action.choices for action in _parser_at(path)._actions if action.choices
                   for name in action.option_strings}
        for option, value in pairwise(words):
            if option in choices and not value.startswith("-") and value.isascii() and value.upper() != value:
                wrong += [(option, v, text) for v in value.split("|") if v not in choices[option]]
    assert wrong == []


def test_every_subcommand_is_in_the_readme():
    shown = {path for _, path, _ in readme_commands()}

    def leaves(parser, path=()):
        subs = _subcommands(parser)
        return [p for name, sub in subs.items() for p in leaves(sub, (*path, name))] if subs else [path]

    assert [" ".join(path) for path in leaves(build_parser()) if path not in shown] == []


def test_the_alternatives_of_a_line_are_each_parsed():
    """`beamwise sessions list | show ID | export ID --format ...`: each alternative its own subcommand."""
    paths = [path for text, path, _ in readme_commands() if text.startswith("beamwise sessions list | show")]
    assert paths == [("sessions", "list"), ("sessions", "show"), ("sessions", "export"), ("sessions", "import")]


@pytest.mark.parametrize("target", sorted(set(re.findall(r"\]\(([^)#\s]+)\)", README))))
def test_every_link_target_exists(target):
    assert (ROOT / target).exists()


def test_every_file_the_readme_names_exists():
    named = set(re.findall(r"\b((?:engine|app|tests|benchmarks|docs|packaging|resources)(?:/[\w.-]+)+)", README))
    named |= {f"benchmarks/{module}.py" for module in re.findall(r"-m benchmarks\.(\w+)", README)}
    assert sorted(path for path in named if not (ROOT / path).exists()) == []


def test_the_synthetic_models_listed_are_the_engines():
    listed = re.search(r"`synthetic:NAME` with seeded random weights: (.+?)\.\n\n", README, re.S)
    assert listed is not None
    assert set(re.findall(r"`([\w.-]+)`", listed.group(1))) == set(SYNTHETIC_MODELS)
    assert [name for name in SYNTHETIC_PRMS if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", README)] == []


def test_every_python_file_the_readme_names_exists_somewhere():
    """The Layout names files by their bare names (`lbs.py`, `prefix_io.py`): a rename leaves them behind."""
    here = {path.name for folder in ("engine", "app", "tests", "benchmarks", "docs", "packaging")
            for path in (ROOT / folder).rglob("*.py")}
    assert sorted(set(re.findall(r"\b(\w+\.py)\b", README)) - here) == []


def test_every_benchmarks_section_the_readme_cites_exists():
    """`(BENCHMARKS.md, issue 14)`: a heading of that issue is there."""
    benchmarks = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    cited = set(re.findall(r"BENCHMARKS\.md, [Ii]ssue (\d+)", README))
    assert cited
    assert sorted(n for n in cited if not re.search(rf"^#+ Issue {n}\b", benchmarks, re.M)) == []
