"""Whether each model can play the part the settings give it, as the run decides it, from configs and safetensors
headers alone: a PRM folder given as the generator, and a folder that is no PRM given as the verifier."""

from __future__ import annotations

from pathlib import Path

from engine.config import SearchConfig
from engine.errors import BeamwiseError, PRMHeadMissing

CANNOT_RUN_MODEL = "It cannot run with this model: "  # a red plan's sentence where a model folder is refused
REWARD_HEADS = ("score.", "v_head.")  # the tensors of a PRM's head in place of the LM head (engine/models.py)
LM_HEAD = "lm_head.weight"


def role_refusal(source: str, search: SearchConfig) -> str | None:
    """Why the run refuses the generator `source` or the PRM `search.verifier_model` in its part, in its words;
    None when it does not (or when the folder cannot be read here: the run says why when it loads it)."""
    why = _generator_refusal(source) or _verifier_refusal(search)
    return why and f"{CANNOT_RUN_MODEL}{why}"


def _generator_refusal(source: str) -> str | None:
    """A folder whose weights carry a reward head and no LM head: the run loads it as a causal LM, finds the LM
    head missing and refuses it as a PRM (engine.models `weights_missing`). A tied LM head is the embeddings'."""
    from engine.models import checked_folder, model_config, weights_missing
    from engine.prm_folders import weight_files

    folder = Path(source).expanduser()
    if source in ("bundled", "default") or source.startswith("synthetic:") or not (folder / "config.json").is_file():
        return None  # synthetic PRMs are refused by name, GGUF files hold generators
    try:
        names = weight_files(folder)
        heads = sorted(name for name in names if name.startswith(REWARD_HEADS))
        if not heads or LM_HEAD in names or getattr(model_config(source), "tie_word_embeddings", False):
            return None
        return weights_missing(checked_folder(source), [LM_HEAD], heads).user_message()
    except (BeamwiseError, OSError, ValueError):  # unreadable headers or config: the run's load says
        return None


def _verifier_refusal(search: SearchConfig) -> str | None:
    """A PRM folder whose family the run cannot tell (a plain causal LM, a head half there), as `locate_prm`
    refuses it when the run loads the verifier. A folder with a config and no weights yet is planned (a PRM not
    downloaded whole), as `checked_prm_folder` lets the plan read it; a missing folder is the plan's error."""
    from engine.prm_folders import checked_prm_folder, locate_prm, weight_files
    from engine.verifiers.families import check_head

    source = search.verifier_model
    if search.verifier != "prm" or not source or source.startswith("synthetic:"):
        return None
    try:
        folder, family = locate_prm(source)
        if weight_files(folder):  # a family named before the path is taken at its word: its head is checked here
            check_head(folder, family)
    except PRMHeadMissing as error:
        return error.user_message() if weight_files(checked_prm_folder(source)) else None
    except BeamwiseError as error:
        return error.user_message()
    return None
