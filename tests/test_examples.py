"""The examples/ scripts end to end: a couple of updates on a few battles, save, evaluate
(each starts its own loopback server), then their module-level ``policy()`` loads the saved
weights as an outside policy would."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=150)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    return proc.stdout


def _legal_actions(fn, recurrent: bool) -> None:
    from maple_async.env import N_ACTIONS, OBS_DIM
    from maple_async.inference.outside import OutsidePolicy
    policy = OutsidePolicy(fn)
    obs = np.zeros((3, OBS_DIM), np.float32)
    masks = np.zeros((3, N_ACTIONS), bool)
    masks[0, [6, 7]] = masks[1, 2] = masks[2, 26:] = True
    import torch
    hidden = torch.zeros(3, policy.hidden_dim)
    assert (policy.hidden_dim > 0) == recurrent
    actions, _, _, new_hidden = policy.act(obs, masks, hidden)  # raises on an illegal action
    assert masks[np.arange(3), actions].all()
    assert tuple(new_hidden.shape) == (3, policy.hidden_dim)


@pytest.mark.integration
def test_cleanrl_lstm_ppo(tmp_path, monkeypatch):
    out = _run("cleanrl_lstm_ppo.py", "--max-updates", "2", "--steps-per-update", "512", "--num-battles", "8",
               "--eval-battles", "4", "--out", str(tmp_path))
    assert "update 2 |" in out
    assert "[eval] cleanrl_lstm vs random (outside policy): win rate" in out
    assert "[eval] cleanrl_lstm vs max_power (outside policy): win rate" in out
    assert (tmp_path / "agent.pt").is_file()
    monkeypatch.setenv("MAPLE_EXAMPLE_WEIGHTS", str(tmp_path / "agent.pt"))
    _legal_actions(str(ROOT / "examples" / "cleanrl_lstm_ppo.py") + ":policy", recurrent=True)


@pytest.mark.integration
def test_sb3_maskable_ppo(tmp_path, monkeypatch):
    pytest.importorskip("sb3_contrib")
    # two chunks of one rollout each (4 battles, 8 envs, 16 steps each): learn, evaluate_policy, learn
    out = _run("sb3_maskable_ppo.py", "--chunks", "2", "--total-steps", "256", "--num-battles", "4",
               "--n-steps", "16", "--batch-size", "64", "--between-episodes", "4", "--eval-battles", "4",
               "--deterministic", "--out", str(tmp_path))
    first, between, second = out.partition("[sb3] chunk 1/2: evaluate_policy over")
    assert between, out
    assert "[sb3] env steps 128 |" in first and "[sb3] env steps 256 |" in second
    assert "[sb3] 256 env steps in" in second and f"saved {tmp_path / 'model.zip'}" in second
    assert "[eval] sb3_maskable_argmax vs random (outside policy): win rate" in out  # --deterministic
    assert "[eval] sb3_maskable_argmax vs max_power (outside policy): win rate" in out
    assert (tmp_path / "model.zip").is_file()
    # SB3's own stats (MaskablePPO dumps a rollout's before training on it: the first chunk's here)
    assert "train/approx_kl" in (tmp_path / "sb3_log" / "progress.csv").read_text()
    monkeypatch.setenv("MAPLE_EXAMPLE_MODEL", str(tmp_path / "model.zip"))
    _legal_actions(str(ROOT / "examples" / "sb3_maskable_ppo.py") + ":policy", recurrent=False)
    monkeypatch.setenv("MAPLE_EXAMPLE_DETERMINISTIC", "1")
    from maple_async.inference.outside import load
    greedy = load(str(ROOT / "examples" / "sb3_maskable_ppo.py") + ":policy")  # as eval --policy loads it
    obs = np.random.default_rng(0).normal(size=(5, greedy.model.observation_space.shape[0])).astype(np.float32)
    masks = np.ones((5, greedy.model.action_space.n), bool)
    assert greedy.deterministic and (greedy(obs, masks) == greedy(obs, masks)).all()
