"""nanoTabPFN: the model (upstream architecture, two attention paths) and an sklearn-style classifier.

Shapes everywhere: B = datasets in the batch, R = rows (datapoints), S = train rows
(train_test_split_index), C = columns = features + 1 target column, E = embedding size,
H = attention heads, D = E // H head size.

One model class, one set of parameter names (upstream's, so upstream checkpoints load). The attention
implementation is a config field:
  attention="torch"  nn.MultiheadAttention called exactly as upstream (two datapoint calls): the baseline.
  attention="flash"  F.scaled_dot_product_attention on the SAME nn.MultiheadAttention parameters
                     (in_proj_weight / in_proj_bias / out_proj), with one datapoint call for all rows,
                     on a table stored columns-outer, (B, C, R, E): each column's rows are then one
                     contiguous sequence, so the datapoint attention needs no transposed copies.
A state_dict from either path loads into the other and gives the same outputs (tests/test_model.py).

Importing this module has no side effects (no CUDA touch, no I/O).
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint as _checkpoint

ATTENTION_CHOICES = ("torch", "flash")
FEATURE_ATTENTION_CHOICES = ("sdpa", "matmul", "broadcast")
PADDED_ATTENTION_CHOICES = ("sdpa", "flex")
# SDPA kernels the datapoint attention may be pinned to ("auto": PyTorch's dispatcher chooses).
SDPA_KERNELS = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
SDPA_BACKEND_CHOICES = ("auto", *SDPA_KERNELS)


def sdpa_restriction(name: str):
    """Context in which SDPA may use only the kernel `name` (a call it cannot serve raises, never falls
    back); "auto" leaves the choice to PyTorch's dispatcher."""
    return contextlib.nullcontext() if name == "auto" else sdpa_kernel(SDPA_KERNELS[name])


