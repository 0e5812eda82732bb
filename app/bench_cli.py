"""`beamwise bench`: compare KV policies on one workload."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def add_parser(sub: argparse._SubParsersAction, add_search_options: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser("bench", help="compare KV offloading policies on one workload")
    p.set_defaults(handler=lambda args: (p.print_help(), 0)[1])
