"""Link prediction: held-out validation and test edges, fresh training negatives per batch, a pair decoder,
binary cross-entropy, and AUC, MRR and Hits@K exact across ranks (`link_metrics`)."""
from __future__ import annotations

from typing import Any, TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from mpignn.errors import ConfigError
from mpignn.tasks.link_metrics import LinkScores
from mpignn.mpi import steps_per_epoch
from mpignn.models import build_model
from mpignn.models.link import LinkModel
from mpignn.data.links import undirected_pairs
from mpignn.inference.layerwise import exact_outputs
from mpignn.tasks.base import Pick, Task, autocast, picker, with_rows

if TYPE_CHECKING:
    from mpignn.config.train_config import TrainConfig
    from mpignn.launch.bootstrap import Runtime
    from mpignn.loader.local_graph import LocalGraph

__all__ = ["LinkTask", "LinkSeeds", "evaluate_links", "score_pairs"]


class LinkSeeds:
    """Link prediction's seeds: positive pairs (global ids, [2, E]), each batch adding negatives.

    Training draws `ratio` negatives per positive from the batch's seed (`uniform`: PyG's binary; `tail`: the
    source kept); evaluation passes fixed ones: `fixed_neg` [2, E] (AUC) and `tails` [E, K] (MRR, Hits@K).
    A batch's `edge_label_index` lists positives, negatives, then the tails (`num_pos`, `num_tails`).
    """

    def __init__(self, pos: np.ndarray, num_nodes: int, *, negatives: str = "uniform", ratio: int = 1,
                 fixed_neg: np.ndarray | None = None, tails: np.ndarray | None = None) -> None:
        self.pos = np.asarray(pos, dtype=np.int64).reshape(2, -1)
        self.num_nodes, self.negatives, self.ratio = int(num_nodes), negatives, int(ratio)
        self.fixed_neg, self.tails = fixed_neg, tails

    def __len__(self) -> int:
        return self.pos.shape[1]

    def pairs(self, items: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray, int, int]:
        """Return (pairs [2, P], labels [P], positives, tails per positive) of the positives `items`."""
        pos = self.pos[:, items]
        if self.fixed_neg is not None:
            neg = self.fixed_neg[:, items]
        else:
            rng = np.random.default_rng(seed)
            k = len(items) * self.ratio
            src = np.tile(pos[0], self.ratio) if self.negatives == "tail" else rng.integers(0, self.num_nodes, k)
            neg = np.stack([src, rng.integers(0, self.num_nodes, k)])
        parts = [pos, neg]
        k_tails = 0
        if self.tails is not None:
            k_tails = self.tails.shape[1]
            parts.append(np.stack([np.repeat(pos[0], k_tails), self.tails[items].reshape(-1)]))
        pairs = np.concatenate(parts, axis=1)
        labels = np.zeros(pairs.shape[1], dtype=np.float32)
        labels[:len(items)] = 1.0
        return pairs, labels, len(items), k_tails

    def new_pass(self, pass_seed: int) -> None:
        """Nothing per pass: negatives come from the batch's seed."""

    def draw(self, sampler: Any, items: np.ndarray, seed: int, variates: tuple[int, int] | None = None) -> Any:
        """Sample around both ends of the pairs of `items`, with PyG's link fields."""
        pairs, labels, num_pos, num_tails = self.pairs(items, seed)
        out = sampler.sample_from_edges(pairs[0], pairs[1], seed, variates)
        out.edge_label, out.metadata = labels, {"num_pos": num_pos, "num_tails": num_tails}
        return out


