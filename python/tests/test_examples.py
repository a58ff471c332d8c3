"""End-to-end runs of python/examples/train_cnn.py and
python/bench/handoff_consumer.py, as programs, against the fake agent."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

from fakeagent import FakeAgent
from sophonpath import PYTHON_DIR
TRAIN = os.path.join(PYTHON_DIR, "examples", "train_cnn.py")
CONSUMER = os.path.join(PYTHON_DIR, "bench", "handoff_consumer.py")


def run(script, *args):
    """Runs a script without PYTHONPATH; returns (exit status, JSON lines of stdout).

    The scripts import an installed sophon when there is one (the run against
    the installed package) and the copy next to them otherwise."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          env=env, timeout=60)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return done.returncode, lines, done.stderr


class ExampleTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.path = os.path.join(self.dir.name, "agent.sock")
        # Completion order: the resume goes through the consumed bitmap.
        self.agent = FakeAgent(self.path, samples=24, batch_size=8, shape=(32, 32),
                               strict_order=False).start()
        self.addCleanup(self.agent.stop)

    def file(self, name):
        return os.path.join(self.dir.name, name)

    def train(self, *args):
        return run(TRAIN, "--socket", self.path, "--epochs", "2", "--num-classes", "10", *args)

    def test_killed_and_resumed_run_equals_an_uninterrupted_one(self):
        status, full, err = self.train("--dump-batches", self.file("full.jsonl"))
        self.assertEqual(status, 0, err)
        steps, summary = full[:-1], full[-1]
        self.assertEqual([(s["epoch"], s["batch"]) for s in steps],
                         [(e, b) for e in range(2) for b in range(3)])
        self.assertTrue(summary["summary"])
        self.assertEqual((summary["steps"], summary["images"]), (6, 48))

        state = self.file("state.pt")
        status, first, err = self.train("--state-out", state, "--kill-after-step", "4",
                                        "--dump-batches", self.file("resumed.jsonl"))
        self.assertEqual(status, 3, err)
        self.assertEqual([s["step"] for s in first], [1, 2, 3, 4])
        status, second, err = self.train("--resume", state, "--state-out", state,
                                         "--dump-batches", self.file("resumed.jsonl"))
        self.assertEqual(status, 0, err)
        # Killed after batch 0 of epoch 1: its 8 positions are consumed.
        self.assertEqual(self.agent.epochs[-1],
                         {"epoch": 1, "resume": {"batches": 1, "consumed": "/wAA"}})
        resumed = first + second[:-1]
        self.assertEqual([(s["step"], s["epoch"], s["batch"], s["loss_hex"]) for s in resumed],
                         [(s["step"], s["epoch"], s["batch"], s["loss_hex"]) for s in steps])
        with open(self.file("full.jsonl")) as a, open(self.file("resumed.jsonl")) as b:
            self.assertEqual(a.read(), b.read())

    def test_amp_trains_on_the_same_batches(self):
        status, fp32, err = self.train()
        self.assertEqual(status, 0, err)
        status, amp, err = self.train("--amp")
        self.assertEqual(status, 0, err)
        self.assertEqual((fp32[-1]["amp"], amp[-1]["amp"]), (False, True))
        self.assertEqual([(s["epoch"], s["batch"]) for s in amp[:-1]],
                         [(s["epoch"], s["batch"]) for s in fp32[:-1]])
        # bfloat16's forward pass gives other losses than float32's.
        self.assertNotEqual([s["loss_hex"] for s in amp[:-1]], [s["loss_hex"] for s in fp32[:-1]])

    def test_from_memory_needs_no_agent(self):
        status, lines, err = run(TRAIN, "--from-memory", "3", "--batch", "4", "--num-classes", "10",
                                 "--socket", self.file("nobody.sock"))
        self.assertEqual(status, 0, err)
        self.assertEqual(len(lines), 1)
        out = lines[0]
        self.assertTrue(out["from_memory"])
        self.assertEqual((out["steps"], out["images"], out["batch"]), (3, 12, 4))
        self.assertGreater(out["images_per_s"], 0)
        status, _, err = run(TRAIN, "--from-memory", "0")
        self.assertEqual(status, 2)
        self.assertIn("--from-memory and --batch must be positive", err)

    def test_max_steps_stops_mid_epoch(self):
        status, lines, err = self.train("--max-steps", "2")
        self.assertEqual(status, 0, err)
        self.assertEqual([line.get("step") for line in lines[:-1]], [1, 2])
        self.assertEqual(lines[-1]["steps"], 2)

    def test_eval_every_epoch_with_a_held_out_agent(self):
        held_out = FakeAgent(self.file("held-out.sock"), samples=12, batch_size=8, shape=(32, 32),
                             strict_order=False).start()
        self.addCleanup(held_out.stop)
        status, plain, err = self.train()
        self.assertEqual(status, 0, err)
        status, lines, err = self.train("--eval-socket", self.file("held-out.sock"))
        self.assertEqual(status, 0, err)
        steps = [line for line in lines if "loss_hex" in line]
        evals = [line for line in lines if line.get("eval")]
        # Evaluating changes nothing in training: the same steps, bit for bit.
        self.assertEqual(steps, plain[:-1])
        self.assertEqual([e["epoch"] for e in evals], [0, 1])
        for e in evals:
            self.assertEqual((e["train_images"], e["images"]), (24, 12))
            for key in ("train_accuracy", "accuracy"):
                self.assertTrue(0 <= e[key] <= 1, e)
                # A count of correct rows over 24 (train) or 12 (held out).
            self.assertAlmostEqual(e["train_accuracy"] * 24, round(e["train_accuracy"] * 24))
            self.assertAlmostEqual(e["accuracy"] * 12, round(e["accuracy"] * 12))
            self.assertGreater(e["loss"], 0)
        # The held-out agent served one epoch per training epoch.
        self.assertEqual([m["epoch"] for m in held_out.epochs], [0, 1])
        summary = lines[-1]
        self.assertEqual((summary["accuracy"], summary["train_accuracy"]),
                         (evals[-1]["accuracy"], evals[-1]["train_accuracy"]))

    def test_handoff_consumer_modes(self):
        for mode in ("nocopy", "copy"):
            status, lines, err = run(CONSUMER, "--socket", self.path, "--batches", "5",
                                     "--mode", mode)
            self.assertEqual(status, 0, err)
            (result,) = lines
            self.assertEqual((result["mode"], result["batches"], result["timed_batches"]),
                             (mode, 5, 4))
            # Batches 1 and 2 of epoch 0, then 0 and 1 of epoch 1, of 8 rows each.
            self.assertEqual(result["bytes"], 4 * 8 * 32 * 32 * 3)
            self.assertGreater(result["seconds"], 0)
            self.assertAlmostEqual(result["gb_per_s"], result["bytes"] / result["seconds"] / 1e9)


if __name__ == "__main__":
    unittest.main()
