"""The plain, Qt-free model of one run that the window's panels read: `SessionModel` and what it is made of."""

from __future__ import annotations

from app.session.model import Change, Outline, SessionModel
from app.session.series import ChartSeries
from app.session.steps import RunRecord, StepRecord
from app.session.tree import ROOT_ID, Node, PathStep, SearchTree, first_line

__all__ = [
    "ROOT_ID",
    "Change",
    "ChartSeries",
    "Node",
    "Outline",
    "PathStep",
    "RunRecord",
    "SearchTree",
    "SessionModel",
    "StepRecord",
    "first_line",
]
