"""Whether each model can play the part the settings give it, as the run decides it, from configs, safetensors
headers and tokenizers alone: a PRM folder given as the generator, and a folder that is no PRM (or whose tokenizer
its family's format cannot use) given as the verifier."""

from __future__ import annotations

import functools
from pathlib import Path

from engine.config import SearchConfig
from engine.errors import BeamwiseError, PRMHeadMissing

CANNOT_RUN_MODEL = "It cannot run with this model: "  # a red plan's sentence where a model folder is refused
REWARD_HEADS = ("score.", "v_head.")  # the tensors of a PRM's head in place of the LM head (engine/models.py)
LM_HEAD = "lm_head.weight"


def role_refusal(source: str, search: SearchConfig) -> str | None:
    """Why the run refuses the generator `source` or the PRM `search.verifier_model` in its part, in its words;
    None when it does not (or when the folder cannot be read here: the run says why when it loads it)."""
    why = _generator_refusal(source) or _verifier_refusal(search) or _exit_refusal(source, search)
    return why and f"{CANNOT_RUN_MODEL}{why}"


def _generator_refusal(source: str) -> str | None:
    """A folder whose weights carry a reward head and no LM head: the run loads it as a causal LM, finds the LM
    head missing and refuses it as a PRM (engine.models `weights_missing`). A tied LM head is the embeddings'."""
    from engine.models import checked_folder, model_config, weights_missing
    from engine.prm_folders import weight_files

    folder = Path(source).expanduser()
    if source.startswith("synthetic:"):
        return _synthetic_refusal(source.removeprefix("synthetic:"))
    if source in ("bundled", "default") or not (folder / "config.json").is_file():
        return None  # GGUF files hold generators
    try:
        names = weight_files(folder)
        heads = sorted(name for name in names if name.startswith(REWARD_HEADS))
        if not heads or LM_HEAD in names or getattr(model_config(source), "tie_word_embeddings", False):
            return None
        return weights_missing(checked_folder(source), [LM_HEAD], heads).user_message()
    except (BeamwiseError, OSError, ValueError):  # unreadable headers or config: the run's load says
        return None


def _exit_refusal(source: str, search: SearchConfig) -> str | None:
    """The entropy exit with the self-judge verifier on a generator that cannot run layer by layer (not Llama-,
    Mistral- or Qwen2-shaped): the verifier's body is the generator's own, built here on the meta device (no
    memory) from its config; the run refused it only once the model had loaded, and `plan` said green. None for a
    model with no transformers config to build (a GGUF, the bundled model before its conversion: Llama-shaped)."""
    if not (search.entropy_exit and search.verifier == "self-judge"):
        return None
    import torch
    from transformers import AutoModelForCausalLM

    from engine.models import model_config
    from engine.verifiers.entropy_exit import layers_refusal

    try:
        config = model_config(source)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # a config transformers cannot build: the run's load says why
        return None
    refusal = layers_refusal("self-judge", model.base_model)
    return None if refusal is None else refusal.user_message()


def _synthetic_refusal(name: str) -> str | None:
    """A synthetic PRM (synthetic:tiny-qwen-prm) as the generator, refused by name as the run's load refuses it
    (engine.synthetic `synthetic_entry`); None for the synthetic generators."""
    from engine.prm_names import SYNTHETIC_PRM_FAMILIES
    from engine.synthetic import synthetic_entry

    if name not in SYNTHETIC_PRM_FAMILIES:
        return None  # an unknown name is the plan's error, as the run's
    try:
        synthetic_entry(name)
    except BeamwiseError as error:
        return error.user_message()
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
        names = weight_files(folder)
        if names:  # a family named before the path is taken at its word: its head is checked here
            check_head(folder, family)
    except PRMHeadMissing as error:
        return error.user_message() if weight_files(checked_prm_folder(source)) else None
    except BeamwiseError as error:
        return error.user_message()
    return _layout_refusal(source) or _lm_head_refusal(folder, family, names)  # in the run's order


def _layout_refusal(source: str) -> str | None:
    """Why the run refuses the PRM's tokenizer for its family's format (a Math-Shepherd tag ` ки` or Qwen's
    `<extra_0>` that is no single token, no chat template where the format is one), as `verifier_layout` builds the
    run's layout from the tokenizer alone; None where the tokenizer cannot be read here (the plan's tokenizer check
    and the run's load say why)."""
    from engine.errors import ChatTemplateUnusable, NotAPRM

    try:
        laid_out(source)
    except (NotAPRM, ChatTemplateUnusable) as error:
        return error.user_message()
    except (BeamwiseError, OSError, ValueError):
        return None
    return None


def laid_out(source: str) -> None:
    """Build the PRM at `source`'s layout from its tokenizer, as the run builds it (raising what the run raises), once
    for each state of its folder: the plan, the window's plan bar and eval's check before its model loads share it."""
    _laid_out(source, _stamp(source))


def _stamp(source: str) -> tuple[tuple[str, int, int], ...]:
    """The files of the PRM's folder as (name, size, mtime): a tokenizer replaced since is read again (a broken one
    kept passing the plan until a restart, while the run refused it). None of them for a synthetic PRM."""
    from engine.prm_folders import locate_prm

    try:
        folder, _ = locate_prm(source)
        files = [f for f in sorted(folder.iterdir()) if f.is_file()]
        return tuple((f.name, (st := f.stat()).st_size, st.st_mtime_ns) for f in files)
    except (BeamwiseError, OSError, ValueError):
        return ()


@functools.lru_cache(maxsize=4)
def _laid_out(source: str, stamp: tuple[tuple[str, int, int], ...]) -> bool:
    """True once the PRM at `source` (its files as `stamp` says) lays a path out; a refusal raises and is not kept (a
    folder fixed since is read again). Kept as app/prompt_size.py keeps its layout: the window plans after every
    settings change, and a PRM's tokenizer takes about 0.6 s to read."""
    from engine.verifiers import verifier_layout

    verifier_layout("prm", None, source)
    return True


def _lm_head_refusal(folder: Path, family: str, names: dict[str, Path]) -> str | None:
    """A family that reads its labels through the LM head (Math-Shepherd, RLHFlow) named before a folder without
    one (a reward-head PRM): the run refuses the weight it lacks as they load (`engine.verifiers.families`
    `weights_missing`). A tied LM head is the embeddings'; a folder with no weights yet is planned."""
    from engine.models import model_config
    from engine.prm_names import LENS_FAMILIES
    from engine.verifiers.families import weights_missing

    if family not in LENS_FAMILIES or not names or LM_HEAD in names:
        return None
    try:
        if getattr(model_config(str(folder)), "tie_word_embeddings", False):
            return None
    except (BeamwiseError, OSError, ValueError):  # an unreadable config: the run's load says
        return None
    return weights_missing(folder, family, [LM_HEAD]).user_message()
