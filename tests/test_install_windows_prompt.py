"""The installer's "Beamwise command prompt" (packaging/beamwise.iss) can run `beamwise`: it opened
`cmd /k "{app}\\beamwise.exe" --help` in Documents, and since nothing put {app} on PATH, the `beamwise run ...` its
help shows then failed there ("'beamwise' is not recognized"). Read as text: Inno Setup does not run here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = (ROOT / "packaging" / "beamwise.iss").read_text(encoding="utf-8")


def entry(name: str) -> dict[str, str]:
    """The [Icons] entry called `name`, its values with Inno Setup's doubled quotes undone."""
    for line in SCRIPT.splitlines():
        fields = {key: value.replace('""', '"') for key, value in re.findall(r'(\w+): "((?:[^"]|"")*)"', line)}
        if fields.get("Name") == name:
            return fields
    raise AssertionError(f"no [Icons] entry {name}")


def test_the_command_prompt_puts_the_app_on_its_path_and_starts_in_documents() -> None:
    prompt = entry("{group}\\Beamwise command prompt")
    assert prompt["Filename"] == "{cmd}" and prompt["WorkingDir"] == "{userdocs}"  # the user's files, not {app}'s
    switch, command = prompt["Parameters"].split(" ", 1)
    assert switch == "/k" and not command.startswith('"')  # cmd would strip a leading quote and the last one
    setting, started = command.split(" && ")
    assert setting == 'set "PATH={app};%PATH%"'  # quoted: a PATH with & or ( in it stays one value
    assert started.split()[0] == "beamwise"


def test_the_install_stays_per_user_and_changes_no_ones_path() -> None:
    settings = dict(line.split("=", 1) for line in SCRIPT.splitlines() if re.match(r"^\w+=", line))
    assert settings["PrivilegesRequired"] == "lowest"
    assert "ChangesEnvironment" not in settings and "[Registry]" not in SCRIPT
