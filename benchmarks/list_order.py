"""The Sessions list's cost at a large database: `sessions list` (200 newest) and the window's conversation list
over N sessions recorded in several time zones, in this checkout or another (`--tree`, to compare).

    python -m benchmarks.list_order [--sessions 20000] [--tree PATH]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE = """
import sys, time
from datetime import datetime, timedelta, timezone
from app.conversations import list_conversations
from app.store import SessionStore

def best_of_5(call):
    times = []
    for _ in range(5):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return min(times) * 1000

store = SessionStore(sys.argv[1])
start = datetime(2026, 1, 1, tzinfo=timezone.utc)
with store.transaction() as conn:
    for i in range(int(sys.argv[2])):  # a minute apart, recorded at offsets 0 to -4 h (imports keep theirs)
        created = (start + timedelta(minutes=i)).astimezone(timezone(timedelta(hours=-(i % 5))))
        store.insert_session(conn, {"question": f"question {i}", "created": created.isoformat(timespec="seconds"),
                                    "status": "finished"})
listed, conversations = best_of_5(store.list_sessions), best_of_5(lambda: list_conversations(store))
print(f"{listed:.1f} {conversations:.1f} {store.list_sessions(limit=1)[0]['question']}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=20_000)
    parser.add_argument("--tree", type=Path, default=Path.cwd(), help="the checkout to run (default: this one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run([sys.executable, "-c", MEASURE, str(Path(folder) / "s.db"), str(args.sessions)],
                             cwd=args.tree, capture_output=True, text=True, check=True).stdout.split(maxsplit=2)
    print(f"{args.sessions:,} sessions: sessions list {out[0]} ms, conversation list {out[1]} ms (best of 5); "
          f"listed first: {out[2].strip()!r} (the newest is 'question {args.sessions - 1}')")


if __name__ == "__main__":
    main()
