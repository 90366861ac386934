"""A user's own PyTorch model, not from transformers: a tiny MLP-Mixer classifier.

Each sample is ``patches`` patch vectors of ``dim`` floats, ``[B, patches, dim]``. A block
mixes across patches (an MLP applied to each channel, over the patches) and then across
channels (an MLP applied to each patch), each behind a LayerNorm with a residual
connection; the head averages the patches and gives ``classes`` logits. With
``token_bias=False`` the token MLP's last Linear has no bias: that bias adds one constant
to every channel of a patch, which the next LayerNorm (over the channels) removes, so its
exact gradient is 0 and its computed one rounding noise (see config.yaml). The MLPs are
``nn.Sequential(Linear, activation, Linear)``, so their state_dict keys are
``blocks.{i}.token_mlp.0.weight``, ``….2.bias``: the burn port in ``burn-port/`` names the
layers ``fc1``/``fc2`` and maps the keys with burn-store's key remapping.
"""

import torch
from torch import nn

ACTIVATIONS = {"gelu": nn.GELU, "relu": nn.ReLU}


def mlp(n: int, hidden: int, activation: str, last_bias: bool = True) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(n, hidden), ACTIVATIONS[activation](), nn.Linear(hidden, n, bias=last_bias)
    )


class MixerBlock(nn.Module):
    def __init__(self, patches: int, dim: int, hidden: int, activation: str, token_bias: bool):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.token_mlp = mlp(patches, hidden, activation, token_bias)
        self.norm2 = nn.LayerNorm(dim)
        self.channel_mlp = mlp(dim, hidden, activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        x = x + y
        return x + self.channel_mlp(self.norm2(x))


class TinyMixer(nn.Module):
    def __init__(self, patches, dim, hidden, blocks, classes, activation, token_bias):
        super().__init__()
        self.blocks = nn.ModuleList(
            MixerBlock(patches, dim, hidden, activation, token_bias) for _ in range(blocks)
        )
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x).mean(dim=1))


def make_model(
    patches=4, dim=8, hidden=16, blocks=2, classes=3, activation="relu", token_bias=True
):
    """The factory the config names (``examples/tiny_mixer/model.py:make_model``)."""
    return TinyMixer(patches, dim, hidden, blocks, classes, activation, token_bias)
