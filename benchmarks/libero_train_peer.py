"""Peer baseline: LIBERO's own PyTorch policies, one training step timed on CPU.

Runs in the peer venv that benchmarks/libero_train_peer.sh builds (torch + LIBERO's model code), never in the
project's environment. It builds BCTransformerPolicy / BCRNNPolicy / BCViLTPolicy from LIBERO's package with the
hyperparameters of LIBERO's configs (policy/*.yaml, data/default.yaml, train/default.yaml, optimizer/adam_w.yaml;
the package ships no YAML, so the values are set below) and times the step of LIBERO's `Sequential.observe`:
zero_grad -> policy.compute_loss (augmentation, forward, GMM NLL) -> backward -> clip_grad_norm_(100) -> AdamW.

Prints one JSON object on stdout: {"results": [{policy, batch, steps_per_s, ...}], "versions": {...}}.
Usage: python benchmarks/libero_train_peer.py --policies bc_transformer --batches 32 --steps 5 --warmup 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import torch
from easydict import EasyDict

POLICY_CLASS = {"bc_transformer": "BCTransformerPolicy", "bc_rnn": "BCRNNPolicy", "bc_vilt": "BCViLTPolicy"}


def _head():  # policy_head/gmm_head.yaml
    return {"network": "GMMHead",
            "network_kwargs": {"hidden_size": 1024, "num_layers": 2, "min_std": 0.0001, "num_modes": 5,
                               "low_eval_noise": False, "activation": "softplus"},
            "loss_kwargs": {"loss_coef": 1.0}}


def policy_cfg(kind: str, lang_dim: int) -> dict:
    common = {
        "color_aug": {"network": "BatchWiseImgColorJitterAug",
                      "network_kwargs": {"input_shape": None, "brightness": 0.3, "contrast": 0.3,
                                         "saturation": 0.3, "hue": 0.3, "epsilon": 0.1}},
        "translation_aug": {"network": "TranslationAug", "network_kwargs": {"input_shape": None, "translation": 8}},
        "language_encoder": {"network": "MLPEncoder",
                             "network_kwargs": {"input_size": lang_dim, "hidden_size": 128, "output_size": 128,
                                                "num_layers": 1}},
        "policy_head": _head(),
    }
    resnet = {"network": "ResnetEncoder",
              "network_kwargs": {"pretrained": False, "freeze": False, "remove_layer_num": 4, "no_stride": False,
                                 "language_fusion": "film"}}
    posenc = {"network": "SinusoidalPositionEncoding",
              "network_kwargs": {"input_size": None, "inv_freq_factor": 10, "factor_ratio": None}}
    temporal = {"transformer_input_size": None, "transformer_num_layers": 4, "transformer_num_heads": 6,
                "transformer_head_output_size": 64, "transformer_mlp_hidden_size": 256, "transformer_dropout": 0.1,
                "transformer_max_seq_len": 10, "extra_num_layers": 0, "extra_hidden_size": 128,
                "temporal_position_encoding": posenc}
    if kind == "bc_transformer":
        return {**common, **temporal, "policy_type": "BCTransformerPolicy", "embed_size": 64, "image_encoder": resnet}
    if kind == "bc_rnn":
        return {**common, "policy_type": "BCRNNPolicy", "image_embed_size": 64, "text_embed_size": 32,
                "rnn_hidden_size": 1024, "rnn_num_layers": 2, "rnn_dropout": 0.0, "rnn_bidirectional": False,
                "image_encoder": resnet}
    if kind == "bc_vilt":
        return {**common, **temporal, "policy_type": "BCViLTPolicy", "embed_size": 128,
                "spatial_transformer_input_size": None, "spatial_transformer_num_layers": 7,
                "spatial_transformer_num_heads": 8, "spatial_transformer_head_output_size": 120,
                "spatial_transformer_mlp_hidden_size": 256, "spatial_transformer_dropout": 0.1,
                "spatial_down_sample": True, "spatial_down_sample_embed_size": 64,
                "image_encoder": {"network": "PatchEncoder",
                                  "network_kwargs": {"patch_size": [8, 8], "no_patch_embed_bias": False}}}
    raise SystemExit(f"unknown policy {kind!r}; choose from {sorted(POLICY_CLASS)}")


def build(kind: str, img: int, lang_dim: int, device: str = "cpu"):
    from libero.lifelong.models import get_policy_class

    cfg = EasyDict({
        "device": device,
        "policy": policy_cfg(kind, lang_dim),
        "data": {"use_joint": True, "use_gripper": True, "use_ee": False,
                 "obs": {"modality": {"rgb": ["agentview_rgb", "eye_in_hand_rgb"], "depth": [],
                                      "low_dim": ["gripper_states", "joint_states"]}}},
        "train": {"use_augmentation": True, "grad_clip": 100.0, "loss_scale": 1.0},
    })
    shape_meta = {"ac_dim": 7, "all_shapes": {"agentview_rgb": (3, img, img), "eye_in_hand_rgb": (3, img, img),
                                              "gripper_states": (2,), "joint_states": (7,)}}
    return cfg, get_policy_class(POLICY_CLASS[kind])(cfg, shape_meta).to(device)


def batch(b: int, t: int, img: int, lang_dim: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    rgb = lambda: torch.randint(0, 256, (b, t, 3, img, img), generator=g).float() / 255.0  # robomimic: float [0,1]
    return {"obs": {"agentview_rgb": rgb(), "eye_in_hand_rgb": rgb(),
                    "joint_states": torch.randn(b, t, 7, generator=g), "gripper_states": torch.randn(b, t, 2, generator=g)},
            "task_emb": torch.randn(b, lang_dim, generator=g),
            "actions": torch.rand(b, t, 7, generator=g) * 2 - 1}


def time_policy(kind: str, b: int, steps: int, warmup: int, t: int, img: int, lang_dim: int,
                device: str = "cpu") -> dict:
    torch.manual_seed(0)
    cfg, policy = build(kind, img, lang_dim, device)
    policy.train()
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-4, betas=(0.9, 0.999), weight_decay=1e-4)
    to = lambda x: {k: to(v) for k, v in x.items()} if isinstance(x, dict) else x.to(device)
    data = to(batch(b, t, img, lang_dim))

    def observe():  # LIBERO algos/base.py Sequential.observe (compute_loss augments data["obs"] in place: copy)
        d = {**data, "obs": dict(data["obs"])}
        opt.zero_grad()
        loss = policy.compute_loss(d)
        (cfg.train.loss_scale * loss).backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.train.grad_clip)
        opt.step()
        return loss.item()  # .item() waits for the device

    for _ in range(warmup):
        observe()
    times, cpu = [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = observe()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    med = sorted(times)[len(times) // 2]
    return {"policy": kind, "framework": "torch (LIBERO)", "obs": "rgb", "batch": b, "seq_len": t, "device": device,
            "params": sum(p.numel() for p in policy.parameters()),
            "steps": steps, "step_s_median": med, "step_s_all": times,
            "steps_per_s": 1.0 / med, "samples_per_s": b / med, "cpu_s_per_step": sorted(cpu)[len(cpu) // 2],
            "loss": loss, "loadavg_1min": os.getloadavg()[0],
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policies", default="bc_transformer")
    ap.add_argument("--batches", default="32")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=10)
    ap.add_argument("--img", type=int, default=128)
    ap.add_argument("--lang-dim", type=int, default=768)
    ap.add_argument("--device", default="cpu", help="torch device (cpu, cuda)")
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    ap.add_argument("--params-only", action="store_true", help="build each policy, print parameter counts, exit")
    a = ap.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    kinds = [k for k in a.policies.split(",") if k]
    if a.params_only:
        out = {k: sum(p.numel() for p in build(k, a.img, a.lang_dim)[1].parameters()) for k in kinds}
        print(json.dumps({"params": out}))
        return
    results = []
    for kind in kinds:
        for b in [int(x) for x in a.batches.split(",") if x]:
            try:
                results.append(time_policy(kind, b, a.steps, a.warmup, a.seq_len, a.img, a.lang_dim, a.device))
            except (RuntimeError, MemoryError) as e:  # out of memory: record the miss, go on
                results.append({"policy": kind, "framework": "torch (LIBERO)", "obs": "rgb", "batch": b,
                                "error": f"{type(e).__name__}: {str(e)[:300]}"})
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    import importlib.metadata as md

    versions = {p: md.version(p) for p in ("torch", "torchvision", "rlinf-libero", "robomimic")}
    print(json.dumps({"results": results, "versions": versions, "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
