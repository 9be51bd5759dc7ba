"""Small real ``torch.nn`` models that co-located inference workers execute.

Six architectures in the style of well-known inference workloads, scaled down
so that one batch of 1 to 8 runs in a few milliseconds on one CPU thread:

========== ============================================ ======================
name       style                                        bound by
========== ============================================ ======================
resnet     ResNet (basic residual blocks), 3x64x64       compute, caches
vgg        VGG (plain 3x3 conv stack), 3x32x32           compute
mobilenet  MobileNet (depthwise-separable convs)         memory traffic
bert       BERT encoder (bidirectional attention)        compute (matmul)
gpt2       GPT-2 decoder (causal attention, LM head)     compute and memory
mlp        wide MLP, ~50 MB of weights                   DRAM bandwidth
========== ============================================ ======================

Weights are random, drawn from a fixed seed; nothing is downloaded.
``torch`` is imported when this module is imported, so import it lazily from
code that must stay cheap.

Examples
--------
>>> model, x = build("mlp", batch_size=2)
>>> tuple(model(x).shape)
(2, 10)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

from collectors.catalog import MODEL_NAMES

SEQ_LEN = 64
VOCAB = 2048
DEFAULT_SEED = 0


# ------------------------------------------------------------------ conv nets


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.short(x))


class ResNetSmall(nn.Module):
    """ResNet-style network: a stem and three stages of basic residual blocks."""

    input_shape = (3, 64, 64)

    def __init__(self, widths: tuple[int, ...] = (32, 64, 128), classes: int = 100):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 2, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        blocks: list[nn.Module] = []
        cin = widths[0]
        for i, width in enumerate(widths):
            blocks.append(_BasicBlock(cin, width, 1 if i == 0 else 2))
            cin = width
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits ``(batch, classes)`` of images ``(batch, 3, 64, 64)``."""
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class VGGSmall(nn.Module):
    """VGG-style network: plain 3x3 convolutions and max pooling, then a classifier."""

    input_shape = (3, 32, 32)

    def __init__(
        self, config: tuple[int | str, ...] = (64, "M", 128, "M", 256, 256, "M"), classes: int = 100
    ):
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for item in config:
            if item == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(cin, int(item), 3, padding=1), nn.ReLU()]
                cin = int(item)
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(cin * 16, 256), nn.ReLU(), nn.Linear(256, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits ``(batch, classes)`` of images ``(batch, *input_shape)``."""
        return self.classifier(torch.flatten(self.features(x), 1))


def _separable(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
        nn.BatchNorm2d(cin),
        nn.ReLU6(),
        nn.Conv2d(cin, cout, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(),
    )


class MobileNetSmall(nn.Module):
    """MobileNet-style network: depthwise-separable convolutions."""

    input_shape = (3, 96, 96)

    def __init__(self, classes: int = 100):
        super().__init__()
        plan = ((32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 256, 2))
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6())
        self.body = nn.Sequential(*(_separable(cin, cout, s) for cin, cout, s in plan))
        self.head = nn.Linear(256, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits ``(batch, classes)`` of images ``(batch, *input_shape)``."""
        x = self.body(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# --------------------------------------------------------------- transformers


class _Block(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool, pre_norm: bool):
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.pre_norm = pre_norm
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def _attend(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:  # GPT-2
            x = x + self._attend(self.norm1(x))
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self._attend(x))  # BERT
        return self.norm2(x + self.ff(x))


class BertSmall(nn.Module):
    """BERT-style encoder: token and position embeddings, post-norm blocks, a pooled classifier."""

    input_shape = (SEQ_LEN,)

    def __init__(self, dim: int = 256, layers: int = 3, heads: int = 4, classes: int = 2):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(SEQ_LEN, dim)
        self.blocks = nn.Sequential(
            *(_Block(dim, heads, causal=False, pre_norm=False) for _ in range(layers))
        )
        self.pool = nn.Linear(dim, dim)
        self.cls = nn.Linear(dim, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Class logits ``(batch, classes)`` of token ids ``(batch, seq_len)``, from the first token."""
        x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
        x = self.blocks(x)
        return self.cls(torch.tanh(self.pool(x[:, 0])))


class GPT2Small(nn.Module):
    """GPT-2-style decoder: causal pre-norm blocks and a tied language-model head (one forward pass)."""

    input_shape = (SEQ_LEN,)

    def __init__(self, dim: int = 256, layers: int = 3, heads: int = 4):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, dim)
        self.pos = nn.Embedding(SEQ_LEN, dim)
        self.blocks = nn.Sequential(*(_Block(dim, heads, causal=True, pre_norm=True) for _ in range(layers)))
        self.norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``(batch, seq_len, VOCAB)`` of token ids ``(batch, seq_len)``."""
        x = self.tok(ids) + self.pos.weight[: ids.shape[1]]
        x = self.norm(self.blocks(x))
        return x @ self.tok.weight.T


class WideMLP(nn.Module):
    """Memory-bound MLP: large weight matrices streamed from DRAM for a small batch."""

    input_shape = (1024,)

    def __init__(self, width: int = 3072, layers: int = 4, classes: int = 10):
        super().__init__()
        dims = (self.input_shape[0],) + (width,) * layers
        self.body = nn.Sequential(
            *(m for a, b in zip(dims, dims[1:], strict=False) for m in (nn.Linear(a, b), nn.ReLU()))
        )
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Class logits ``(batch, classes)`` of vectors ``(batch, 1024)``."""
        return self.head(self.body(x))


# ------------------------------------------------------------------- registry

MODELS: dict[str, Callable[[], nn.Module]] = {
    "resnet": ResNetSmall,
    "vgg": VGGSmall,
    "mobilenet": MobileNetSmall,
    "bert": BertSmall,
    "gpt2": GPT2Small,
    "mlp": WideMLP,
}

TOKEN_MODELS = frozenset({"bert", "gpt2"})
assert tuple(MODELS) == MODEL_NAMES, "collectors.catalog.MODEL_NAMES is out of date"


def model_names() -> tuple[str, ...]:
    """Names of the registered models, in registry order."""
    return tuple(MODELS)


def example_input(
    name: str, batch_size: int, *, seed: int = DEFAULT_SEED, device: str = "cpu"
) -> torch.Tensor:
    """A deterministic random input batch for model ``name``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    gen = torch.Generator().manual_seed(seed + batch_size)
    shape = (batch_size, *MODELS[name].input_shape)  # type: ignore[attr-defined]
    if name in TOKEN_MODELS:
        return torch.randint(0, VOCAB, shape, generator=gen).to(device)
    return torch.randn(shape, generator=gen).to(device)


def build(
    name: str, batch_size: int = 1, *, seed: int = DEFAULT_SEED, device: str = "cpu"
) -> tuple[nn.Module, torch.Tensor]:
    """Build model ``name`` in eval mode with seeded random weights, and an input batch.

    Parameters
    ----------
    name
        One of :func:`model_names`.
    batch_size
        Rows in the example input.
    seed
        Seed of the weights and the input.
    device
        Torch device for both.

    Raises
    ------
    ValueError
        For an unknown model name.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}")
    torch.manual_seed(seed)
    model = MODELS[name]().eval().to(device)
    return model, example_input(name, batch_size, seed=seed, device=device)
