"""Where a stage's tensors live: the fit's device for every step of a stage (its fits and every reading after
them), and a check that a reading runs there.

Lightning moves a module back to the CPU when a fit or test ends (its strategy's teardown); a reading after the
fit that went on there would run on the CPU while the GPU idles. So the fit puts the module back on its device
(training/fit.py) and the readings name the device they expect: `require_on` refuses a module that is elsewhere.
"""

from __future__ import annotations

import torch
from torch import nn

from toksel.runtime.errors import ToksError

RESIDENT_SHARE = 0.5  # an epoch's batches stay on the GPU when they take at most this share of its free memory


class OffDevice(ToksError):
    """A reading found the model away from the device its stage runs on."""


def require_on(module: nn.Module, device: torch.device) -> None:
    """Refuse a module with a parameter or buffer away from `device`: a reading would copy it or run elsewhere."""
    for name, tensor in (*module.named_parameters(), *module.named_buffers()):
        if tensor.device != torch.device(device):
            raise OffDevice(f"{name} is on {tensor.device}, not on {device} where the stage runs: a reading after "
                            "a fit must run where the fit ran")


def resident_device(device: torch.device, nbytes: int) -> torch.device:
    """`device` when `nbytes` fit there comfortably (always on the CPU), else the CPU: what does not fit on the GPU
    goes there batch by batch."""
    device = torch.device(device)
    if device.type != "cuda":
        return device
    free, _ = torch.cuda.mem_get_info(device)
    return device if nbytes <= RESIDENT_SHARE * free else torch.device("cpu")


def reading_device(accelerator: str) -> torch.device:
    """The device a stage that reads kept models without Lightning uses for `train.accelerator`: the GPU for auto,
    gpu or cuda when one is there, else the CPU."""
    wants_gpu = accelerator in ("auto", "gpu", "cuda")
    return torch.device("cuda", torch.cuda.current_device()) if wants_gpu and torch.cuda.is_available() \
        else torch.device("cpu")
