"""`beamwise sessions ...`: list, show, export, import, rename, delete and move aside recorded sessions."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import app.formatting as fmt
from app import store_file
from app.confirm import confirmed
from app.db_files import TAILS
from app.db_path import db_file, db_option, default_db_path, nearest_there
from app.export import (
    FORMATS,
    ExportError,
    export_session,
    format_of_name,
    import_session,
    refuse_the_database,
    render_session,
)
from app.export.markdown import no_path_chosen
from app.export.md_escape import without_controls
from app.export.report import conversation_reports
from app.journal_import import open_session_store
from app.options import UsageError
from app.path_names import shown_path, too_long
from app.store import LARGEST_ID, SessionStore
from app.store_errors import StoreError, StoreTooNew

ID_HELP = "the session's id (`beamwise sessions list` shows them)"


def session_id(text: str) -> int:
    """An argparse type: a session id, 1 to SQLite's largest integer (a larger one ended in SQLite's
    OverflowError traceback, in `sessions show` and every command that takes an id)."""
    try:
        number = int(text)
    except ValueError:
        number = None
    if number is None or not 1 <= number <= LARGEST_ID:
        raise argparse.ArgumentTypeError(f"{text!r} is not a session id: give a whole number from 1 to {LARGEST_ID}")
    return number


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sessions", help="recorded sessions: list, show, export, import, rename, delete, or "
                       "move-aside a damaged database")
    p.set_defaults(handler=lambda args: (p.print_help(), 0)[1])
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument("--db", default=None, help=f"session database (default: {default_db_path()})")
    cmds = p.add_subparsers(dest="sessions_command", metavar="COMMAND")

    c = cmds.add_parser("list", parents=[db], help="recorded sessions, newest first")
    c.add_argument("search", nargs="?", default=None, help="only sessions whose title, question or answer has this")
    c.add_argument("--limit", type=int, default=50, help="list at most this many, newest first")
    c.set_defaults(handler=cmd_list)
    c = cmds.add_parser("show", parents=[db], help="one session: settings, chosen path and answer")
    c.add_argument("id", type=session_id, help=ID_HELP)
    c.set_defaults(handler=cmd_show)
    c = cmds.add_parser("export", parents=[db], help="write a session as Markdown, JSON or HTML")
    c.add_argument("id", type=session_id, help=ID_HELP)
    c.add_argument("--format", choices=FORMATS, default=None, help="default: from the -o suffix, else md")
    c.add_argument("-o", "--output", default=None, help="file to write (default: print to stdout)")
    c.add_argument("--force", action="store_true", help="replace the output file if it exists")
    c.set_defaults(handler=cmd_export)
    c = cmds.add_parser("import", parents=[db], help="add a session from a JSON export")
    c.add_argument("path", help="a JSON file `beamwise sessions export --format json` wrote")
    c.set_defaults(handler=cmd_import)
    c = cmds.add_parser("rename", parents=[db], help="give a session a new title")
    c.add_argument("id", type=session_id, help=ID_HELP)
    c.add_argument("title", help="the new title, in quotes")
    c.set_defaults(handler=cmd_rename)
    c = cmds.add_parser("delete", parents=[db], help="remove a session and everything recorded for it")
    c.add_argument("id", type=session_id, help=ID_HELP)
    c.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    c.set_defaults(handler=cmd_delete)
    c = cmds.add_parser("move-aside", parents=[db], help="rename a damaged database so a fresh one can start")
    c.add_argument("--force", action="store_true", help="move it aside even when it is not damaged")
    c.set_defaults(handler=cmd_move_aside)


def _open(args: argparse.Namespace, *, create: bool = False) -> SessionStore:
    """The store, with any run journals waiting for it imported first (each import is said on stderr). Only a
    command that adds a session (`create`: import) makes a --db file that is not there: `sessions list --db
    nonexist.db` made an empty database there and said "no sessions", hiding the typo."""
    missing = None if create or args.db is None else "nothing was read and no empty database was made"
    return open_session_store(args.db, notify=lambda text: print(f"beamwise: {text}", file=sys.stderr),
                              missing=missing)


def cmd_list(args: argparse.Namespace) -> int:
    if not 1 <= args.limit < LARGEST_ID:  # one more row is read: SQLite's largest integer, less one
        raise UsageError(f"--limit must be a whole number from 1 to {LARGEST_ID - 1} (got {args.limit}).")
    with _open(args) as store:
        rows = store.list_sessions(args.search, limit=args.limit + 1)
    more, rows = len(rows) > args.limit, rows[: args.limit]
    if not rows:
        print("no sessions" + (f" matching {args.search!r}" if args.search else ""))
        return 0
    print(f"{'id':>5}  {'date':16}  {'status':11}  {'model':22}  {'turn':>8}  title / answer")
    for s in rows:
        answer = _cut(s["answer"], 40)  # never between a letter and its accent or inside an emoji
        answer = f"  -> {answer}" if answer else ""
        turn = f"{s['turn']} of #{s['conversation_id']}" if s["turn"] > 1 else "1"
        print(f"{s['id']:>5}  {fmt.local_time(s['created']):16}  {s['status']:11}  {_cut(s['model'], 22):22}  "
              f"{turn:>8}  {_cut(s['title'], 50)}{answer}")
    if more:  # on stderr: a script reading the table reads only rows
        print(f"(the newest {args.limit} are listed; more sessions match: --limit {args.limit * 4} lists more)",
              file=sys.stderr)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with _open(args) as store:
        reports, index = conversation_reports(store, args.id)
    report, s = reports[index], reports[index].session
    print(f"session {args.id}: {_safe(s['title'])}")
    if len(reports) > 1:
        print(f"  turn {index + 1} of {len(reports)} of conversation {s['conversation_id']} (sessions "
              f"{', '.join(str(r.session['id']) for r in reports)})")
    print(f"  {fmt.local_time(s['created'], seconds=True)}  {s['status']}" + (f" ({s['error']})" if s["error"] else ""))
    print(f"  model {s['model']}, verifier {s['verifier']}, {s['device']}, policy {s['policy']}")
    print(f"  {fmt.steps(s['steps'])}, {s['candidates']} candidates, {s['candidate_tokens']} tokens, "
          f"{s['seconds'] or 0:.2f} s, H2D {s['h2d_bytes']:,} B, D2H {s['d2h_bytes']:,} B")
    if verifier := report.verifier_traffic():
        print(f"  {verifier}")
    unchosen = no_path_chosen(report)  # a run that did not finish chose none: its best beam so far follows
    print(f"\nquestion:\n{_safe(s['question'])}\n")
    if s.get("context_note"):
        print(fmt.sentence(s["context_note"]) + ".")
    print(unchosen or "chosen path:")
    for node in report.path:
        print(f"  step {node['step']} #{node['id']} score {fmt.score(node['score'])}: {_cut(node['text'], 100)}")
    print(f"\nanswer:\n{_safe(s['answer']) or f'({report.no_answer()})'}")
    for turn, other in enumerate(reports if len(reports) > 1 else [], 1):
        if turn == 1:
            print("\nconversation:")
        mark = "  <- this session" if turn == index + 1 else ""
        print(f"  turn {turn} (session {other.session['id']}, {other.session['status']}): "
              f"{_cut(other.session['question'], 60)} -> {_cut(other.session['answer'] or '-', 40)}{mark}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    fmt = args.format or format_of_name(args.output or "") or "md"
    if args.output is not None and not args.output.strip():
        raise ExportError("-o was given an empty file name; nothing was written.",
                          hint="Give a file name such as session.md, or - for standard output.")
    if args.output not in (None, "-") and (why := too_long(Path(args.output))) is not None:
        raise ExportError(f"cannot export to {shown_path(Path(args.output))}: {why}; nothing was written.",
                          hint="Choose a shorter file name (and folder names) for -o.")
    if args.output not in (None, "-") and Path(args.output).is_dir():
        raise ExportError(f"cannot export to {args.output}: it is a folder; nothing was written.",
                          hint=f"Give a file in it, e.g. {Path(args.output) / 'session.md'}.")
    if args.output not in (None, "-"):
        refuse_the_database(Path(args.output), args.db)  # before "add --force", which it refuses as well
    # only a file is replaced (a link's file too); a FIFO or a device such as /dev/stdout is written into
    if args.output not in (None, "-") and Path(args.output).is_file() and not args.force:
        raise ExportError(f"{args.output} already exists; nothing was written.",
                         hint="Add --force to replace it, or choose another file name.")
    with _open(args) as store:
        if args.output is None or args.output == "-":
            _write_utf8(render_session(store, args.id, fmt))
            return 0
        path = export_session(store, args.id, fmt, Path(args.output))
    into_file = Path(path).is_file()  # else on stderr: the stream written into (/dev/stdout) holds the export only
    print(f"wrote session {args.id} as {fmt} to {path}", file=sys.stdout if into_file else sys.stderr)
    return 0


def _write_utf8(text: str) -> None:
    """An export on stdout in UTF-8, whatever the console's encoding: `beamwise sessions export 3 > a.md` on
    Windows wrote cp1252, and each Chinese or Greek letter or emoji of the export was lost (the file says it is
    UTF-8, as the exports written with -o are; a Windows console takes UTF-8 bytes too)."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:  # a stream without bytes under it (a test's StringIO)
        sys.stdout.write(text)
        return
    sys.stdout.flush()
    buffer.write(text.encode("utf-8"))
    buffer.flush()