@dataclass
class ModelConfig:
    """Model size and implementation switches. The switches change speed, never the math.

    Attributes:
        embedding_size: E, the width of every cell embedding.
        num_attention_heads: H; E must be divisible by H.
        mlp_hidden_size: hidden width of the per-cell MLP and of the decoder.
        num_layers: number of TransformerEncoderLayer blocks.
        num_outputs: logits per test row (the most classes the model can predict).
        attention: "torch" (upstream nn.MultiheadAttention calls, the baseline) or "flash"
            (F.scaled_dot_product_attention on the same parameters, one datapoint call).
        feature_attention: how the "flash" path runs attention between features (B*R sequences of
            C = 2..7 tokens): "sdpa" (F.scaled_dot_product_attention), "matmul" (an explicit batched
            small-matrix form, softmax in fp32; cuBLAS runs it as batched GEMMs of C x C tiles) or
            "broadcast" (the same sums written as broadcast multiplies and reductions in fp32, which
            torch.compile fuses into a few memory-bound kernels; eager it materialises a
            (N, H, C, C, D) product, so use it with --compile). Needs attention="flash".
        padded_attention: how forward_padded masks the datapoint attention on the "flash" path:
            "sdpa" (F.scaled_dot_product_attention with a boolean key mask; no flash kernel takes a
            mask, so cuDNN / mem-efficient kernels run it, about 3x slower than flash on an H200) or
            "flex" (flex_attention with a block mask that skips the padded key blocks: close to flash
            speed, but only under torch.compile; eager it runs an unfused reference, and on CPU it
            has no backward). Needs attention="flash" and a head size >= 16.
        checkpoint: recompute each layer in the backward pass (torch.utils.checkpoint) instead of
            storing its activations, so long tables fit; same outputs and gradients.
        sdpa_backend: the kernel of the "flash" path's datapoint attention: "auto" (PyTorch's
            dispatcher picks; for bf16 on Hopper in torch 2.11 that is cuDNN, which builds a new
            execution plan on the host for every new split length) or one of "flash", "efficient",
            "cudnn", "math" (torch.nn.attention.sdpa_kernel; a call that kernel cannot serve raises
            instead of falling back). Needs attention="flash".
    """
    embedding_size: int = 96
    num_attention_heads: int = 4
    mlp_hidden_size: int = 192
    num_layers: int = 3
    num_outputs: int = 2
    attention: str = "torch"
    feature_attention: str = "sdpa"
    padded_attention: str = "sdpa"
    checkpoint: bool = False
    sdpa_backend: str = "auto"

    def __post_init__(self):
        for name in ("embedding_size", "num_attention_heads", "mlp_hidden_size", "num_layers", "num_outputs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.embedding_size % self.num_attention_heads:
            raise ValueError(f"embedding_size {self.embedding_size} is not divisible by "
                             f"num_attention_heads {self.num_attention_heads}")
        if self.attention not in ATTENTION_CHOICES:
            raise ValueError(f"ModelConfig.attention must be one of {ATTENTION_CHOICES}, got {self.attention!r}")
        if self.feature_attention not in FEATURE_ATTENTION_CHOICES:
            raise ValueError(f"ModelConfig.feature_attention must be one of {FEATURE_ATTENTION_CHOICES}, "
                             f"got {self.feature_attention!r}")
        if self.padded_attention not in PADDED_ATTENTION_CHOICES:
            raise ValueError(f"ModelConfig.padded_attention must be one of {PADDED_ATTENTION_CHOICES}, "
                             f"got {self.padded_attention!r}")
        # No silent fallback: the "torch" path is upstream's nn.MultiheadAttention call and would ignore them.
        if self.attention == "torch" and self.feature_attention != "sdpa":
            raise ValueError(f"feature_attention={self.feature_attention!r} needs attention='flash'")
        if self.attention == "torch" and self.padded_attention != "sdpa":
            raise ValueError(f"padded_attention={self.padded_attention!r} needs attention='flash'")
        if self.sdpa_backend not in SDPA_BACKEND_CHOICES:
            raise ValueError(f"ModelConfig.sdpa_backend must be one of {SDPA_BACKEND_CHOICES}, "
                             f"got {self.sdpa_backend!r}")
        if self.attention == "torch" and self.sdpa_backend != "auto":
            raise ValueError(f"sdpa_backend={self.sdpa_backend!r} needs attention='flash'")
        # Inductor's flex_attention kernel needs a head size of at least 16 (torch 2.11 and 2.13).
        head_size = self.embedding_size // self.num_attention_heads
        if self.padded_attention == "flex" and head_size < 16:
            raise ValueError(f"padded_attention='flex' needs a head size >= 16 "
                             f"(embedding_size // num_attention_heads), got {head_size}")
        if not isinstance(self.checkpoint, bool):
            raise ValueError(f"ModelConfig.checkpoint must be a bool, got {self.checkpoint!r}")


def padded_test_row_mask(num_rows_max: int, split: torch.Tensor, num_rows: torch.Tensor) -> torch.Tensor:
    """Which rows of a padded table are real test rows, without a host sync.

    Args:
        num_rows_max: R_max, the padded row count.
        split: 0-d int64 tensor, the number of train rows.
        num_rows: 0-d int64 tensor, the number of real rows (train + test).
    Returns:
        (R_max,) bool tensor on split's device, True for rows in [split, num_rows).
    """
    rows = torch.arange(num_rows_max, device=split.device)
    return (rows >= split) & (rows < num_rows)


# flex_attention tiles for short padded tables (R_max <= FLEX_SMALL_BLOCK_MAX_ROWS): 64-row blocks instead of
# the default 128 waste less of the padding (150 rows: 192 computed instead of 256) and give the GPU more
# blocks to spread (H200, upstream workload: 1.94 vs 2.02 ms/step). The kernel's tiles must match the mask's
# blocks: FLEX_KERNEL_OPTIONS maps a mask block size to them (backward tiles as flex's own choice for 64);
# a block size not in it keeps flex's defaults.
FLEX_SMALL_BLOCK, FLEX_SMALL_BLOCK_MAX_ROWS = 64, 1024
FLEX_KERNEL_OPTIONS = {FLEX_SMALL_BLOCK: {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_M1": 32, "BLOCK_N1": 64,
                                          "BLOCK_M2": 64, "BLOCK_N2": 32}}


def _train_key_block_mask(split: torch.Tensor, num_rows_max: int, device: torch.device):
    """flex_attention BlockMask letting every query attend to keys < split only.

    Args:
        split: 0-d int64 tensor, the number of train rows.
        num_rows_max: R_max (query and key length).
        device: where the mask lives.
    Returns:
        a BlockMask; key blocks wholly >= split are skipped, not just masked. Its blocks are 64 rows for
        R_max <= FLEX_SMALL_BLOCK_MAX_ROWS, else flex's default 128.
    """
    from torch.nn.attention.flex_attention import create_block_mask  # lazily: only this option needs it

    def keys_before_split(batch, head, query, key):
        return key < split

    block = FLEX_SMALL_BLOCK if num_rows_max <= FLEX_SMALL_BLOCK_MAX_ROWS else 128
    return create_block_mask(keys_before_split, None, None, num_rows_max, num_rows_max, device=device,
                             BLOCK_SIZE=block)


class NanoTabPFNModel(nn.Module):
    """Encoders, a stack of TransformerEncoderLayer, and a decoder on the target column of test rows."""

    def __init__(self, config: ModelConfig | None = None, **overrides):
        """
        Args:
            config: a ModelConfig (defaults: 96 / 4 heads / 192 / 3 layers / 2 outputs, attention="torch").
            **overrides: ModelConfig fields to change, e.g. NanoTabPFNModel(attention="flash").
        """
        super().__init__()
        config = config if config is not None else ModelConfig()
        fields = {f.name for f in dataclasses.fields(ModelConfig)}
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise TypeError(f"unknown ModelConfig field(s) {unknown}; known: {sorted(fields)}")
        self.config = dataclasses.replace(config, **overrides)  # a copy: validated again in __post_init__
        cfg = self.config
        # Creation order is upstream's, so a given torch seed gives upstream's initial weights.
        self.feature_encoder = FeatureEncoder(cfg.embedding_size)
        self.target_encoder = TargetEncoder(cfg.embedding_size)
        self.transformer_blocks = nn.ModuleList(
            TransformerEncoderLayer(cfg.embedding_size, cfg.num_attention_heads, cfg.mlp_hidden_size,
                                    attention=cfg.attention, feature_attention=cfg.feature_attention,
                                    sdpa_backend=cfg.sdpa_backend)
            for _ in range(cfg.num_layers))
        self.decoder = Decoder(cfg.embedding_size, cfg.mlp_hidden_size, cfg.num_outputs)

    def extra_repr(self) -> str:
        cfg = self.config
        return (f"attention={cfg.attention}, feature_attention={cfg.feature_attention}, "
                f"padded_attention={cfg.padded_attention}, checkpoint={cfg.checkpoint}, "
                f"sdpa_backend={cfg.sdpa_backend}")

    def _run_blocks(self, src: torch.Tensor, *args) -> torch.Tensor:
        """Applies every layer to the table src (layout as in _table); args are passed on to each layer."""
        for block in self.transformer_blocks:
            if self.config.checkpoint and torch.is_grad_enabled():
                # Why: keeps only each layer's input; the layer is recomputed in the backward pass.
                src = _checkpoint(block, src, *args, use_reentrant=False)
            else:
                src = block(src, *args)
        return src

    def forward(self, src: tuple[torch.Tensor, torch.Tensor], train_test_split_index: int) -> torch.Tensor:
        """Upstream's forward.

        Args:
            src: (x, y_train): x (B, R, C-1) features of train then test rows; y_train (B, S) or
                (B, S, 1) class indices (as floats) of the S train rows.
            train_test_split_index: S, the number of train rows (1 <= S <= R).
        Returns:
            logits (B, R-S, num_outputs) for the test rows.
        """
        x_src, y_src = src
        split = train_test_split_index  # no int(): under torch.compile it may be a SymInt; keep it symbolic
        if x_src.dim() != 3:
            raise ValueError(f"x must be (B, R, C-1), got shape {tuple(x_src.shape)}")
        if y_src.dim() < x_src.dim():
            y_src = y_src.unsqueeze(-1)  # (B, S) -> (B, S, 1)
        num_rows = x_src.shape[1]
        if not 1 <= split <= num_rows or y_src.shape[1] != split:
            raise ValueError(f"train_test_split_index {split} must be in 1..{num_rows} and equal "
                             f"y_train's length {y_src.shape[1]}")
        x_emb = self.feature_encoder(x_src, split)       # (B, R, C-1, E)
        y_emb = self.target_encoder(y_src, num_rows)     # (B, R, 1, E)
        table = self._table(x_emb, y_emb)                # (B, R, C, E), or (B, C, R, E) on the flash path
        table = self._run_blocks(table, split)
        output = self._target_cells(table)[:, split:]    # (B, R-S, E): target cell of each test row
        return self.decoder(output)                      # (B, R-S, num_outputs)

    def _table(self, x_emb: torch.Tensor, y_emb: torch.Tensor) -> torch.Tensor:
        """Joins feature cells (B, R, C-1, E) and target cells (B, R, 1, E) into the layers' table layout.

        "torch" path: (B, R, C, E), as upstream. "flash" path: (B, C, R, E), columns outer, so that the
        datapoint attention's sequences (one per column) are contiguous views.
        """
        if self.config.attention == "torch":
            return torch.cat([x_emb, y_emb], dim=2)                             # (B, R, C, E)
        return torch.cat([x_emb.transpose(1, 2), y_emb.transpose(1, 2)], dim=1)  # (B, C, R, E), one copy

    def _target_cells(self, table: torch.Tensor) -> torch.Tensor:
        """The target column of every row: (B, R, E), from either table layout."""
        return table[:, :, -1, :] if self.config.attention == "torch" else table[:, -1, :, :]

    def forward_padded(self, x: torch.Tensor, y: torch.Tensor, split: torch.Tensor, num_rows: torch.Tensor,
                       num_features: torch.Tensor) -> torch.Tensor:
        """Static-shape forward for torch.compile / CUDA graphs: the same logits as `forward` on the real cells.

        For every row in [split, num_rows) it returns, within float tolerance, the logits of
        forward((x[:, :num_rows, :num_features], y[:, :split]), split). split / num_rows / num_features
        are 0-d tensors, so a new value neither recompiles nor syncs with the host.

        Why padding cannot change the real cells (the model has no positional encodings, so a cell
        only meets other cells in the places below, and each is masked):
          * feature-encoder statistics and the target mean: sums over rows < split only;
          * the target column of rows >= split is the train mean, never y (test labels never leak);
          * attention between datapoints: keys/values are rows < split only (a boolean key mask, or
            the equal flex_attention block mask), so padded rows are queries that nobody reads;
          * attention between features: keys/values are the real feature columns and the target
            column only, so padded columns are queries that nobody reads;
          * norms, MLPs, encoders and the decoder act on each cell alone.
        Every softmax row keeps at least one key (row 0 < split; the target column), so nothing is
        NaN, also in padded cells, provided the padded inputs are finite (zeros).

        Args:
            x: (B, R_max, F_max) features, real cells in [:num_rows, :num_features], finite padding.
            y: (B, R_max) or (B, R_max, 1) class indices as floats; only rows < split are read.
            split: 0-d int64 tensor on x's device, the number of train rows, 1 <= split <= num_rows.
            num_rows: 0-d int64 tensor, real rows, num_rows <= R_max.
            num_features: 0-d int64 tensor, real feature columns, 1 <= num_features <= F_max.
        Returns:
            logits (B, R_max, num_outputs); rows outside [split, num_rows) are set to 0 (mask the loss
            with padded_test_row_mask(R_max, split, num_rows)).
        """
        if x.dim() != 3:
            raise ValueError(f"x must be (B, R_max, F_max), got shape {tuple(x.shape)}")
        if y.dim() == 2:
            y = y.unsqueeze(-1)  # (B, R_max) -> (B, R_max, 1)
        batch_size, rows_max, features_max = x.shape
        if y.shape != (batch_size, rows_max, 1):
            raise ValueError(f"y must be (B, R_max) = {(batch_size, rows_max)}, got {tuple(y.shape)}")
        device = x.device
        split = torch.as_tensor(split, device=device)
        num_rows = torch.as_tensor(num_rows, device=device)
        num_features = torch.as_tensor(num_features, device=device)
        rows = torch.arange(rows_max, device=device)
        columns = torch.arange(features_max + 1, device=device)
        row_keys = rows < split                                              # (R,) train rows
        column_keys = (columns < num_features) | (columns == features_max)   # (C,) real features + target
        x_emb = self.feature_encoder.forward_padded(x, row_keys)            # (B, R, C-1, E)
        y_emb = self.target_encoder.forward_padded(y, row_keys)             # (B, R, 1, E)
        table = self._table(x_emb, y_emb)                                   # (B, R, C, E) or (B, C, R, E)
        row_block_mask = None
        if self.config.attention == "flash" and self.config.padded_attention == "flex":
            row_block_mask = _train_key_block_mask(split, rows_max, device)  # built once, used by every layer
        table = self._run_blocks(table, None, row_keys, column_keys, row_block_mask)
        logits = self.decoder(self._target_cells(table))                    # (B, R, num_outputs)
        # Zero the rows that are not real test rows, so their values are defined (and finite).
        test_rows = (rows >= split) & (rows < num_rows)                     # (R,)
        return torch.where(test_rows[None, :, None], logits, torch.zeros((), dtype=logits.dtype, device=device))


class FeatureEncoder(nn.Module):
    """Normalises each feature with its train-row statistics, clips, and embeds each cell."""

    def __init__(self, embedding_size: int):
        super().__init__()
        self.linear_layer = nn.Linear(1, embedding_size)

    def _embed(self, x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """x (B, R, F, 1), mean/std (B, 1, F, 1) -> (B, R, F, E)."""
        std = std + 1e-5
        std = torch.where(std < 1e-5, torch.ones_like(std), std)
        x = (x - mean) / std
        x = torch.clip(x, min=-100, max=100)
        return self.linear_layer(x)

    def forward(self, x: torch.Tensor, train_test_split_index: int) -> torch.Tensor:
        """
        Args:
            x: (B, R, F) features.
            train_test_split_index: S; statistics come from rows [:S].
        Returns:
            (B, R, F, E) cell embeddings.
        """
        x = x.unsqueeze(-1)                                                              # (B, R, F, 1)
        train = x[:, :train_test_split_index]                                            # (B, S, F, 1)
        mean = torch.mean(train, dim=1, keepdim=True)                                    # (B, 1, F, 1)
        std = torch.std(train, dim=1, keepdim=True, unbiased=False)                      # (B, 1, F, 1)
        return self._embed(x, mean, std)

    def forward_padded(self, x: torch.Tensor, row_keys: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x: (B, R, F) padded features.
            row_keys: (R,) bool, True for train rows (the only rows the statistics see).
        Returns:
            (B, R, F, E) cell embeddings.
        """
        x = x.unsqueeze(-1)                                                              # (B, R, F, 1)
        mask = row_keys.view(1, -1, 1, 1)                                                # (1, R, 1, 1)
        count = row_keys.sum().to(x.dtype)                                               # S, no host sync
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        # torch.where rather than a multiply: a padded cell can never reach the sums, whatever it holds.
        mean = torch.where(mask, x, zero).sum(dim=1, keepdim=True) / count               # (B, 1, F, 1)
        var = torch.where(mask, (x - mean) ** 2, zero).sum(dim=1, keepdim=True) / count  # unbiased=False
        return self._embed(x, mean, var.sqrt())


class TargetEncoder(nn.Module):
    """Pads the train labels to all rows with their mean and embeds each cell."""

    def __init__(self, embedding_size: int):
        super().__init__()
        self.linear_layer = nn.Linear(1, embedding_size)

    def forward(self, y_train: torch.Tensor, num_rows: int) -> torch.Tensor:
        """
        Args:
            y_train: (B, S, 1) train labels.
            num_rows: R.
        Returns:
            (B, R, 1, E) target embeddings; rows >= S carry the train mean.
        """
        mean = torch.mean(y_train, dim=1, keepdim=True)                    # (B, 1, 1)
        padding = mean.repeat(1, num_rows - y_train.shape[1], 1)           # (B, R-S, 1)
        y = torch.cat([y_train, padding], dim=1)                           # (B, R, 1)
        return self.linear_layer(y.unsqueeze(-1))                          # (B, R, 1, E)

    def forward_padded(self, y: torch.Tensor, row_keys: torch.Tensor) -> torch.Tensor:
        """
        Args:
            y: (B, R, 1) labels of all rows; only train rows are read.
            row_keys: (R,) bool, True for train rows.
        Returns:
            (B, R, 1, E) target embeddings; rows that are not train rows carry the train mean.
        """
        mask = row_keys.view(1, -1, 1)                                                    # (1, R, 1)
        count = row_keys.sum().to(y.dtype)
        zero = torch.zeros((), dtype=y.dtype, device=y.device)
        mean = torch.where(mask, y, zero).sum(dim=1, keepdim=True) / count                # (B, 1, 1)
        y = torch.where(mask, y, mean)                                                    # (B, R, 1)
        return self.linear_layer(y.unsqueeze(-1))                                         # (B, R, 1, E)


def _in_projection(attention: nn.MultiheadAttention, x: torch.Tensor):
    """One matmul for q, k and v of nn.MultiheadAttention's packed in-projection.

    Args:
        attention: the module whose in_proj_weight (3E, E) / in_proj_bias (3E,) are used.
        x: (..., E) cells, any leading dimensions.
    Returns:
        q, k, v, each (..., H, D): strided views into one (..., 3E) buffer (no copies; SDPA, flash
        and the broadcast form accept them since the last dimension is contiguous).
    """
    heads = attention.num_heads
    qkv = F.linear(x, attention.in_proj_weight, attention.in_proj_bias)   # (..., 3E)
    qkv = qkv.unflatten(-1, (3, heads, x.shape[-1] // heads))             # (..., 3, H, D)
    return qkv.unbind(-3)                                                 # (..., H, D) each


def _matmul_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None):
    """softmax(q kᵀ / sqrt(D)) v as explicit batched small matrices (for very short sequences).

    Args:
        q: (N, H, Lq, D); k, v: (N, H, Lk, D).
        key_mask: None or (Lk,) bool, True for keys that may be attended to.
    Returns:
        (N, H, Lq, D).
    """
    scores = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)           # (N, H, Lq, Lk)
    # The softmax runs in at least fp32, also under bf16 autocast.
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask, float("-inf"))
    weights = scores.softmax(dim=-1).to(v.dtype)
    return weights @ v                                                    # (N, H, Lq, D)


def _broadcast_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_mask: torch.Tensor | None):
    """softmax(q kᵀ / sqrt(D)) v over the tokens of dim 1, as broadcast multiplies and sums.

    For sequences of a few tokens (the C cells of a row). The same arithmetic as a bf16 matmul with
    fp32 accumulation (inputs upcast, products and sums in fp32), but as pointwise ops and reductions,
    which torch.compile fuses into a few kernels that read each input once, in whatever layout the
    inputs come (no transposed copies); batched GEMMs of 6 x 6 tiles leave a GPU's tensor cores idle.

    Args:
        q: (B, Lq, R, H, D); k, v: (B, Lk, R, H, D): token i of row r is q[:, i, r].
        key_mask: None or (Lk,) bool, True for keys that may be attended to.
    Returns:
        (B, Lq, R, H, D) in v's dtype.
    """
    scale = q.shape[-1] ** -0.5
    compute = torch.promote_types(q.dtype, torch.float32)                # fp32 under bf16 autocast; fp64 stays
    q32, k32, v32 = q.to(compute), k.to(compute), v.to(compute)
    scores = (q32.unsqueeze(2) * k32.unsqueeze(1)).sum(-1) * scale       # (B, Lq, Lk, R, H)
    if key_mask is not None:
        scores = scores.masked_fill(~key_mask.view(1, 1, -1, 1, 1), float("-inf"))
    weights = scores.softmax(dim=2)                                       # (B, Lq, Lk, R, H)
    out = (weights.unsqueeze(-1) * v32.unsqueeze(1)).sum(2)               # (B, Lq, R, H, D)
    return out.to(v.dtype)


class TransformerEncoderLayer(nn.Module):
    """Attention between features, attention between datapoints, then a per-cell MLP (post-norm).

    Parameter names are upstream's (self_attention_between_datapoints, self_attention_between_features,
    linear1, linear2, norm1, norm2, norm3) on every path.
    """

    def __init__(self, embedding_size: int, nhead: int, mlp_hidden_size: int, attention: str = "torch",
                 feature_attention: str = "sdpa", layer_norm_eps: float = 1e-5, sdpa_backend: str = "auto"):
        super().__init__()
        self.attention = attention
        self.feature_attention = feature_attention
        self.sdpa_backend = sdpa_backend
        self.self_attention_between_datapoints = nn.MultiheadAttention(embedding_size, nhead, batch_first=True)
        self.self_attention_between_features = nn.MultiheadAttention(embedding_size, nhead, batch_first=True)
        self.linear1 = nn.Linear(embedding_size, mlp_hidden_size)
        self.linear2 = nn.Linear(mlp_hidden_size, embedding_size)
        self.norm1 = nn.LayerNorm(embedding_size, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(embedding_size, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(embedding_size, eps=layer_norm_eps)

    def forward(self, src: torch.Tensor, train_test_split_index: int | None,
                row_keys: torch.Tensor | None = None, column_keys: torch.Tensor | None = None,
                row_block_mask=None) -> torch.Tensor:
        """
        Args:
            src: the table of cell embeddings: (B, R, C, E) on the "torch" path, (B, C, R, E) on the
                "flash" path (NanoTabPFNModel._table); the output has the same layout.
            train_test_split_index: S (unpadded tables), or None when row_keys is given.
            row_keys: None, or (R,) bool: rows that are keys of the datapoint attention (padded tables).
            column_keys: None, or (C,) bool: columns that are keys of the feature attention (padded tables).
            row_block_mask: None, or a flex_attention BlockMask equal to row_keys (padded_attention="flex").
        Returns:
            the new table, same shape and layout.
        """
        src = self.norm1(self._attend_features(src, column_keys) + src)
        src = self.norm2(self._attend_datapoints(src, train_test_split_index, row_keys, row_block_mask) + src)
        src = self.norm3(self.linear2(F.gelu(self.linear1(src))) + src)
        return src

    def _attend_features(self, src: torch.Tensor, column_keys: torch.Tensor | None) -> torch.Tensor:
        """Each row's C cells attend to each other. Table in, attention output out, same layout."""
        attention = self.self_attention_between_features
        if self.attention == "torch":
            batch_size, rows, columns, embedding = src.shape
            seqs = src.reshape(batch_size * rows, columns, embedding)        # (B*R, C, E), a view
            # nn.MultiheadAttention's bool mask means "may NOT attend" (the opposite of SDPA's).
            mask = None if column_keys is None else (~column_keys).expand(columns, columns)
            out = attention(seqs, seqs, seqs, attn_mask=mask)[0]             # (B*R, C, E)
            return out.reshape(batch_size, rows, columns, embedding)
        batch_size, columns, rows, embedding = src.shape
        heads = attention.num_heads
        q, k, v = _in_projection(attention, src)                             # (B, C, R, H, D) each
        if self.feature_attention == "broadcast":
            out = _broadcast_attention(q, k, v, column_keys)                 # (B, C, R, H, D), no copies
        else:
            # SDPA and the batched matmuls want one (C, D) matrix per row and head: (B*R, H, C, D) copies.
            q, k, v = (t.permute(0, 2, 3, 1, 4).reshape(batch_size * rows, heads, columns, -1) for t in (q, k, v))
            if self.feature_attention == "matmul":
                out = _matmul_attention(q, k, v, column_keys)                # (B*R, H, C, D)
            else:
                mask = None if column_keys is None else column_keys.view(1, 1, 1, columns)
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B*R, H, C, D)
            out = out.view(batch_size, rows, heads, columns, -1).permute(0, 3, 1, 2, 4)  # (B, C, R, H, D)
        out = out.reshape(batch_size, columns, rows, embedding)              # (B, C, R, E)
        return F.linear(out, attention.out_proj.weight, attention.out_proj.bias)

    def _sdpa(self, q, k, v, mask):
        """The datapoint attention's SDPA call, on the kernel ModelConfig.sdpa_backend names."""
        if self.sdpa_backend == "auto":
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        with sdpa_restriction(self.sdpa_backend):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def _attend_datapoints(self, src: torch.Tensor, split: int | None, row_keys: torch.Tensor | None,
                           row_block_mask=None) -> torch.Tensor:
        """Every row attends to the train rows within its column. Table in, attention output out, same layout.

        Train rows attend to train rows and test rows attend to train rows: the same keys for every
        query, which is why the "flash" path does it in one call.
        """
        attention = self.self_attention_between_datapoints
        if self.attention == "torch":
            batch_size, rows, columns, embedding = src.shape
            # Why the copy: each column's rows must be one sequence, (B, R, C, E) -> (B*C, R, E).
            seqs = src.transpose(1, 2).reshape(batch_size * columns, rows, embedding)
            if split is not None:
                # Upstream, call for call: train rows attend to train rows, test rows to train rows.
                # (Separate slice objects, as upstream, so nn.MultiheadAttention takes the same path.)
                left = attention(seqs[:, :split], seqs[:, :split], seqs[:, :split])[0]   # (B*C, S, E)
                right = attention(seqs[:, split:], seqs[:, :split], seqs[:, :split])[0]  # (B*C, R-S, E)
                out = torch.cat([left, right], dim=1)                                     # (B*C, R, E)
            else:
                mask = (~row_keys).expand(rows, rows)  # nn.MultiheadAttention: True = may NOT attend
                out = attention(seqs, seqs, seqs, attn_mask=mask)[0]                      # (B*C, R, E)
            # (B*C, R, E) -> (B, R, C, E)
            return out.reshape(batch_size, columns, rows, embedding).transpose(1, 2)
        batch_size, columns, rows, embedding = src.shape
        seqs = src.reshape(batch_size * columns, rows, embedding)        # (B*C, R, E): a view, columns outer
        # One in-projection over all rows; keys/values are then the first S rows (a slice, no copy)
        # or, for padded tables, all rows with the non-train keys masked out.
        q, k, v = (t.transpose(1, 2) for t in _in_projection(attention, seqs))   # (B*C, H, R, D) each
        if row_keys is None:
            k, v = k[:, :, :split], v[:, :, :split]                      # (B*C, H, S, D)
            out = self._sdpa(q, k, v, None)                              # (B*C, H, R, D); no mask: flash-eligible
        elif row_block_mask is not None:
            from torch.nn.attention.flex_attention import flex_attention
            options = FLEX_KERNEL_OPTIONS.get(row_block_mask.BLOCK_SIZE[1])    # tiles matching the mask's blocks
            out = flex_attention(q, k, v, block_mask=row_block_mask, kernel_options=options)  # (B*C, H, R, D)
        else:
            out = self._sdpa(q, k, v, row_keys.view(1, 1, 1, rows))      # (B*C, H, R, D)
        # (B*C, H, R, D) -> (B, C, R, E): a view when the kernel wrote (B*C, R, H, D) memory (flash and
        # cuDNN do), one copy otherwise.
        out = out.transpose(1, 2).reshape(batch_size, columns, rows, embedding)
        return F.linear(out, attention.out_proj.weight, attention.out_proj.bias)


class Decoder(nn.Module):
    """Two-layer MLP from the target cell's embedding to the logits."""

    def __init__(self, embedding_size: int, mlp_hidden_size: int, num_outputs: int):
        super().__init__()
        self.linear1 = nn.Linear(embedding_size, mlp_hidden_size)
        self.linear2 = nn.Linear(mlp_hidden_size, num_outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x: (B, N, E) target-cell embeddings.
        Returns:
            (B, N, num_outputs) logits.
        """
        return self.linear2(F.gelu(self.linear1(x)))


def _strip_prefixes(state_dict: dict) -> dict:
    """Removes the prefixes torch.compile ("_orig_mod.") and DDP ("module.") add to parameter names."""
    out = {}
    for key, value in state_dict.items():
        for prefix in ("_orig_mod.", "module."):
            while key.startswith(prefix):
                key = key[len(prefix):]
        out[key] = value
    return out


class NanoTabPFNClassifier:
    """scikit-learn-like interface: fit stores the training set, predict runs one forward on train + test.

    Labels may be any sortable values; they are mapped to 0..K-1 in fit (classes_ holds them) and back
    in predict.
    """

    def __init__(self, model: NanoTabPFNModel, device: torch.device | str | None = None):
        """
        Args:
            model: a NanoTabPFNModel.
            device: where to run it; None keeps the model's current device.
        """
        if device is None:
            device = next(model.parameters()).device
        self.device = torch.device(device)
        self.model = model.to(self.device)

    @classmethod
    def from_checkpoint(cls, path, device: torch.device | str | None = None) -> "NanoTabPFNClassifier":
        """Loads {"model_config": dict of ModelConfig fields, "model": state_dict} written by torch.save.

        Args:
            path: the checkpoint file.
            device: where to run the model (None: CPU).
        Returns:
            a NanoTabPFNClassifier around the loaded model.
        """
        # weights_only=True: a checkpoint is data; never run code from it.
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(checkpoint, dict) or "model_config" not in checkpoint or "model" not in checkpoint:
            found = sorted(checkpoint) if isinstance(checkpoint, dict) else type(checkpoint).__name__
            raise ValueError(f"{path}: expected a checkpoint dict with keys 'model_config' and 'model', found {found}")
        model_config = dict(checkpoint["model_config"])
        fields = {f.name for f in dataclasses.fields(ModelConfig)}
        unknown = sorted(set(model_config) - fields)
        if unknown:
            raise ValueError(f"{path}: unknown model_config field(s) {unknown}")
        # A kernel pinned for the training step (sdpa_backend) does not bind inference, which runs in fp32.
        model_config["sdpa_backend"] = "auto"
        model = NanoTabPFNModel(ModelConfig(**model_config))
        model.load_state_dict(_strip_prefixes(checkpoint["model"]))
        return cls(model, device=device)

    @staticmethod
    def _check_X(X, what: str) -> np.ndarray:
        """Returns X as a finite float32 (n, f) array with n, f >= 1, or raises ValueError."""
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"{what} must be 2-D (samples, features), got {X.ndim}-D with shape {X.shape}")
        if X.shape[0] == 0 or X.shape[1] == 0:
            raise ValueError(f"{what} is empty: shape {X.shape}")
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported just below, as a ValueError
            X = X.astype(np.float32)
        if not np.isfinite(X).all():
            raise ValueError(f"{what} contains NaN or infinity (after conversion to float32)")
        return X

    def fit(self, X_train, y_train) -> "NanoTabPFNClassifier":
        """Stores the training set and the classes seen.

        Args:
            X_train: (n, f) features, finite.
            y_train: (n,) labels of any sortable kind; at most model.config.num_outputs distinct values.
        Returns:
            self.
        """
        X_train = self._check_X(X_train, "X_train")
        y_train = np.asarray(y_train)
        if y_train.ndim != 1 or y_train.shape[0] != X_train.shape[0]:
            raise ValueError(f"y_train must be 1-D with {X_train.shape[0]} labels, got shape {y_train.shape}")
        if y_train.dtype.kind == "f" and not np.isfinite(y_train).all():
            raise ValueError("y_train contains NaN or infinity")
        try:
            classes, indices = np.unique(y_train, return_inverse=True)
        except TypeError as error:  # mixed label types cannot be sorted
            raise ValueError(f"y_train labels cannot be sorted: {error}") from None
        num_outputs = self.model.config.num_outputs
        if len(classes) > num_outputs:
            raise ValueError(f"y_train has {len(classes)} classes but the model predicts at most {num_outputs}")
        self.classes_ = classes
        self.n_features_in_ = X_train.shape[1]
        self.X_train = X_train
        self.y_train = indices.reshape(-1).astype(np.float32)  # class indices 0..K-1, as the model reads them
        self.num_classes = len(classes)
        return self

    def predict_proba(self, X_test) -> np.ndarray:
        """
        Args:
            X_test: (m, f) features with the same f as in fit.
        Returns:
            (m, K) float probabilities over classes_ (rows sum to 1).
        """
        if not hasattr(self, "classes_"):
            raise ValueError("this NanoTabPFNClassifier is not fitted yet: call fit(X_train, y_train) first")
        X_test = self._check_X(X_test, "X_test")
        if X_test.shape[1] != self.n_features_in_:
            raise ValueError(f"X_test has {X_test.shape[1]} features but fit saw {self.n_features_in_}")
        x = torch.from_numpy(np.concatenate([self.X_train, X_test])).unsqueeze(0).to(self.device)  # (1, n+m, f)
        y = torch.from_numpy(self.y_train).unsqueeze(0).to(self.device)                             # (1, n)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                logits = self.model((x, y), train_test_split_index=self.X_train.shape[0])  # (1, m, num_outputs)
                # The model predicts up to num_outputs classes; keep the K seen in fit.
                logits = logits.squeeze(0)[:, :self.num_classes].float()
                probabilities = F.softmax(logits, dim=1)
        finally:
            self.model.train(was_training)
        return probabilities.cpu().numpy()

    def predict(self, X_test) -> np.ndarray:
        """
        Args:
            X_test: (m, f) features.
        Returns:
            (m,) predicted labels, from classes_.
        """
        probabilities = self.predict_proba(X_test)   # first: it checks that fit ran
        return self.classes_[probabilities.argmax(axis=1)]
