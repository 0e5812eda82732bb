"""`beamwise models list|info|pull|remove|add`: the models on this machine, and downloads only when asked.

app.model_library (and torch, for the models' facts) is imported by the commands that use it, not here: this
module is imported by every `beamwise` command to build its parser."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import app.formatting as fmt
from app.confirm import confirmed
from app.options import UsageError
from app.shell_words import quoted


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list, inspect, download or remove models")
    p.set_defaults(handler=lambda args: (p.print_help(), 0)[1])
    cmds = p.add_subparsers(dest="models_command", metavar="COMMAND")
    c = cmds.add_parser("list", help="every model here: bundled, the models folder, folders you added")
    c.set_defaults(handler=cmd_list)
    c = cmds.add_parser("info", help="one model: architecture, parameters, dtype, size, context, KV per token")
    c.add_argument("name", help="a name from `models list`, a path, or synthetic:NAME")
    c.set_defaults(handler=cmd_info)
    c = cmds.add_parser("pull", help="download a model from a Hugging Face hub into the models folder")
    c.add_argument("repo", help="owner/name on the hub")
    c.add_argument("--file", default=None, help="only this file (one .gguf of a GGUF repository)")
    c.add_argument("--endpoint", default=None, help="the hub's address (default: https://huggingface.co)")
    c.add_argument("--revision", default="main", help="branch, tag or commit")
    c.set_defaults(handler=cmd_pull)
    c = cmds.add_parser("remove", help="delete a model Beamwise downloaded, after asking (never anything else), "
                                       "or take an added folder off the list (no question: its files stay)")
    c.add_argument("name", help="a name from `beamwise models list`")
    c.add_argument("--yes", action="store_true", help="delete without asking (needed where no terminal can answer)")
    c.set_defaults(handler=cmd_remove)
    c = cmds.add_parser("add", help="list a model folder or .gguf you keep elsewhere (Beamwise never deletes it)")
    c.add_argument("path", help="a model folder (with its config.json) or a .gguf file")
    c.set_defaults(handler=cmd_add)


def cmd_list(args: argparse.Namespace) -> int:
    from app import model_library as lib

    print(f"{'name':<32}{'role':<24}{'params':>10}{'size':>11}{'KV/token':>11}  where")
    entries = lib.list_models()
    names = [e.name for e in entries]
    for e in entries:
        params = lib.parameters_text(e.facts)
        kv = "-" if e.facts is None else fmt.size(e.facts.kv_token_bytes)
        mark = " (downloaded)" if e.downloaded else ""
        print(f"{fmt.brief(e.name, 31):<32}{e.role:<24}{params:>10}{fmt.size(e.size_bytes):>11}{kv:>11}  "
              f"{e.where}{mark}")
        if e.problem:
            print(f"{'':<4}problem: {e.problem}")
        if names.count(e.name) > 1:  # the name alone is refused: say what names this one
            print(f"{'':<4}another model here has this name: give this one as {e.source}")
    print(f"\nmodels folder: {lib.models_dir()}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    """The same rows for a model by its name or its path; exit 2 where it is no model or cannot run (its problem
    row says why)."""
    from app import model_library as lib

    path = Path(args.name).expanduser()
    if _exists(path):
        entry = lib.entry_at(path)  # a listed model by its path is what its name shows
    elif path.is_absolute() or len(path.parts) > 1:  # a path, not a name from the list
        raise UsageError(f"{path} does not exist; give a name from `beamwise models list` or a model's path.")
    else:
        entry = lib.find(args.name)
    for label, value in lib.describe(entry):
        print(f"{label:<24}{value}")
    return 2 if entry.problem else 0  # a script asking about a model learns it cannot run


def cmd_pull(args: argparse.Namespace) -> int:
    from app.model_pull import DEFAULT_ENDPOINT, PullCancelled, pull

    cancel, last = threading.Event(), [0.0]

    def report(progress) -> None:
        now, done = time.monotonic(), progress.done >= progress.total
        if (now - last[0] >= 0.5 and not done) or (done and last[0] != float("inf")):
            last[0] = float("inf") if done else now  # the 100% line is printed once
            end = "\r" if sys.stderr.isatty() and progress.done < progress.total else "\n"
            print(f"[pull] {progress.line(now)}", end=end, file=sys.stderr, flush=True)

    try:
        folder = pull(args.repo, filename=args.file, endpoint=args.endpoint or DEFAULT_ENDPOINT,
                      revision=args.revision, report=report, cancel=cancel)
    except (KeyboardInterrupt, PullCancelled):
        print("\nbeamwise: the download stopped; the same `beamwise models pull` resumes it.", file=sys.stderr)
        return 130
    print(f"downloaded {args.repo} to {folder}; {_use_hint(folder)}")
    return 0


def _use_hint(folder: Path) -> str:
    """What --model takes for a finished pull: its name where that names it alone, else its path; a folder of
    .gguf files (a GGUF repository pulled whole) is no model itself, so the hint names one of its files."""
    from app.models_folder import named, runnable

    use = runnable(folder)
    if use == folder and not (folder / "config.json").is_file():
        ggufs = sorted(p.name for p in folder.glob("*.gguf"))
        if ggufs:
            return f"use one of its .gguf files with --model, e.g. --model {folder / ggufs[0]}"
    by_name = f" (or --model {folder.name})" if named(folder.name) == [use] else ""
    return f"use it with --model {use}{by_name}"


def _exists(path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long for the file system: no such model
        return False


def cmd_remove(args: argparse.Namespace) -> int:
    from app import model_library as lib

    entry = lib.find(args.name)
    if entry.where == "added":  # no question, as in the window: nothing is deleted, and `models add` undoes it
        lib.forget_folder(Path(entry.source))
        again = f" (`beamwise models add {quoted(entry.source)}` lists it again)" if _exists(Path(entry.source)) else ""
        print(f"took {entry.source} off the list; its files were not touched{again}")
        return 0
    lib.removable(entry)  # not Beamwise's to delete, or being downloaded: refused before the question
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"removing {entry.name} needs confirmation; add --yes to remove it.")
        if not confirmed(f"Delete {entry.source} ({fmt.size(entry.size_bytes)})? [y/N] "):
            print("kept it")
            return 1
    lib.remove(entry)
    print(f"removed {entry.source}")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from app import model_library as lib

    if (listed := lib.listed_already(Path(args.path).expanduser())) is not None:
        print(listed)
        return 0
    added = lib.add_folder(Path(args.path).expanduser())  # a path that is no model is refused here
    others = lib.namesakes(added)
    if others:  # its name alone is refused: the path names it
        print(f"added {added}; another model here is named {added.name} too ({', '.join(others)}), so give this one "
              f"by its path (--model {added}); `beamwise models remove {quoted(str(added))}` takes it off the list "
              "again")
    else:
        print(f"added {added}; `beamwise models remove {quoted(added.name)}` takes it off the list again")
    return 0