def cmd_import(args: argparse.Namespace) -> int:
    db = db_file(args.db)
    made = not db.exists() and not db.is_symlink()  # a link's target is not removed through it
    folders = _missing_folders(db.parent)  # the default database's data folder is made with it on a fresh install
    try:
        with _open(args, create=True) as store:
            try:
                new_id = import_session(store, Path(args.path))
            except BaseException:
                made = made and not store.list_sessions(limit=1)  # a journal imported on opening stays
                raise
            turns = store.get_session(new_id)["turn"]
    except BaseException:
        if made:  # a refused import into a database it made leaves no empty database, nor the folders made for it
            _remove_made(db, folders)
        raise
    more = f" (turn {turns} of a conversation of {turns} turns)" if turns > 1 else ""
    print(f"imported {args.path} as session {new_id}{more}")
    return 0


def _missing_folders(folder: Path) -> list[Path]:
    """The folders from `folder` up that are not there, deepest first: those opening a database in `folder` makes.
    None under a file or a broken link, or where a folder on the way cannot be read (nothing is made there)."""
    try:
        missing, nearest = nearest_there(folder)
        return missing if nearest is None or nearest.is_dir() else []
    except OSError:
        return []


def _remove_made(db: Path, folders: list[Path]) -> None:
    """Remove the database `db` and its side files, then the `folders` made for it, each while it is empty. What
    cannot be removed stays: a folder another file was put in, a path under a file (NotADirectoryError)."""
    for tail in TAILS:
        with contextlib.suppress(OSError):
            db.with_name(db.name + tail).unlink(missing_ok=True)
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def cmd_rename(args: argparse.Namespace) -> int:
    """Renames the one session given. A conversation's title is its first turn's (the window lists and renames
    that one), so renaming a later turn says where the conversation's own title is changed."""
    with _open(args) as store:
        try:
            store.rename(args.id, args.title)
        except ValueError as error:  # a title with no text (app/store.py): the user's to change
            raise UsageError(str(error)) from error
        session = store.get_session(args.id)
    print(f"session {args.id} is now {' '.join(args.title.split())!r}")
    if session["turn"] > 1:  # on stderr: a script reading the line above reads it alone
        first = session["conversation_id"]
        print(f"beamwise: session {args.id} is turn {session['turn']} of conversation #{first}, which the window "
              f"lists by its first turn's title: `beamwise sessions rename {first}{db_option(args.db)} \"...\"` "
              "renames the "
              "conversation.", file=sys.stderr)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with _open(args) as store:
        title = store.deletable(args.id)["title"]  # a refusal comes before the question, not after a y
        if not args.yes:
            if not sys.stdin.isatty():
                raise UsageError(f"deleting session {args.id} needs confirmation; add --yes to delete it.")
            if not confirmed(f"Delete session {args.id} {title!r} and everything recorded for it? [y/N] "):
                print("kept it")
                return 1
        store.delete(args.id)
    print(f"deleted session {args.id} {title!r}")
    return 0


