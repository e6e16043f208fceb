"""GPU persistence mode: read it and plan its change, live (nvidia-smi) or in a sysroot.

Live, one ``nvidia-smi -i BDF -pm 1|0`` command change per GPU (its undo sets the old state);
in a sysroot, the captured ``nvidia-smi -q -x`` report is edited in place.
"""

from __future__ import annotations

import re

from ansible_collections.exemplar.tune.plugins.module_utils.knobs.changes import (
    Change,
    CommandChange,
    FileChange,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.errors import (
    HostStateError,
    NotSupported,
    ParseError,
)
from ansible_collections.exemplar.tune.plugins.module_utils.readers.nvidia_smi import (
    COMMAND,
    NO_GPU_EXIT_CODES,
    no_gpu_message,
    normalize_bdf,
    parse_nvidia_smi,
)
from ansible_collections.exemplar.tune.plugins.module_utils.sysroot import (
    COMMANDS_DIR,
    Sysroot,
    run_command,
)

QUERY = ["nvidia-smi", "--query-gpu=pci.bus_id,persistence_mode", "--format=csv,noheader"]
CAPTURED = f"{COMMANDS_DIR}/{COMMAND}"
STATES = ("Enabled", "Disabled")
_GPU_BLOCK = re.compile(rb'<gpu\b[^>]*\bid="([^"]+)"[^>]*>.*?</gpu>', re.DOTALL)
_PERSISTENCE = re.compile(rb"(<persistence_mode>)\s*(Enabled|Disabled)\s*(</persistence_mode>)")


def wanted(params: dict) -> set[str] | None:
    """The selected GPUs in nvidia-smi's address form; ``None`` means all."""
    if not params["gpus"]:
        return None
    try:
        return {normalize_bdf(bdf) for bdf in params["gpus"]}
    except ValueError as exc:
        raise HostStateError("gpus", str(exc)) from None


def select(found: dict[str, str | None], selected: set[str] | None) -> dict[str, str | None]:
    """``found`` (bdf -> state) limited to ``selected``; an unknown address is an error."""
    if selected is None:
        return found
    missing = sorted(selected - set(found))
    if missing:
        raise NotSupported(f"GPU {', '.join(missing)}",
                           f"not listed by nvidia-smi (GPUs: {', '.join(found) or 'none'})")
    return {bdf: state for bdf, state in found.items() if bdf in selected}


def parse_query(text: str, source: str) -> dict[str, str | None]:
    """``"00000000:C2:00.0, Disabled"`` lines -> ``{bdf: "Disabled"}`` (``None``: N/A)."""
    found: dict[str, str | None] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        bdf, sep, state = (part.strip() for part in line.partition(","))
        try:
            address = normalize_bdf(bdf)
        except ValueError:
            raise ParseError(source, line, "not '<pci.bus_id>, <persistence_mode>'") from None
        found[address] = state if sep and state in STATES else None
    return found


def live_states(params: dict, note: list[str]) -> dict[str, str | None]:
    """bdf -> persistence state of the selected GPUs, asked from nvidia-smi."""
    try:
        out = run_command(QUERY)
    except NotSupported as exc:
        raise NotSupported("nvidia-smi", f"{exc.reason}: persistence mode can only be set "
                           "through nvidia-smi -pm (install the NVIDIA driver utilities)") from None
    message = no_gpu_message(out.stdout + "\n" + out.stderr)
    if out.rc in NO_GPU_EXIT_CODES or (out.rc != 0 and message):
        note.append(f"no GPU: {message or f'nvidia-smi exit status {out.rc}'}")
        return {}
    return select(parse_query(out.checked().stdout, out.source), wanted(params))


def live_plan(states: dict[str, str | None], enabled: bool) -> list[Change]:
    """One CommandChange per GPU (those already right are skipped by the engine)."""
    want, other = ("Enabled", "Disabled") if enabled else ("Disabled", "Enabled")
    return [CommandChange(label=f"nvidia-smi -i {bdf} persistence", current=state,
                          desired=want, apply=["nvidia-smi", "-i", bdf, "-pm", _flag(want)],
                          undo=["nvidia-smi", "-i", bdf, "-pm", _flag(other)])
            for bdf, state in states.items() if state is not None]


def _flag(state: str) -> str:
    return "1" if state == "Enabled" else "0"


def captured_states(data: bytes) -> dict[str, str | None]:
    """bdf -> persistence text of every ``<gpu>`` block of a captured report."""
    found: dict[str, str | None] = {}
    for block in _GPU_BLOCK.finditer(data):
        match = _PERSISTENCE.search(block.group(0))
        found[normalize_bdf(block.group(1).decode())] = match.group(2).decode() if match else None
    return found


def edit_captured(data: bytes, selected: set[str], state: str) -> bytes:
    """``data`` with the persistence text of the ``selected`` GPUs set to ``state``."""

    def one_gpu(block: re.Match[bytes]) -> bytes:
        if normalize_bdf(block.group(1).decode()) not in selected:
            return block.group(0)
        return _PERSISTENCE.sub(lambda m: m.group(1) + state.encode() + m.group(3),
                                block.group(0), count=1)

    return _GPU_BLOCK.sub(one_gpu, data)


def sysroot_plan(root: Sysroot, params: dict) -> tuple[list[Change], dict[str, str | None]]:
    """The whole captured report with the selected GPUs' ``<persistence_mode>`` changed."""
    data = root.read_bytes(CAPTURED)
    parse_nvidia_smi(data.decode("utf-8", errors="replace"), root.display(CAPTURED))
    states = select(captured_states(data), wanted(params))
    new = edit_captured(data, set(states), "Enabled" if params["enabled"] else "Disabled")
    return [FileChange(CAPTURED, new, root.file_mode(CAPTURED) or 0o644)], states
