"""The template's PyTorch model: replace it with yours (docs/own-model.md).

A factory is any function that returns a ``torch.nn.Module``; the config passes it its
keyword arguments (``kwargs``) and the Rust port receives the same mapping as its config.
"""

from torch import nn


def make_model(inputs=4, hidden=8, outputs=2):
    """Linear → tanh → Linear: state_dict keys ``0.weight``, ``0.bias``, ``2.weight``,
    ``2.bias``."""
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, outputs))
