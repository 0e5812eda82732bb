"""The Qt-free model of one run (the one fold of its events) that the window, the recorder and the exports read."""

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
