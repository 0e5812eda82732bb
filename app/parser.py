"""The command line's parser: argparse that answers a bad option in one line and names each default in `--help`."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import NoReturn

# What argparse must read as an option's value though it starts with '-': -5MB and -1e-3 as well as its own -5 and
# -.5. Taken for an option, `--kv-budget -5MB` was refused as "expected one argument"; read as the value, the
# option's own parser says what is wrong with it.
NEGATIVE_VALUE = re.compile(r"^-\.?\d")


KEY_OPTION = "--api-key"  # no option: a key typed in a command line stays in the shell's history and process lists
KEY_ADVICE = ("; Beamwise takes a server's API key from an environment variable, never from the command line (a key "
              "typed there stays in the shell's history and in the list of processes): set a variable to the key and "
              "name it with --api-key-env NAME")


def _keys_hidden(extras: Sequence[str]) -> tuple[list[str], bool]:
    """The unknown arguments as a refusal shows them, the value of an --api-key (`--api-key KEY`, `--api-key=KEY`)
    as ***, and whether one was given: the refusal printed the key, on the screen and into terminal logs."""
    shown, after_key, given = [], False, False
    for word in extras:
        if word == KEY_OPTION or word.startswith(KEY_OPTION + "="):
            given = True
            shown.append(word if word == KEY_OPTION else f"{KEY_OPTION}=***")
        else:
            shown.append("***" if after_key and not word.startswith("-") else word)
        after_key = word == KEY_OPTION
    return shown, given


def _instead(option: str, chosen: OneLineParser) -> str:
    """What `chosen` takes for `option` where another command's option says the same thing: bench's --prm is
    run's, plan's, eval's and gui's --verifier prm --verifier-model PATH, which the refusal did not say."""
    if option == "--prm" and "--verifier-model" in chosen._option_string_actions:
        return f"; {chosen.prog} takes a PRM as --verifier prm --verifier-model PATH"
    return ""


class DefaultsFormatter(argparse.HelpFormatter):
    """`--help` names each option's default, unless the help already says it or there is none to name."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if isinstance(action, argparse.BooleanOptionalAction) and "default" not in text:  # --x / --no-x
            return f"{text} (default: {'on' if default else 'off'})".strip()  # False was shown as nothing
        nothing = default is None or default is False or default is argparse.SUPPRESS  # `is`: 0 == False
        if "default" in text or nothing or not action.option_strings:
            return text  # a default not shown as it is (--step-delimiter's newlines) is named in its help
        return f"{text} (default: {str(default).replace('%', '%%')})".strip()


class OneLineParser(argparse.ArgumentParser):
    """argparse that answers bad options with one line (what to change and where help is), exit status 2.

    Its subcommands are OneLineParsers too (argparse makes them of the parent's class), so every
    `--help` shows the defaults.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        # No abbreviations: argparse read `bench --verifier prm` as --verifier-endpoint and `run --question "..."`
        # as --question-file, and refused them in those options' words. A command's own options only, whole.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_VALUE  # argparse's own: only -5 and -.5 (Python 3.11, 3.12)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"beamwise: error: {message} (see `{self.prog} --help`)\n")

    def parse_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
                   ) -> argparse.Namespace:
        """As argparse's, but an unknown option is answered by the subcommand it was given to, so the line points
        to `beamwise run --help` and not to the top level's help, which lists no run option; an option another
        command takes is said to be that command's."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            chosen = self._chosen(namespace)
            shown, key_given = _keys_hidden(extras)
            chosen.error(f"unrecognized arguments: {' '.join(shown)}{KEY_ADVICE if key_given else ''}"
                         f"{self._elsewhere(extras, chosen)}")
        return namespace

    def _elsewhere(self, extras: Sequence[str], chosen: OneLineParser) -> str:
        """'; --verifier is an option of beamwise run, ...' for the first unknown option other commands take. An option
        the chosen command takes was left over only because it came after `--` (which ends the options): said so."""
        for option in (extra.split("=", 1)[0] for extra in extras if extra.startswith("--")):
            if option in chosen._option_string_actions:  # `sessions show -- 999 --db a.db` said --db was not its
                return f"; after -- every word is read as an argument, so {option} was not read as an option: put " \
                       "the options before --"
            owners = [p.prog for p in self._commands() if p is not chosen and option in p._option_string_actions]
            if owners:
                return f"; {option} is an option of {', '.join(owners)}, not of {chosen.prog}{_instead(option, chosen)}"
        return ""

    def _commands(self) -> list[OneLineParser]:
        """This parser and every subcommand parser below it."""
        found = [self]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                for parser in dict.fromkeys(action.choices.values()):  # an alias maps to the same parser
                    found += parser._commands()
        return found

    def _chosen(self, namespace: argparse.Namespace) -> OneLineParser:
        """The innermost subcommand parser `namespace` was parsed by (self when it has none)."""
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(namespace, action.dest, None))
                if chosen is not None:
                    return chosen._chosen(namespace)
        return self
