"""nanoTabPFN: the model (upstream's architecture and parameter names) with selectable attention kernels.

Shapes: B datasets, R rows, S train rows (train_test_split_index), C columns = features + 1 target column,
E embedding size, H heads, D = E // H head size. `ModelConfig.attention` picks the kernels, all with the same
outputs: "mha" calls nn.MultiheadAttention as upstream does on a (B, R, C, E) table; the others run one
in-projection and one datapoint call on a columns-outer (B, C, R, E) table, each column's rows contiguous.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint as grad_checkpoint

# SDPA pinned to one kernel: a call that kernel cannot serve raises instead of falling back.
SDPA_KERNELS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
ATTENTIONS = ("mha", "sdpa", *SDPA_KERNELS, "flex", "triton", "fa4")
FEATURE_ATTENTIONS = ("sdpa", "matmul", "broadcast")
# Head sizes at which flash-attn-4 4.0.0b36 matched fp32 SDPA on an H100 and an H200 (tests/test_fa4_attention.py);
# at 8, 16, 40 and 48 its sm90 backward returned a wrong dq (results/nvidia-h200/fa4/, results/nvidia-h100/fa4-bugs/).
FA4_HEAD_DIMS = (24, 32, 64, 96, 128)
# Fields that set the model's size: positive integers every checkpoint holds.
SIZE_FIELDS = ("embedding_size", "num_attention_heads", "mlp_hidden_size", "num_layers", "num_outputs")
# Model sizes (--model-preset): nano is upstream's and the blog's; large is TabPFN v2's size (E 192, 6 heads, MLP 384,
# 12 layers). Heads keep D = E // H at 24 or 32, which the triton and fa4 kernels serve.
MODEL_PRESETS = {
    "nano": dict(embedding_size=96, num_attention_heads=4, mlp_hidden_size=192, num_layers=3),
    "small": dict(embedding_size=128, num_attention_heads=4, mlp_hidden_size=256, num_layers=6),
    "medium": dict(embedding_size=192, num_attention_heads=6, mlp_hidden_size=384, num_layers=8),
    "large": dict(embedding_size=192, num_attention_heads=6, mlp_hidden_size=384, num_layers=12),
}
# Fields that change speed, never the math: a checkpoint may be loaded under any of their values.
SPEED_ONLY_FIELDS = ("attention", "feature_attention", "grad_checkpoint", "last_layer_target_only")
# feature_embedding's fixed codes: one per column position (a wider table reuses them cyclically), drawn from this seed.
CODED_COLUMNS, COLUMN_CODE_SEED = 2000, 42
# feature_encoding: "linear" embeds a standardised cell as w z + b (upstream's); "periodic" adds a projection of
# sin and cos of PERIODIC_FREQUENCIES learned frequencies of z (shared by all columns, drawn N(0, PERIODIC_SCALE^2)),
# whose dot products between rows are a kernel of their distance: a threshold of one feature is easy to attend to.
FEATURE_ENCODINGS = ("linear", "periodic")
PERIODIC_FREQUENCIES, PERIODIC_SCALE = 16, 1.0


@dataclass
class ModelConfig:
    """Model size, and how it runs: attention (ATTENTIONS; "flex" serves forward_padded, "triton" is
    triton_attention's kernel, "fa4" FlashAttention-4's), feature_attention off "mha" (SDPA, batched matmuls, or
    broadcast sums that torch.compile fuses), grad_checkpoint (recompute each layer in the backward pass),
    last_layer_target_only (the last layer computes the target column only, and on unpadded tables only its test rows
    after the feature attention, on padded ones with "triton" only their datapoint attention: the decoder reads
    nothing else; off "mha"), feature_embedding (ColumnCodes: a learned projection of a fixed random code per
    column position joins each cell, so equal columns differ; changes the math), feature_encoding (FEATURE_ENCODINGS:
    how a cell's value is embedded; changes the math)."""
    embedding_size: int = 96
    num_attention_heads: int = 4
    mlp_hidden_size: int = 192
    num_layers: int = 3
    num_outputs: int = 2
    attention: str = "mha"
    feature_attention: str = "sdpa"
    grad_checkpoint: bool = False
    last_layer_target_only: bool = False
    feature_embedding: bool = False
    feature_encoding: str = "linear"

    def __post_init__(self):
        for name in SIZE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.embedding_size % self.num_attention_heads:
            raise ValueError(f"embedding_size {self.embedding_size} is not divisible by "
                             f"num_attention_heads {self.num_attention_heads}")
        for name, choices in (("attention", ATTENTIONS), ("feature_attention", FEATURE_ATTENTIONS),
                              ("feature_encoding", FEATURE_ENCODINGS)):
            if getattr(self, name) not in choices:
                raise ValueError(f"ModelConfig.{name} must be one of {choices}, got {getattr(self, name)!r}")
        # No silent fallback: the "mha" path is upstream's nn.MultiheadAttention call and would ignore it.
        if self.attention == "mha" and self.feature_attention != "sdpa":
            raise ValueError(f"feature_attention={self.feature_attention!r} needs an attention other than 'mha'")
        if self.attention == "mha" and self.last_layer_target_only:
            raise ValueError("last_layer_target_only needs an attention other than 'mha'")
        # Inductor's flex_attention kernel needs a head size of at least 16.
        if self.attention == "flex" and self.embedding_size // self.num_attention_heads < 16:
            raise ValueError("attention='flex' needs a head size (embedding_size // num_attention_heads) >= 16")
        if self.attention == "fa4" and self.embedding_size // self.num_attention_heads not in FA4_HEAD_DIMS:
            raise ValueError(f"attention='fa4' runs at head sizes {FA4_HEAD_DIMS} (checked against SDPA), "
                             f"not {self.embedding_size // self.num_attention_heads}")
        for name in ("grad_checkpoint", "last_layer_target_only", "feature_embedding"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ModelConfig.{name} must be a bool, got {getattr(self, name)!r}")


def padded_test_row_mask(num_rows_max: int, split: torch.Tensor, num_rows: torch.Tensor) -> torch.Tensor:
    """(R_max,) bool, True for the real test rows [split, num_rows) of a padded table (no host sync)."""
    rows = torch.arange(num_rows_max, device=split.device)
    return (rows >= split) & (rows < num_rows)


# flex_attention tiles: 64-row blocks for short padded tables waste less padding than the default 128
# (measured in results/nvidia-h200/before-redesign/speed-upstream.md). The kernel's tiles must match the mask's blocks.
FLEX_SMALL_BLOCK, FLEX_SMALL_BLOCK_MAX_ROWS = 64, 1024
FLEX_KERNEL_OPTIONS = {FLEX_SMALL_BLOCK: {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_M1": 32, "BLOCK_N1": 64,
                                          "BLOCK_M2": 64, "BLOCK_N2": 32}}


def train_key_block_mask(split: torch.Tensor, num_rows_max: int, device: torch.device):
    """flex_attention BlockMask letting every query attend to keys < split; key blocks past it are skipped."""
    from torch.nn.attention.flex_attention import create_block_mask  # lazily: only "flex" needs it

    block = FLEX_SMALL_BLOCK if num_rows_max <= FLEX_SMALL_BLOCK_MAX_ROWS else 128
    return create_block_mask(lambda batch, head, query, key: key < split, None, None, num_rows_max, num_rows_max,
                             device=device, BLOCK_SIZE=block)


def datapoint_attention(q, k, v, kernel: str = "sdpa", key_mask=None, block_mask=None, test_rows_only=False):
    """softmax(q kᵀ / sqrt(D)) v on `kernel` (an attention name other than "mha"): q (N, H, R, D), k and v
    (N, H, S, D) train rows, or all R rows with key_mask (R,) bool (on "triton" and "fa4": True on a prefix) / a flex
    block_mask. test_rows_only (with key_mask): the caller reads only the rows past the keys; "triton" then
    skips the others and returns zeros there. Returns (N, H, R, D)."""
    if kernel == "flex":
        from torch.nn.attention.flex_attention import flex_attention
        # Tiles matching the mask's blocks; sliced keys (no mask) keep flex's defaults.
        options = FLEX_KERNEL_OPTIONS.get(block_mask.BLOCK_SIZE[1]) if block_mask is not None else None
        return flex_attention(q, k, v, block_mask=block_mask, kernel_options=options)
    if kernel == "triton":
        # The padded step's key_mask marks a prefix (the train rows): the kernel reads its count on the GPU.
        return _triton_kernel()(q, k, v, num_keys=None if key_mask is None else key_mask.sum(),
                                test_rows_only=test_rows_only and key_mask is not None)
    if kernel == "fa4":
        from fa4_attention import datapoint_attention as fa4   # lazily: flash-attn-4, CUDA
        # FlashAttention-4 takes (N, R, H, D), the in-projection's memory: these transposes are views.
        out = fa4(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                  num_keys=None if key_mask is None else key_mask.sum())
        return out.transpose(1, 2)                                      # (N, H, R, D) view of (N, R, H, D)
    mask = None if key_mask is None else key_mask.view(1, 1, 1, -1)
    with contextlib.nullcontext() if kernel == "sdpa" else sdpa_kernel(SDPA_KERNELS[kernel]):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _triton_kernel():
    """triton_attention's kernel, imported lazily (triton, CUDA), traced whole by torch.compile: its forward and
    backward are triton_ops (no graph break) whose kernels take the scales as constexprs (no float for Inductor)."""
    from triton_attention import datapoint_attention
    return datapoint_attention


def in_projection(attention: nn.MultiheadAttention, x: torch.Tensor):
    """x (..., E) -> q, k, v (..., H, D) of attention's packed in-projection: one matmul, views, no copies."""
    heads = attention.num_heads
    qkv = F.linear(x, attention.in_proj_weight, attention.in_proj_bias)   # (..., 3E)
    qkv = qkv.unflatten(-1, (3, heads, x.shape[-1] // heads))             # (..., 3, H, D)
    return qkv.unbind(-3)                                                 # (..., H, D) each


def matmul_attention(q, k, v, key_mask=None):
    """Batched small matmuls in >= fp32, as broadcast_attention computes: q (N, H, Lq, D), k, v (N, H, Lk, D),
    key_mask (Lk,) bool."""
    compute = torch.promote_types(q.dtype, torch.float32)
    # Autocast off: it would run the matmuls in bf16 (scores in bf16 let the recipe's loss reach NaN at step 341).
    with torch.autocast(q.device.type, enabled=False):
        scores = (q.to(compute) @ k.to(compute).transpose(-2, -1)) * (q.shape[-1] ** -0.5)   # (N, H, Lq, Lk)
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask, float("-inf"))
        return (scores.softmax(dim=-1) @ v.to(compute)).to(v.dtype)                       # (N, H, Lq, D)


def broadcast_attention(q, k, v, key_mask=None):
    """Attention over dim 1 as fp32 broadcast multiplies and sums, which torch.compile fuses into a few kernels
    (6 x 6 GEMMs would idle the tensor cores): q (B, Lq, R, H, D), k, v (B, Lk, R, H, D), key_mask (Lk,)."""
    compute = torch.promote_types(q.dtype, torch.float32)                # fp32 under bf16 autocast
    q32, k32, v32 = q.to(compute), k.to(compute), v.to(compute)
    scores = (q32.unsqueeze(2) * k32.unsqueeze(1)).sum(-1) * q.shape[-1] ** -0.5   # (B, Lq, Lk, R, H)
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask.view(1, 1, -1, 1, 1), float("-inf"))
    weights = scores.softmax(dim=2)                                       # (B, Lq, Lk, R, H)
    return (weights.unsqueeze(-1) * v32.unsqueeze(1)).sum(2).to(v.dtype)  # (B, Lq, R, H, D)


class NanoTabPFNModel(nn.Module):
    """Encoders, a stack of TransformerEncoderLayer, and a decoder on the target column of test rows."""

    def __init__(self, config: ModelConfig | None = None, **overrides):
        """overrides: fields to change, e.g. NanoTabPFNModel(attention="sdpa")."""
        super().__init__()
        self.config = cfg = dataclasses.replace(config or ModelConfig(), **overrides)  # a validated copy
        # Creation order is upstream's, so a given torch seed gives upstream's initial weights.
        self.feature_encoder = FeatureEncoder(cfg.embedding_size)
        self.target_encoder = TargetEncoder(cfg.embedding_size)
        self.transformer_blocks = nn.ModuleList(
            TransformerEncoderLayer(cfg.embedding_size, cfg.num_attention_heads, cfg.mlp_hidden_size,
                                    cfg.attention, cfg.feature_attention)
            for _ in range(cfg.num_layers))
        self.decoder = Decoder(cfg.embedding_size, cfg.mlp_hidden_size, cfg.num_outputs)
        # Created last: the other modules' initial weights stay those of the same seed without them.
        self.column_codes = ColumnCodes(cfg.embedding_size) if cfg.feature_embedding else None
        if cfg.feature_encoding == "periodic":
            self.feature_encoder.periodic = PeriodicFeatures(cfg.embedding_size)

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={getattr(self.config, name)}" for name in SPEED_ONLY_FIELDS)

    def _code_columns(self, x_emb: torch.Tensor) -> torch.Tensor:
        """x_emb (B, R, F, E) plus each column position's code (feature_embedding), else x_emb itself."""
        if self.column_codes is None:
            return x_emb
        return x_emb + self.column_codes(x_emb.shape[2])                          # + (F, E), broadcast

    def _run_blocks(self, x_emb: torch.Tensor, y_emb: torch.Tensor, *args) -> torch.Tensor:
        """Feature (B, R, C-1, E) and target (B, R, 1, E) cells through the blocks -> target cells (B, R, E), or
        (B, R-S, E) (the test rows) when last_layer_target_only skipped the rest on an unpadded table."""
        mha = self.config.attention == "mha"
        if mha:
            src = torch.cat([x_emb, y_emb], dim=2)                                   # (B, R, C, E), upstream's
        else:
            src = torch.cat([x_emb.transpose(1, 2), y_emb.transpose(1, 2)], dim=1)  # (B, C, R, E): one copy
        for i, block in enumerate(self.transformer_blocks):
            # The decoder reads the target column's test rows only: the last layer may skip the rest.
            target_only = self.config.last_layer_target_only and i == len(self.transformer_blocks) - 1
            if self.config.grad_checkpoint and torch.is_grad_enabled():
                # Keeps only the layer's input; the backward recomputes the rest.
                src = grad_checkpoint(block, src, *args, target_only=target_only, use_reentrant=False)
            else:
                src = block(src, *args, target_only=target_only)
        return src[:, :, -1] if mha else src[:, -1]

    def forward(self, src: tuple[torch.Tensor, torch.Tensor], train_test_split_index: int) -> torch.Tensor:
        """Upstream's forward: src = (x (B, R, C-1), y_train (B, S) or (B, S, 1) class indices as floats),
        S = train_test_split_index (may be a SymInt under torch.compile). Returns logits (B, R-S, num_outputs)."""
        x_src, y_src = src
        split = train_test_split_index
        if x_src.dim() != 3:
            raise ValueError(f"x must be (B, R, C-1), got shape {tuple(x_src.shape)}")
        if y_src.dim() < x_src.dim():
            y_src = y_src.unsqueeze(-1)                  # (B, S) -> (B, S, 1)
        num_rows = x_src.shape[1]
        if not 1 <= split <= num_rows or y_src.shape[1] != split:
            raise ValueError(f"train_test_split_index {split} must be in 1..{num_rows} and equal "
                             f"y_train's length {y_src.shape[1]}")
        x_emb = self._code_columns(self.feature_encoder(x_src, split))   # (B, R, C-1, E)
        y_emb = self.target_encoder(y_src, num_rows)     # (B, R, 1, E)
        target = self._run_blocks(x_emb, y_emb, split)   # (B, R, E), or (B, R-S, E) with the shortcut
        test_rows = target[:, target.shape[1] - (num_rows - split):]   # the last R-S rows either way (R-S may be 0)
        return self.decoder(test_rows)                   # (B, R-S, num_outputs)

    def forward_padded(self, x: torch.Tensor, y: torch.Tensor, split: torch.Tensor, num_rows: torch.Tensor,
                       num_features: torch.Tensor) -> torch.Tensor:
        """Static-shape forward (torch.compile, CUDA graphs): x (B, R_max, F_max), real in [:num_rows, :num_features];
        y (B, R_max) or (B, R_max, 1), read below split; split, num_rows, num_features 0-d int64 tensors (a new value
        neither recompiles nor syncs). Returns forward's logits on the test rows [split, num_rows), zero elsewhere,
        (B, R_max, num_outputs). Statistics and datapoint keys see train rows only, feature keys real columns only."""
        if x.dim() != 3:
            raise ValueError(f"x must be (B, R_max, F_max), got shape {tuple(x.shape)}")
        if y.dim() == 2:
            y = y.unsqueeze(-1)
        batch_size, rows_max, features_max = x.shape
        if y.shape != (batch_size, rows_max, 1):
            raise ValueError(f"y must be (B, R_max) = {(batch_size, rows_max)}, got {tuple(y.shape)}")
        device = x.device
        split, num_rows, num_features = (torch.as_tensor(t, device=device) for t in (split, num_rows, num_features))
        columns = torch.arange(features_max + 1, device=device)
        row_keys = torch.arange(rows_max, device=device) < split            # (R,) train rows
        column_keys = (columns < num_features) | (columns == features_max)   # (C,) real features + target
        x_emb = self._code_columns(self.feature_encoder.forward_padded(x, row_keys))   # (B, R, C-1, E)
        y_emb = self.target_encoder.forward_padded(y, row_keys)             # (B, R, 1, E)
        block_mask = train_key_block_mask(split, rows_max, device) if self.config.attention == "flex" else None
        target = self._run_blocks(x_emb, y_emb, None, row_keys, column_keys, block_mask)   # (B, R, E)
        logits = self.decoder(target)                                        # (B, R, num_outputs)
        test_rows = padded_test_row_mask(rows_max, split, num_rows)         # (R,)
        return torch.where(test_rows[None, :, None], logits, torch.zeros((), dtype=logits.dtype, device=device))


class FeatureEncoder(nn.Module):
    """Normalises each feature with its train-row statistics, clips, and embeds each cell."""

    def __init__(self, embedding_size: int):
        super().__init__()
        self.linear_layer = nn.Linear(1, embedding_size)
        self.periodic = None   # PeriodicFeatures with feature_encoding="periodic" (NanoTabPFNModel sets it)

    def _embed(self, x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """x (B, R, F, 1), mean/std (B, 1, F, 1) -> (B, R, F, E)."""
        std = std + 1e-5
        std = torch.where(std < 1e-5, torch.ones_like(std), std)
        z = torch.clip((x - mean) / std, min=-100, max=100)                              # (B, R, F, 1)
        embedded = self.linear_layer(z)                                                  # (B, R, F, E)
        return embedded if self.periodic is None else embedded + self.periodic(z)

    def forward(self, x: torch.Tensor, train_test_split_index: int) -> torch.Tensor:
        """x (B, R, F) -> (B, R, F, E), statistics from rows [:S]."""
        x = x.unsqueeze(-1)                                                              # (B, R, F, 1)
        train = x[:, :train_test_split_index]                                            # (B, S, F, 1)
        mean = torch.mean(train, dim=1, keepdim=True)                                    # (B, 1, F, 1)
        std = torch.std(train, dim=1, keepdim=True, unbiased=False)                      # (B, 1, F, 1)
        return self._embed(x, mean, std)

    def forward_padded(self, x: torch.Tensor, row_keys: torch.Tensor) -> torch.Tensor:
        """x (B, R, F) padded -> (B, R, F, E), statistics from the train rows row_keys (R,) bool marks."""
        x = x.unsqueeze(-1)                                                              # (B, R, F, 1)
        mask = row_keys.view(1, -1, 1, 1)                                                # (1, R, 1, 1)
        count = row_keys.sum().to(x.dtype)                                               # S, no host sync
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        # torch.where rather than a multiply: a padded cell can never reach the sums, whatever it holds.
        mean = torch.where(mask, x, zero).sum(dim=1, keepdim=True) / count               # (B, 1, F, 1)
        var = torch.where(mask, (x - mean) ** 2, zero).sum(dim=1, keepdim=True) / count  # unbiased=False
        return self._embed(x, mean, var.sqrt())


class PeriodicFeatures(nn.Module):
    """sin and cos of K learned frequencies of a standardised cell, projected to E (the periodic embedding of
    Gorishniy et al., 2022, "On Embeddings for Numerical Features in Tabular Deep Learning")."""

    def __init__(self, embedding_size: int, count: int = PERIODIC_FREQUENCIES, scale: float = PERIODIC_SCALE):
        super().__init__()
        self.frequencies = nn.Parameter(scale * torch.randn(count))
        self.linear_layer = nn.Linear(2 * count, embedding_size)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """z (..., 1) -> (..., E)."""
        angle = 2 * torch.pi * z * self.frequencies                                      # (..., K)
        return self.linear_layer(torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1))


class ColumnCodes(nn.Module):
    """A fixed random code (E // 4) per column position, projected to E by a learned linear layer (TabPFN v2's
    "subspace" feature embedding). The codes are a persistent buffer: a checkpoint carries those it trained with."""

    def __init__(self, embedding_size: int):
        super().__init__()
        generator = torch.Generator().manual_seed(COLUMN_CODE_SEED)   # its own generator: torch's RNG is not drawn
        self.register_buffer("codes", torch.randn(CODED_COLUMNS, max(1, embedding_size // 4), generator=generator))
        self.linear_layer = nn.Linear(self.codes.shape[1], embedding_size)

    def forward(self, num_columns: int) -> torch.Tensor:
        """(F, E): column j's projected code, j taken mod CODED_COLUMNS."""
        index = torch.arange(num_columns, device=self.codes.device) % CODED_COLUMNS
        return self.linear_layer(self.codes[index])


class TargetEncoder(nn.Module):
    """Pads the train labels to all rows with their mean and embeds each cell."""

    def __init__(self, embedding_size: int):
        super().__init__()
        self.linear_layer = nn.Linear(1, embedding_size)

    def forward(self, y_train: torch.Tensor, num_rows: int) -> torch.Tensor:
        """y_train (B, S, 1) -> (B, R, 1, E); rows >= S carry the train mean."""
        mean = torch.mean(y_train, dim=1, keepdim=True)                    # (B, 1, 1)
        padding = mean.repeat(1, num_rows - y_train.shape[1], 1)           # (B, R-S, 1)
        y = torch.cat([y_train, padding], dim=1)                           # (B, R, 1)
        return self.linear_layer(y.unsqueeze(-1))                          # (B, R, 1, E)

    def forward_padded(self, y: torch.Tensor, row_keys: torch.Tensor) -> torch.Tensor:
        """y (B, R, 1), read on the train rows row_keys (R,) marks -> (B, R, 1, E); other rows get their mean."""
        mask = row_keys.view(1, -1, 1)                                                    # (1, R, 1)
        count = row_keys.sum().to(y.dtype)
        zero = torch.zeros((), dtype=y.dtype, device=y.device)
        mean = torch.where(mask, y, zero).sum(dim=1, keepdim=True) / count                # (B, 1, 1)
        y = torch.where(mask, y, mean)                                                    # (B, R, 1)
        return self.linear_layer(y.unsqueeze(-1))                                         # (B, R, 1, E)


class TransformerEncoderLayer(nn.Module):
    """Attention between features, attention between datapoints, then a per-cell MLP (post-norm)."""

    def __init__(self, embedding_size: int, nhead: int, mlp_hidden_size: int, attention: str = "mha",
                 feature_attention: str = "sdpa", layer_norm_eps: float = 1e-5):
        super().__init__()
        self.attention = attention
        self.feature_attention = feature_attention
        self.self_attention_between_datapoints = nn.MultiheadAttention(embedding_size, nhead, batch_first=True)
        self.self_attention_between_features = nn.MultiheadAttention(embedding_size, nhead, batch_first=True)
        self.linear1 = nn.Linear(embedding_size, mlp_hidden_size)
        self.linear2 = nn.Linear(mlp_hidden_size, embedding_size)
        self.norm1 = nn.LayerNorm(embedding_size, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(embedding_size, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(embedding_size, eps=layer_norm_eps)

    def forward(self, src: torch.Tensor, train_test_split_index: int | None, row_keys: torch.Tensor | None = None,
                column_keys: torch.Tensor | None = None, block_mask=None, target_only: bool = False) -> torch.Tensor:
        """src (B, R, C, E) on "mha", else (B, C, R, E), and the same out; with target_only the last column only,
        (B, 1, R, E) on padded tables and (B, 1, R-S, E) (its test rows: train rows are only keys here) on unpadded
        ones. Unpadded tables pass S; padded ones None and the (R,) / (C,) bool keys of the two attentions (and on
        "flex" the BlockMask of row_keys)."""
        features = self._attend_features(src, column_keys, target_only)
        src = self.norm1(features + (src[:, -1:] if target_only else src))
        first = train_test_split_index if target_only and train_test_split_index is not None else 0
        attended = self._attend_datapoints(src, train_test_split_index, row_keys, block_mask, first,
                                           test_rows_only=target_only)
        src = self.norm2(attended + src[:, :, first:])
        return self.norm3(self.linear2(F.gelu(self.linear1(src))) + src)

    def _attend_features(self, src: torch.Tensor, column_keys: torch.Tensor | None,
                         target_only: bool = False) -> torch.Tensor:
        """Each row's C cells attend to each other; with target_only the target cell alone queries (Cq = 1)."""
        attention = self.self_attention_between_features
        if self.attention == "mha":
            batch_size, rows, columns, embedding = src.shape
            seqs = src.reshape(batch_size * rows, columns, embedding)        # (B*R, C, E), a view
            # nn.MultiheadAttention's bool mask means "may NOT attend" (the opposite of SDPA's).
            mask = None if column_keys is None else (~column_keys).expand(columns, columns)
            return attention(seqs, seqs, seqs, attn_mask=mask)[0].reshape(batch_size, rows, columns, embedding)
        batch_size, columns, rows, embedding = src.shape
        heads = attention.num_heads
        q, k, v = in_projection(attention, src)                              # (B, C, R, H, D) each
        if target_only:
            q = q[:, -1:]                                                    # (B, 1, R, H, D)
        queries = q.shape[1]
        if self.feature_attention == "broadcast":
            out = broadcast_attention(q, k, v, column_keys)                  # (B, Cq, R, H, D), no copies
        else:
            # SDPA and the batched matmuls want one (C, D) matrix per row and head: (B*R, H, C, D) copies.
            q, k, v = (t.permute(0, 2, 3, 1, 4).reshape(batch_size * rows, heads, t.shape[1], -1) for t in (q, k, v))
            if self.feature_attention == "matmul":
                out = matmul_attention(q, k, v, column_keys)
            else:
                mask = None if column_keys is None else column_keys.view(1, 1, 1, columns)
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            out = out.view(batch_size, rows, heads, queries, -1).permute(0, 3, 1, 2, 4)  # (B, Cq, R, H, D)
        out = out.reshape(batch_size, queries, rows, embedding)
        return F.linear(out, attention.out_proj.weight, attention.out_proj.bias)

    def _attend_datapoints(self, src: torch.Tensor, split: int | None, row_keys: torch.Tensor | None,
                           block_mask=None, first_query: int = 0, test_rows_only: bool = False) -> torch.Tensor:
        """Every row from first_query on attends to the train rows of its column (the same keys for every query);
        test_rows_only: only the test rows are read afterwards (the padded last layer's kernel may skip the rest)."""
        attention = self.self_attention_between_datapoints
        if self.attention == "mha":
            batch_size, rows, columns, embedding = src.shape
            # Why the copy: each column's rows must be one sequence, (B, R, C, E) -> (B*C, R, E).
            seqs = src.transpose(1, 2).reshape(batch_size * columns, rows, embedding)
            if split is not None:
                # Upstream, call for call: train rows attend to train rows, test rows to train rows.
                left = attention(seqs[:, :split], seqs[:, :split], seqs[:, :split])[0]   # (B*C, S, E)
                right = attention(seqs[:, split:], seqs[:, :split], seqs[:, :split])[0]  # (B*C, R-S, E)
                out = torch.cat([left, right], dim=1)
            else:
                out = attention(seqs, seqs, seqs, attn_mask=(~row_keys).expand(rows, rows))[0]
            return out.reshape(batch_size, columns, rows, embedding).transpose(1, 2)     # (B, R, C, E)
        batch_size, columns, rows, embedding = src.shape
        seqs = src.reshape(batch_size * columns, rows, embedding)           # (B*C, R, E): a view
        q, k, v = (t.transpose(1, 2) for t in in_projection(attention, seqs))   # (B*C, H, R, D) each
        if row_keys is None:
            k, v = k[:, :, :split], v[:, :, :split]   # keys and values are the first S rows: a slice, no copy, no mask
        q = q[:, :, first_query:]                                          # (B*C, H, Rq, D): a slice
        out = datapoint_attention(q, k, v, self.attention, key_mask=row_keys if block_mask is None else None,
                                  block_mask=block_mask, test_rows_only=test_rows_only)
        # (B*C, H, Rq, D) -> (B, C, Rq, E): a view when the kernel wrote (B*C, Rq, H, D) memory, else one copy.
        out = out.transpose(1, 2).reshape(batch_size, columns, q.shape[2], embedding)
        return F.linear(out, attention.out_proj.weight, attention.out_proj.bias)


class Decoder(nn.Module):
    """Two-layer MLP: target-cell embeddings (B, N, E) -> logits (B, N, num_outputs)."""

    def __init__(self, embedding_size: int, mlp_hidden_size: int, num_outputs: int):
        super().__init__()
        self.linear1 = nn.Linear(embedding_size, mlp_hidden_size)
        self.linear2 = nn.Linear(mlp_hidden_size, num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(F.gelu(self.linear1(x)))
