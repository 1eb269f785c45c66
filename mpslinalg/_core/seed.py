"""Seeds for the counter-based generator of the Metal kernels (metal/common/philox.h)."""

from __future__ import annotations

import torch

#: Seeds are drawn in [0, 2^63) (any 64-bit key is valid; int64 carries it to a kernel).
SEED_BOUND = 2**63 - 1


def draw_seed(fn: str, generator: torch.Generator | None) -> int:
    """A seed from ``generator`` (torch's default generator when None), advancing it, so that
    ``torch.manual_seed`` makes a kernel's numbers reproducible and successive calls differ.

    A CPU generator is read on the host, which is no device synchronisation (so it is not
    reported to `mpslinalg.testing.count_host_syncs`); a device generator's draw is one.
    """
    generator = torch.default_generator if generator is None else generator
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"mpslinalg.{fn}: generator must be a torch.Generator, got "
                        f"{type(generator).__name__}")
    if generator.device.type == "cpu":
        with torch._C.DisableTorchFunction():
            return int(torch.randint(0, SEED_BOUND, (1,), generator=generator).item())
    draw = torch.randint(0, SEED_BOUND, (1,), generator=generator, device=generator.device)
    return int(draw.item())
