"""The structural causal models that draw a prior table's features and target, batched on one device: MLP SCMs,
sums of random trees, and random DAGs whose nodes mix mechanisms (prior_dump.py turns them into labelled tables).

Each takes (gen, rng, num, rows, features, num_features, device, groups): a torch generator for the data, a numpy
generator for host draws that decide shapes (no device sync), and returns X (num, R, F) and target (num, R)."""
import math

import numpy as np
import torch

def uniform(gen, shape, low, high, device):
    return low + (high - low) * torch.rand(shape, generator=gen, device=device)


def log_uniform(gen, shape, low, high, device):
    return torch.exp(uniform(gen, shape, math.log(low), math.log(high), device))


def standardize(t, dim=1):
    """Zero mean, unit std along `dim`; a constant column becomes 0, not NaN (two plain passes: fast on CPU)."""
    centered = t - t.mean(dim, keepdim=True)
    return centered * torch.rsqrt(centered.square().mean(dim, keepdim=True) + 1e-12)


ACTIVATIONS = (torch.tanh, torch.relu, torch.sin, torch.abs, torch.square, lambda t: (t > 0).to(t.dtype))


def activate(pre, which):
    """pre (G, W, R); which: numpy (G,) index into ACTIVATIONS; each runs only on the datasets that drew it."""
    out = torch.empty_like(pre)
    for index, function in enumerate(ACTIVATIONS):
        selected = np.flatnonzero(which == index)
        if len(selected) == len(which):
            return function(pre)
        if len(selected):
            selected = torch.from_numpy(selected).to(pre.device)
            out.index_copy_(0, selected, function(pre.index_select(0, selected)))
    return out


def sample_causes(gen, num, count, rows, device):
    """Root causes (num, count, rows): Gaussian or uniform per dataset, zero mean, unit variance."""
    use_uniform = torch.rand(num, 1, 1, generator=gen, device=device) < 0.5
    normal = torch.randn(num, count, rows, generator=gen, device=device)
    # sqrt(3) * (2 * Phi(z) - 1) is uniform on [-sqrt(3), sqrt(3)]: one draw serves both laws
    return torch.where(use_uniform, math.sqrt(3) * torch.erf(normal / math.sqrt(2)), normal)