def cmd_move_aside(args: argparse.Namespace) -> int:
    path = db_file(args.db)  # `--db ""` is refused as empty (it moved the default database aside)
    if not path.exists():
        raise StoreError(f"there is no database at {path} to move aside.")
    if not args.force and store_file.damage(path) is None:
        refused = store_file.schema_refusal(path)  # `sessions list` would refuse it too: say what will work
        if isinstance(refused, StoreTooNew):
            raise StoreError(f"the session database {path} is not damaged: a newer Beamwise wrote it, with a schema "
                             "this one does not know; nothing was moved.",
                             hint="Update Beamwise to read its sessions, or add --force to move it aside (it is kept "
                                  "next to it) and start a fresh database with this version.")
        if refused is not None:
            raise StoreError(f"{path} is not damaged: it is a SQLite database of another program, not Beamwise "
                             "sessions; nothing was moved.",
                             hint="Check the --db path, or add --force to move it aside anyway.")
        raise StoreError(f"the session database {path} is not damaged; nothing was moved.",
                         hint=f"`beamwise sessions list{db_option(args.db)}` shows its sessions; add --force to move "
                              "it aside anyway and start a fresh database.")
    target = store_file.move_aside(path)
    print(f"moved {path} to {target}; the next run starts a fresh database")
    return 0


def _safe(text: str | None) -> str:
    """Model text without terminal control characters (an escape sequence must not drive the terminal, a carriage
    return must not write over the line): the Markdown export's rule, \r a line break."""
    return without_controls(text or "")


def _cut(text: str | None, width: int) -> str:
    return fmt.brief(_safe(text), width)
