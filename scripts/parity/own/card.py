"""The model card of a user's own model: what the plan needs of it before any job runs.

:func:`card` builds the model of config ``model.torch`` without its values (on PyTorch's
``meta`` device; on the CPU in float32 when the model cannot be built there) and lists:

* ``params``: every parameter, each tensor once, as ``[state_dict key, shape]`` in
  state_dict order (:func:`parity.own.torch_model.unique_parameters`);
* ``tied``: alias → the name a tied tensor is recorded under (``lm_head.weight`` →
  ``model.embed_tokens.weight``);
* ``frozen``: the parameters PyTorch does not train (``requires_grad=False``), in
  state_dict order; the port must not train them either (:mod:`parity.train.own_check`);
* ``buffers``: every buffer → its shape (not trained, not compared; config
  ``model.buffers`` names those handed to the Rust side);
* ``rust_config``: what the Rust side's ``build`` receives (``torch_model.rust_config``);
* ``vocab``: a ``transformers`` config's ``vocab_size`` (the token range), else None;
* ``randomness``: what makes its training forward pass random
  (``torch_model.active_randomness``); the plan refuses a model where this is not empty;
* ``versions``: torch's and transformers' versions.

Building a ``transformers`` model means importing it (seconds), so the plan runs this once
per model in a subprocess (``python -m parity.own.card``, reading the spec as JSON on
standard input and writing the card as JSON) and keeps the card by a hash of the spec and
the factory's sources (:mod:`parity.plan.own`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import torch

from parity.own import torch_model


def card(spec: Mapping[str, Any]) -> dict:
    """The model card of ``spec`` (config ``model.torch``); see the module docs. Raises
    :class:`parity.own.torch_model.OwnModelError`."""
    try:
        model = torch_model.build(spec, torch.float32, "meta")
        # The fixture builds it in float64: a dtype fixed in the model's code is refused
        # here, before any job, rather than by the fixture job.
        torch_model.build(spec, torch.float64, "meta")
    except torch_model.OwnModelError as e:
        if "cannot be built" not in str(e) and "raised" not in str(e):
            raise
        model = torch_model.build(spec, torch.float32, "cpu")
    params, tied = torch_model.unique_parameters(model)
    vocab = None
    if "transformers" in spec:
        vocab = getattr(model.config, "vocab_size", None)
    versions = {"torch": torch.__version__}
    if "transformers" in spec:
        import transformers

        versions["transformers"] = transformers.__version__
    return {
        "params": [[n, list(p.shape)] for n, p in params],
        "tied": tied,
        "frozen": [n for n, p in params if not p.requires_grad],
        "buffers": {n: list(s) for n, s in torch_model.buffers(model).items()},
        "rust_config": torch_model.rust_config(spec, model),
        "vocab": vocab,
        "randomness": torch_model.active_randomness(model),
        "versions": versions,
    }


def main() -> int:
    """``python -m parity.own.card``: spec JSON on stdin → card JSON on stdout; a model
    that cannot be built exits 2 with the reason as the only line on stderr (its whitespace
    runs made one space)."""
    spec = json.load(sys.stdin)
    try:
        out = card(spec)
    except torch_model.OwnModelError as e:
        # one line: the plan reports the last line of stderr, and a library's message
        # (transformers') may span several
        print(" ".join(str(e).split()), file=sys.stderr)
        return 2
    json.dump(out, sys.stdout, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