def row_groups(gen, rng, num, rows, share, device):
    """(num, R) long, a group per row: a share of the datasets hold repeated measures of entities (R // U{2..8}
    groups, rows drawn into them at random, each group named by a row of its own number); the other datasets' rows
    are each their own group."""
    grouped = torch.from_numpy(rng.random(num) < share).to(device)
    num_groups = torch.from_numpy(rows // rng.integers(2, 9, num)).to(device)
    drawn = (torch.rand(num, rows, generator=gen, device=device) * num_groups[:, None]).long()
    return torch.where(grouped[:, None], drawn, torch.arange(rows, device=device))


def share_within_groups(gen, causes, groups):
    """causes (num, count, R): a per-dataset U(0.3, 1) share of them hold one value per row group (an entity's age,
    sex, baseline), taken from the row that names the group; groups (num, R) from row_groups."""
    num, count, rows = causes.shape
    share = uniform(gen, (num, 1, 1), 0.3, 1.0, causes.device)
    static = torch.rand(num, count, 1, generator=gen, device=causes.device) < share
    return torch.where(static, causes.gather(2, groups[:, None, :].expand(num, count, rows)), causes)


def entity_columns(gen, x, target, groups, num_features):
    """Grouped datasets: half get a target fixed per group (an entity's trait, as a subject's treatment arm), half
    (of >= 2 features) an id column, a random numbering of the groups in the last feature. x (num, R, F), target
    (num, R); returns both."""
    num, rows, features = x.shape
    device = x.device
    grouped = (groups != torch.arange(rows, device=device)).any(1)                                      # (num,)
    per_entity = grouped & (torch.rand(num, generator=gen, device=device) < 0.5)
    target = torch.where(per_entity[:, None], target.gather(1, groups), target)
    with_id = grouped & (num_features >= 2) & (torch.rand(num, generator=gen, device=device) < 0.5)
    numbering = torch.rand(num, rows, generator=gen, device=device).argsort(1).gather(1, groups).to(x.dtype)
    last = torch.arange(features, device=device) == (num_features[:, None] - 1)                       # (num, F)
    return torch.where(with_id[:, None, None] & last[:, None, :], numbering[:, :, None], x), target



def column_keys(gen, nodes, target):
    """Which nodes a table shows: Gumbel top-k keys, logits U(0, 30) * |corr(node, y)| (a real table's columns relate
    to its target). nodes (num, N, R), target (num, 1, R); returns keys and correlations, each (num, N)."""
    num, num_nodes, _ = nodes.shape
    centered = target - target.mean(2, keepdim=True)
    correlation = (nodes @ centered.transpose(1, 2)).squeeze(2) / (
        nodes.norm(dim=2) * centered.norm(dim=2) + 1e-6)             # (num, nodes)
    u = torch.rand(num, num_nodes, generator=gen, device=nodes.device)
    gumbel = -torch.log(-torch.log(u + 1e-12) + 1e-12)
    return 30.0 * torch.rand(num, 1, generator=gen, device=nodes.device) * correlation.abs() + gumbel, correlation

def mlp_scm(gen, rng, num, rows, features, num_features, device, groups=None, noise_scale=1.0):
    """Random sparse MLP SCMs sharing depth and width: X (num, R, F), target (num, R); nodes are (num, width, R).
    groups (num, R) or None: root causes shared within row groups (share_within_groups)."""
    num_layers = int(rng.integers(2, 7))
    width = max(features, int(round(math.exp(rng.uniform(math.log(5), math.log(130))))))   # room for F causes
    activation = rng.integers(0, len(ACTIVATIONS), (num, num_layers))
    noise_std = log_uniform(gen, (num, 1, 1), 0.01, 0.3, device) * noise_scale
    keep_probability = uniform(gen, (num, 1, 1), 0.2, 1.0, device)   # weight density
    # layers output lerp(pre, activation(pre), nonlinearity): 6 full random activations are unlearnable
    nonlinearity = torch.rand(num, 1, 1, generator=gen, device=device)
    # mode "causes -> output": X = the (only nonzero) root causes, y a last-layer node; else nodes anywhere
    causes_to_output = torch.rand(num, generator=gen, device=device) < 0.3
    observed = torch.arange(width, device=device) < num_features[:, None]        # (num, width)
    hidden = sample_causes(gen, num, width, rows, device)                       # (num, width, R)
    if groups is not None:
        hidden = share_within_groups(gen, hidden, groups)
    hidden = hidden * (observed | ~causes_to_output[:, None])[:, :, None]
    nodes = [hidden]
    for layer in range(num_layers):
        # sparse weights (num, out, in), uniform where kept; the row normalisation fixes the scale
        u = torch.rand(num, width, width, generator=gen, device=device)
        weight = torch.where(u < keep_probability, 2 * u - keep_probability, 0.0)
        # every unit keeps a parent (an observed cause in layer 0 of "causes -> output"): no pure-noise node
        u = torch.rand(num, width, 1, generator=gen, device=device)
        first_layer_of_causes = causes_to_output[:, None, None] & (layer == 0)
        parent = (u * torch.where(first_layer_of_causes, num_features[:, None, None], width)).long()
        weight.scatter_(2, parent, uniform(gen, (num, width, 1), -1.0, 1.0, device))
        # unit-norm rows on standardised inputs: the gain alone sets how nonlinear each dataset gets
        gain = log_uniform(gen, (num, 1, 1), 0.3, 3.0, device)
        weight = weight * (gain / (weight.norm(dim=2, keepdim=True) + 1e-6))
        bias = 0.5 * torch.randn(num, width, 1, generator=gen, device=device)
        pre = torch.baddbmm(bias, weight, hidden)                                # (num, width, R)
        post = torch.lerp(pre, activate(pre, activation[:, layer]), nonlinearity)
        # standardising after the activation keeps noise_std relative to the signal at any depth
        noise = torch.randn(num, width, rows, generator=gen, device=device)
        hidden = torch.addcmul(standardize(post, dim=2), noise, noise_std)
        nodes.append(hidden)
    nodes = torch.cat(nodes, 1)                                      # (num, (L+1) * width, R)
    num_nodes = nodes.shape[1]
    layer_of_node = torch.arange(num_nodes, device=device) // width
    # y: a random non-root node (a last-layer one in the "causes -> output" mode)
    key_y = torch.rand(num, num_nodes, generator=gen, device=device) + 2.0 * (layer_of_node == 0)
    key_y = key_y + 2.0 * (causes_to_output[:, None] & (layer_of_node != num_layers))
    y_node = key_y.argmin(1)                                         # (num,)
    target = nodes.gather(1, y_node[:, None, None].expand(num, 1, rows))         # (num, 1, R)
    key_x, correlation = column_keys(gen, nodes, target)
    near_copy = (correlation.abs() > 0.999) & ~causes_to_output[:, None]   # a copy of y says too much
    key_x = torch.where(near_copy, -math.inf, key_x).scatter_(1, y_node[:, None], -math.inf)
    key_x = torch.where(causes_to_output[:, None] & (layer_of_node != 0), -math.inf, key_x)
    observed_cause = torch.arange(num_nodes, device=device) < num_features[:, None]
    key_x = key_x + 1e3 * (causes_to_output[:, None] & observed_cause)   # observed causes come first
    x_nodes = key_x.topk(features, dim=1).indices                    # (num, F)
    x = nodes.gather(1, x_nodes[:, :, None].expand(num, features, rows)).transpose(1, 2)
    return x, target[:, 0]


def tree_scm(gen, rng, num, rows, features, num_features, device, groups=None, max_depth=4, noise_scale=1.0):
    """Sums of random decision trees (2..max_depth levels) on correlated features. Returns X (num, R, F), target
    (num, R). groups (num, R) or None: causes shared within row groups (share_within_groups)."""
    depth, num_trees = int(rng.integers(2, max_depth + 1)), int(rng.integers(1, 4))
    num_internal = 2 ** depth - 1
    active = (torch.arange(features, device=device) < num_features[:, None]).float()   # (num, F)
    correlation = torch.rand(num, 1, 1, generator=gen, device=device)     # 0 = independent
    mixing = torch.eye(features, device=device) + correlation * torch.randn(
        num, features, features, generator=gen, device=device) / math.sqrt(features)
    causes = sample_causes(gen, num, rows, features, device)                          # (num, R, F)
    if groups is not None:
        causes = share_within_groups(gen, causes.transpose(1, 2), groups).transpose(1, 2)
    x = (causes @ mixing) * active[:, None, :]                                          # (num, R, F)
    oblique = torch.rand(num, 1, 1, generator=gen, device=device) < 0.4
    target = torch.zeros(num, rows, device=device)
    for _ in range(num_trees):
        # split direction per internal node: one active feature (axis) or a random projection
        split_feature = (torch.rand(num, num_internal, generator=gen, device=device)
                         * num_features[:, None]).long()                                # (num, nodes)
        axis = torch.nn.functional.one_hot(split_feature, features).transpose(1, 2).float()
        projection = torch.randn(num, features, num_internal, generator=gen, device=device)
        direction = torch.where(oblique, projection * active[:, :, None], axis)        # (num, F, nodes)
        value = x @ direction                                                           # (num, R, nodes)
        # threshold = the value of a random row, so every split cuts through the data
        threshold_row = torch.randint(0, rows, (num, 1, num_internal), generator=gen, device=device)
        go_right = (value > value.gather(1, threshold_row)).long()
        node = torch.zeros(num, rows, dtype=torch.long, device=device)
        for _ in range(depth):   # walk down: the children of node n are 2n+1 and 2n+2
            node = 2 * node + 1 + go_right.gather(2, node[:, :, None]).squeeze(2)
        leaf_value = torch.randn(num, num_internal + 1, generator=gen, device=device)
        target = target + leaf_value.gather(1, node - num_internal)
    noise_std = log_uniform(gen, (num, 1), 0.02, 0.5, device) * noise_scale
    return x, standardize(target) + noise_std * torch.randn(num, rows, generator=gen, device=device)


def dag_scm(gen, rng, num, rows, features, num_features, device, groups=None, noise_scale=1.0):
    """Random DAGs whose nodes each apply their own mechanism to their parents (TabPFN v2's prior in kind): a smooth
    activation of a weighted sum, an oblivious tree of three random splits, or a category (the nearest of 2..10
    centres) whose code is the observed column and whose random value per code is what its children see.
    Returns X (num, R, F), target (num, R); values are (num, N, R) over the N nodes in topological order."""
    num_nodes = features + 2 + int(rng.integers(0, features + 16))       # F columns, y, and hidden nodes
    num_roots = int(rng.integers(2, max(3, num_nodes // 3)))
    activation = rng.integers(0, len(ACTIVATIONS), (num, num_nodes))
    edge_probability = uniform(gen, (num, 1, 1), 0.1, 0.6, device)
    categorical_share, tree_share = (uniform(gen, (num,), 0.0, 0.4, device) for _ in range(2))
    noise_std = log_uniform(gen, (num, 1), 0.01, 0.3, device) * noise_scale
    values = torch.empty(num, num_nodes, rows, device=device)             # what children see, standardised
    observed = torch.empty(num, num_nodes, rows, device=device)           # what a column shows (a category's code)
    roots = sample_causes(gen, num, num_roots, rows, device)
    values[:, :num_roots] = roots if groups is None else share_within_groups(gen, roots, groups)
    observed[:, :num_roots] = values[:, :num_roots]
    bit = torch.tensor([[1], [2], [4]], device=device)                    # a tree's three splits -> leaf 0..7
    for j in range(num_roots, num_nodes):
        parents = torch.rand(num, 1, j, generator=gen, device=device) < edge_probability         # (num, 1, j)
        parents.scatter_(2, (torch.rand(num, 1, 1, generator=gen, device=device) * j).long(), True)   # >= 1 parent
        weight = torch.randn(num, 3, j, generator=gen, device=device) * parents
        weight = weight / (weight.norm(dim=2, keepdim=True) + 1e-6)     # unit-norm rows on standardised parents
        pre = weight @ values[:, :j] + noise_std[:, :, None] * torch.randn(num, 3, rows, generator=gen, device=device)
        gain = log_uniform(gen, (num, 1), 0.3, 3.0, device)
        smooth = gain * pre[:, 0] + 0.5 * torch.randn(num, 1, generator=gen, device=device)     # (num, R)
        smooth = torch.lerp(smooth, activate(smooth[:, None], activation[:, j])[:, 0],
                            torch.rand(num, 1, generator=gen, device=device))
        # oblivious tree: each of the three projections split at a random row's value, 8 leaves
        threshold = pre.gather(2, torch.randint(0, rows, (num, 3, 1), generator=gen, device=device))
        leaf = ((pre > threshold).long() * bit).sum(1)                                        # (num, R)
        tree = torch.randn(num, 8, generator=gen, device=device).gather(1, leaf)
        # category: the nearest of K random rows' projections; codes number the centres in a random order
        centres = pre.gather(2, torch.randint(0, rows, (num, 3, 10), generator=gen, device=device))  # (num, 3, 10)
        distance = (pre[:, :, :, None] - centres[:, :, None, :]).square().sum(1)                 # (num, R, 10)
        levels = torch.randint(2, 11, (num, 1, 1), generator=gen, device=device)
        code = torch.where(torch.arange(10, device=device) < levels, distance, math.inf).argmin(2)   # (num, R)
        category = torch.randn(num, 10, generator=gen, device=device).gather(1, code)
        draw = torch.rand(num, 1, generator=gen, device=device)
        is_category = draw < categorical_share[:, None]
        is_tree = ~is_category & (draw < (categorical_share + tree_share)[:, None])
        value = torch.where(is_category, category, torch.where(is_tree, tree, smooth))
        values[:, j] = standardize(value) + noise_std * torch.randn(num, rows, generator=gen, device=device)
        observed[:, j] = torch.where(is_category, code.to(value.dtype), values[:, j])
    # y: a random non-root node; X: num_features other nodes, those related to y more likely
    is_root = torch.arange(num_nodes, device=device) < num_roots
    y_node = (torch.rand(num, num_nodes, generator=gen, device=device) + 2.0 * is_root).argmin(1)     # (num,)
    target = values.gather(1, y_node[:, None, None].expand(num, 1, rows))                              # (num, 1, R)
    key_x, correlation = column_keys(gen, values, target)
    key_x = torch.where(correlation.abs() > 0.999, -math.inf, key_x).scatter_(1, y_node[:, None], -math.inf)
    x_nodes = key_x.topk(features, dim=1).indices                                                      # (num, F)
    x = observed.gather(1, x_nodes[:, :, None].expand(num, features, rows)).transpose(1, 2)
    return x, target[:, 0]


def proxy_column(gen, x, target, num_features, share):
    """In a share of datasets one active column becomes the target plus noise (std log-uniform 0.1-1: correlation
    0.71-0.995), as real tables often hold a column that nearly decides the label (results/cpu-2core/prior-fit).
    x (num, R, F), target (num, R); returns x."""
    num, rows, features = x.shape
    device = x.device
    chosen = torch.rand(num, generator=gen, device=device) < share                                      # (num,)
    column = (torch.rand(num, generator=gen, device=device) * num_features).long()                     # (num,)
    noise_std = log_uniform(gen, (num, 1), 0.1, 1.0, device)
    proxy = standardize(target) + noise_std * torch.randn(num, rows, generator=gen, device=device)    # (num, R)
    replaced = chosen[:, None] & (torch.arange(features, device=device) == column[:, None])            # (num, F)
    return torch.where(replaced[:, None, :], proxy[:, :, None], x)
