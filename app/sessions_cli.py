"""`beamwise sessions ...`: list, show, export, import, delete recorded sessions."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sessions", help="list, show, export, import or delete recorded sessions")
    p.set_defaults(handler=lambda args: (p.print_help(), 0)[1])
