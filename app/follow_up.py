"""The options a follow-up to a run repeats, in the line `beamwise run` ends with ("ask a follow-up with: ...")."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.db_path import db_option
from app.shell_words import quoted
from engine.config import SearchConfig


def again_options(args: argparse.Namespace) -> str:
    """The options a follow-up to this run repeats: the database it was recorded in (without --db the follow-up
    read the default database, and went after another conversation's turn of that id), the model it ran on or
    a server run's server (and its PRM server): without them the follow-up ran on the bundled model; and a local
    run's verifier (without it the follow-up was scored by logprob). Each value quoted for a shell as --db's is."""
    db = db_option(getattr(args, "db", None))
    if getattr(args, "backend", "local") != "openai":
        model = getattr(args, "model", "bundled")  # a caller's namespace may hold no model (a test's)
        return db + (f" --model {quoted(model)}" if model != "bundled" else "") + verifier_options(args)
    return db + " " + server_options({"endpoint": args.endpoint.strip(), "served_model": args.served_model,
                                      "api_key_env": args.api_key_env, "prm_endpoint": args.verifier_endpoint},
                                     args.verifier_model)


def verifier_options(args: argparse.Namespace) -> str:
    """--verifier, --verifier-model and --verifier-device as a local run had them, those at their defaults left
    out (a caller's namespace may hold none: a test's)."""
    d = SearchConfig()
    verifier = getattr(args, "verifier", d.verifier)
    if verifier == d.verifier:
        return ""
    options = f" --verifier {quoted(verifier)}"
    if getattr(args, "verifier_model", None):
        options += f" --verifier-model {quoted(args.verifier_model)}"
    device = getattr(args, "verifier_device", d.verifier_device)
    return options + (f" --verifier-device {quoted(device)}" if device != d.verifier_device else "")


def server_options(server: dict, verifier_model: str | None = None) -> str:
    """The options that name a server run's servers again (`ServerConfig.to_dict`, as a session records it, and the
    PRM's served name), each value quoted for a shell where it needs it."""
    q = quoted
    options = f"--backend openai --endpoint {q(str(server.get('endpoint')))} --served-model " \
              f"{q(str(server.get('served_model')))}"
    if server.get("api_key_env"):
        options += f" --api-key-env {q(server['api_key_env'])}"
    if server.get("prm_endpoint"):
        options += f" --verifier prm --verifier-endpoint {q(server['prm_endpoint'].strip())} --verifier-model " \
                   f"{q(str(verifier_model))}"
    return options


def model_switch(previous: int, recorded: str | None, model: str) -> str | None:
    """The note of a follow-up that runs on another model than the turn it follows (`recorded`: the name that
    turn's session keeps; `model`: this run's --model source), with the option that goes on with that turn's model
    where one model here has its name; None where it is the same model (or the turn recorded none). Without
    --model a follow-up runs on the bundled model, and it did so unsaid after a turn on another."""
    from app.model_library import source_of_name

    if not recorded:
        return None
    source = source_of_name(recorded)
    if source is not None and _same_source(source, model):
        return None
    if source is None and recorded in (Path(model).name, Path(model).stem):  # a path not listed: its name recorded
        return None
    again = (f"add --model {quoted(source)} to go on with it" if source is not None else
             "to go on with it, give its path as --model")
    running = "the bundled model" if model == "bundled" else model
    return f"session {previous} ran on {recorded}; this follow-up runs on {running} ({again})."


def _same_source(source: str, model: str) -> bool:
    if source == model:
        return True
    try:
        return Path(source).expanduser().resolve() == Path(model).expanduser().resolve()
    except (OSError, ValueError):
        return False
