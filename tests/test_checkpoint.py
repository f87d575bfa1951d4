
import pytest
import torch

from maple_async import config as C
from maple_async.learn import checkpoint as ckpt
from maple_async.run.loop import LearningLoop as Trainer


def _cfg(tmp_path, **over):
    return C.load(None, {"train.run_dir": str(tmp_path / "run"), "train.tensorboard": False,
                         "network.hidden_size": 16, **over})


def test_round_trip_and_resume_continue_counters(tmp_path):
    t1 = Trainer(_cfg(tmp_path), "cpu", quiet=True)
    t1.learner.updates = 7
    t1.counters.update(battles=448, decisions=30000, version=7)
    # Make the optimizer state non-trivial.
    loss = sum(p.sum() for p in t1.learner.network.parameters())
    loss.backward()
    t1.learner.optimizer.step()
    path = t1.save_checkpoint()
    assert path.name == "ckpt_000007.pt" and (tmp_path / "run" / "latest.pt").exists()

    t2 = Trainer(_cfg(tmp_path), "cpu", resume=str(tmp_path / "run" / "latest.pt"), quiet=True)
    assert t2.learner.updates == 7
    assert t2.counters["battles"] == 448 and t2.counters["version"] == 7
    assert t2.weights_msg()["version"] == 7  # what the acting policies get
    for (k, a), b in zip(t1.learner.network.state_dict().items(), t2.learner.network.state_dict().values()):
        assert torch.equal(a, b), k
    assert t2.learner.optimizer.state_dict()["state"].keys() == t1.learner.optimizer.state_dict()["state"].keys()
    data = ckpt.load(path)
    assert C.from_saved(data["config"]) == t1.cfg  # the config travels with the weights


def test_checkpoint_loads_with_weights_only(tmp_path):
    t = Trainer(_cfg(tmp_path), "cpu", quiet=True)
    path = t.save_checkpoint()
    torch.load(path, weights_only=True)  # raises if anything but plain data was pickled


def test_unsafe_pickle_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))
    bad = tmp_path / "evil.pt"
    torch.save({"format": ckpt.FORMAT, "x": Evil()}, bad)
    with pytest.raises(ckpt.CheckpointError, match="cannot read checkpoint"):
        ckpt.load(bad)


def test_missing_and_mismatched_checkpoints(tmp_path):
    with pytest.raises(ckpt.CheckpointError, match="checkpoint not found"):
        ckpt.load(tmp_path / "nope.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ckpt.CheckpointError, match="cannot read"):
        ckpt.load(tmp_path / "junk.pt")
    t = Trainer(_cfg(tmp_path), "cpu", quiet=True)
    path = t.save_checkpoint()
    with pytest.raises(ckpt.CheckpointError, match="does not fit the configured network"):
        Trainer(_cfg(tmp_path, **{"network.hidden_size": 32}), "cpu", resume=str(path), quiet=True)
    other = {"network.hidden_size": 32, "train.run_dir": str(tmp_path / "other")}
    with pytest.raises(ckpt.CheckpointError, match="does not fit the configured network"):
        Trainer(_cfg(tmp_path, **other, **{"train.init": str(path)}), "cpu", quiet=True)
    assert not (tmp_path / "other").exists()  # a refused start writes nothing


def test_interrupted_write_keeps_previous_checkpoint(tmp_path, monkeypatch):
    target = tmp_path / "latest.pt"
    ckpt.save(target, {"n": 1})

    def boom(*a, **k):
        raise KeyboardInterrupt  # e.g. Ctrl-C in the middle of the write

    monkeypatch.setattr(torch, "save", boom)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save(target, {"n": 2})
    monkeypatch.undo()
    assert ckpt.load(target)["n"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["latest.pt"]  # no temp files left