class LinkTask(Task):
    name = "link"
    metric = "auc"
    metric_name = "AUC"
    unit = "edges"  # positive edges per second
    model_flags = ("decoder",)  # a dot product has no weights, an MLP has

    def __init__(self, *, val: float = 0.05, test: float = 0.1, num_tails: int = 100, decoder: str = "dot",
                 negatives: str = "uniform", hits_k: int = 10) -> None:
        self.val, self.test, self.num_tails = val, test, num_tails
        self.decoder, self.negatives, self.hits_k = decoder, negatives, hits_k

    @classmethod
    def from_config(cls, cfg: TrainConfig) -> "LinkTask":
        return cls(val=cfg.link_val, test=cfg.link_test, num_tails=cfg.link_tails, decoder=cfg.decoder,
                   negatives=cfg.negatives, hits_k=cfg.hits_k).with_model_options(cfg)

    def partition_extras(self) -> dict[str, Any]:
        return {"val": self.val, "test": self.test, "num_tails": self.num_tails}

    def check_graph(self, schema: Any) -> None:
        if schema is not None:
            raise ConfigError("link prediction on a heterogeneous graph is not supported yet. HINT: --task node")

    def cache_seeds(self, part: Any) -> np.ndarray:
        # batches start from both ends of edges and from uniform negatives: every own node
        return np.arange(part.lo, part.hi, dtype=np.int64)

    def local_data(self, part: Any, held_out: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
        """`train_pos`: each undirected edge once, at the part owning its smaller end."""
        return {**held_out, "train_pos": undirected_pairs(part.rowptr, part.col, part.lo)}

    def seeds(self, graph: LocalGraph, split: str, pick: Pick) -> LinkSeeds:
        arrays, num_nodes = graph.task_data, graph.part.meta.num_nodes
        pos = pick(arrays[f"{split}_pos"], 1)
        if split == "train":
            return LinkSeeds(pos, num_nodes, negatives=self.negatives)
        return LinkSeeds(pos, num_nodes, fixed_neg=pick(arrays[f"{split}_neg"], 1),
                         tails=pick(arrays[f"{split}_neg_tails"], 0))

    eval_factor = 8

    def eval_batch_size(self, seeds: Any, items: int) -> int:
        return max(1, items // (2 + seeds.tails.shape[1]))  # each positive brings 1 + K negatives

    def build_model(self, name: str, graph: LocalGraph, hidden: int, num_layers: int, dropout: float) -> torch.nn.Module:
        encoder = build_model(name, graph.in_channels(), hidden, hidden, num_layers, dropout, schema=graph.schema,
                              norm=self.norm, residual=self.residual, linear_head=self.linear_head)
        return LinkModel(encoder, hidden, self.decoder)

    def forward(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        return score_pairs(model, batch)

    def items(self, batch: Any) -> int:
        return batch.edge_label.numel()

    def units(self, batch: Any) -> int:
        return batch.num_pos

    def loss(self, logits: torch.Tensor, batch: Any, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        labels = batch.edge_label
        loss_sum = F.binary_cross_entropy_with_logits(logits.float(), labels, reduction="sum")
        return loss_sum, (logits > 0).to(labels.dtype), labels

    def evaluate(self, rt: Runtime, model: torch.nn.Module, loaders: dict[str, Any], *, now: bool, bf16: bool,
                 embedding: Any, test_if: float | None) -> dict[str, Any]:
        scores: dict[str, dict[str, float]] = {}
        for split in ("val", "test") if now else ():
            if split == "test" and test_if is not None and not scores["val"]["auc"] >= test_if:  # NaN: below
                break
            scores[split] = evaluate_links(model, loaders[split], device=rt.device, bf16=bf16, hits_k=self.hits_k,
                                           embedding=embedding).summary(rt.comm)
        test = scores.get("test", {})
        return {"val_auc": scores["val"]["auc"] if "val" in scores else None, "test_auc": test.get("auc"),
                "test_mrr": test.get("mrr"), f"test_hits@{self.hits_k}": test.get("hits")}

    def evaluate_exact(self, rt: Runtime, graph: LocalGraph, model: torch.nn.Module, *, chunk: int = 8192) -> dict[str, Any]:
        module = getattr(model, "module", model).eval()
        _, comm, store = exact_outputs(rt, graph, self.encoder(module), chunk=chunk)
        pick = picker(graph.replicated, rt.world_size, rt.rank)
        scores = {}
        for split in ("val", "test"):
            seeds = self.seeds(graph, split, pick)
            per = self.eval_batch_size(seeds, self.eval_factor * chunk)  # positives, each with 1 + K negatives
            steps = steps_per_epoch(comm, len(seeds), per)
            sums = LinkScores(self.hits_k)
            for step in range(steps):
                items = np.arange(step * per, min((step + 1) * per, len(seeds)))
                pairs, labels, num_pos, num_tails = seeds.pairs(items, 0)
                ends = store.gather(pairs.reshape(-1))[0]  # collective: both ends' rows, empty steps too
                if len(items):
                    ends = torch.from_numpy(ends).to(rt.device)
                    with torch.no_grad():
                        logits = self.score_pairs(module, ends[:pairs.shape[1]], ends[pairs.shape[1]:])
                    sums.add(logits.float().cpu().numpy(), labels, num_pos, num_tails)
            scores[split] = sums.summary(rt.comm)  # collective: every rank's pairs
        return {"val_auc": scores["val"]["auc"], "test_auc": scores["test"]["auc"],
                "test_mrr": scores["test"]["mrr"], f"test_hits@{self.hits_k}": scores["test"]["hits"]}

    def encoder(self, model: torch.nn.Module) -> torch.nn.Module:
        return model.encoder

    def emb_layer(self, num_layers: int) -> int:
        return num_layers  # the encoder's output is the embedding the decoder scores

    def score_pairs(self, model: torch.nn.Module, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return model.decode(a, b)

    def describe(self, rec: dict[str, Any]) -> str:
        acc = lambda v: "  -  " if v is None else f"{v:.4f}"  # noqa: E731
        hits = f"test_hits@{self.hits_k}"
        return (f"auc val {acc(rec['val_auc'])} test {acc(rec['test_auc'])} mrr {acc(rec['test_mrr'])} "
                f"{hits[5:]} {acc(rec[hits])}")


def score_pairs(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """Return one logit per pair of the batch's `edge_label_index`, by a `LinkModel`."""
    return model(batch.x, batch.edge_index, batch.num_sampled_nodes, batch.num_sampled_edges,
                 batch.edge_label_index, getattr(batch, "in_degree", None), getattr(batch, "mean_over", None),
                 getattr(batch, "edge_weight", None))


@torch.no_grad()
def evaluate_links(model: torch.nn.Module, loader: Any, *, device: str, bf16: bool = False,
                   hits_k: int = 10, embedding: Any = None) -> LinkScores:
    """Return this rank's scores of its held-out pairs; reduce them with `LinkScores.summary` (collective)."""
    model.eval()
    module = getattr(model, "module", model)
    scores = LinkScores(hits_k)
    for batch in loader:
        with_rows(batch, embedding, device, train=False)
        if batch.num_pos:
            with autocast(device, bf16):
                logits = score_pairs(module, batch)
            scores.add(logits.float().cpu().numpy(), batch.edge_label.cpu().numpy(), batch.num_pos,
                       batch.num_tails)
    return scores
