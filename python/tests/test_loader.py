"""Tests of the sophon trainer client against a fake compute agent.

Run from the repository root:
``/usr/bin/python3 -m unittest discover -s python/tests -v``; against an
installed copy of the package, ``python/tests/run-installed.sh``.
"""

import dataclasses

import io
import os
import socket
import sys
import tempfile
import time
import unittest
import warnings

import numpy as np
import torch
import torch.utils.data
import torchvision.transforms.functional as TF

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import sophonpath  # noqa: E402  (puts python/ on sys.path unless testing an installed copy)
import sophon  # noqa: E402
from sophon import images as finish  # noqa: E402
from fakeagent import IMAGENET, FakeAgent, reference_float  # noqa: E402


def wait_for(condition, seconds=2.0):
    """Polls ``condition`` until it holds or ``seconds`` passed; returns its last value."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def same_bytes(a, b):
    """Whether two float32 arrays hold the same bit patterns."""
    a, b = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


class AgentTest(unittest.TestCase):
    """Starts a fake agent per test with :meth:`agent` and stops it after."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.path = os.path.join(self.dir.name, "agent.sock")
        for name in ("SOPHON_SOCKET", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            if name in os.environ:
                self.addCleanup(os.environ.__setitem__, name, os.environ.pop(name))

    def agent(self, **kwargs):
        agent = FakeAgent(self.path, **kwargs).start()
        self.addCleanup(agent.stop)
        return agent

    def loader(self, **kwargs):
        loader = sophon.Loader(socket=self.path, **kwargs)
        self.addCleanup(loader.close)
        return loader

    def expected(self, agent, epoch, batch):
        """Uint8 images, labels and ids of a batch as the agent made them."""
        samples = agent.batch_samples(epoch, batch)
        images = np.stack([agent.image(s) for s in samples])
        return (images, [agent.label(s) for s in samples], [agent.sample_id(s) for s in samples])


class PackageTest(unittest.TestCase):

    def test_imports_the_copy_asked_for(self):
        sophonpath.check(sophon)

    def test_version_is_written_once(self):
        self.assertRegex(sophon.__version__, r"^\d+(\.\d+)+$")
        self.assertEqual(sophon.protocol.CLIENT, f"sophon-python/{sophon.__version__}")

    def test_ships_its_type_hints(self):
        self.assertTrue(os.path.isfile(os.path.join(os.path.dirname(sophon.__file__),
                                                    "py.typed")))


class HandshakeTest(AgentTest):

    def test_hello_carries_the_arguments_and_ranks(self):
        agent = self.agent(batch_size=4)
        os.environ.update(RANK="0", WORLD_SIZE="1")
        loader = self.loader(batch_size=4, strict_order=True, dtype="uint8", fingerprint="fp-test")
        self.assertEqual(len(loader), 3)
        hello = agent.hellos[0]
        self.assertEqual(hello["protocol"], 1)
        self.assertEqual(hello["client"], f"sophon-python/{sophon.__version__}")
        self.assertEqual(hello["pid"], os.getpid())
        self.assertEqual((hello["batch_size"], hello["drop_last"], hello["strict_order"],
                          hello["dtype"], hello["fingerprint"]),
                         (4, None, True, "uint8", "fp-test"))
        self.assertEqual((hello["rank"], hello["world"], hello["local_rank"],
                          hello["local_world"]), (0, 1, 0, 1))

    def test_defaults_ask_for_whatever_is_served(self):
        agent = self.agent()
        os.environ["SOPHON_SOCKET"] = self.path
        loader = sophon.Loader()
        self.addCleanup(loader.close)
        self.assertEqual(len(loader), agent.batches_per_epoch)
        hello = agent.hellos[0]
        self.assertEqual((hello["batch_size"], hello["dtype"], hello["fingerprint"],
                          hello["strict_order"]), (0, "", "", None))

    def test_ranks_default_from_the_environment(self):
        os.environ.update(RANK="3", WORLD_SIZE="8", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
        loader = sophon.Loader(socket=self.path)
        self.assertEqual((loader.rank, loader.world, loader.local_rank, loader.local_world),
                         (3, 8, 1, 2))
        del os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"]
        loader = sophon.Loader(socket=self.path)
        self.assertEqual((loader.local_rank, loader.local_world), (3, 8))

    def test_welcome_is_a_dataclass_of_the_json_object(self):
        agent = self.agent(batch_size=4)
        loader = self.loader()
        info = loader.info
        self.assertIsInstance(info, sophon.Welcome)
        self.assertTrue(dataclasses.is_dataclass(info))
        self.assertEqual(info.to_dict(), agent.welcome(agent.hellos[0]))
        self.assertEqual((info.protocol, info.agent, info.version, info.batch_size, info.dtype,
                          info.layout, info.row_shape, info.samples, info.seed),
                         (1, "fake", "test", 4, "uint8", "NHWC", (8, 12, 3), 10, 0))
        self.assertEqual(info.normalize, sophon.Normalize(tuple(IMAGENET["mean"]),
                                                          tuple(IMAGENET["std"])))
        with self.assertRaises(dataclasses.FrozenInstanceError):
            info.batch_size = 8  # type: ignore[misc]
        # A copy: changing it leaves the WELCOME as it was.
        info.to_dict()["batch_size"] = 8
        self.assertEqual(loader.info.to_dict()["batch_size"], 4)

    def test_welcome_with_unknown_and_without_informational_fields(self):
        agent = self.agent(welcome={"future_field": [1, 2], "agent": None, "samples": None})
        info = self.loader().info
        self.assertEqual((info.agent, info.samples), ("", None))
        self.assertEqual(info.to_dict()["future_field"], [1, 2])
        self.assertEqual(len(agent.hellos), 1)

    def test_welcome_field_of_the_wrong_type(self):
        for field, value in (("batch_size", True), ("row_shape", [224, 224]),
                             ("samples", "12"), ("normalize", {"mean": [0.5] * 3})):
            with self.subTest(field=field):
                path = os.path.join(self.dir.name, f"{field}.sock")
                self.addCleanup(FakeAgent(path, welcome={field: value}).start().stop)
                loader = sophon.Loader(socket=path)
                self.addCleanup(loader.close)
                with self.assertRaisesRegex(sophon.ProtocolError, field.split("_")[0]):
                    len(loader)

    def test_ring_is_the_passed_memfd(self):
        agent = self.agent()
        loader = self.loader(copy=False, dtype="uint8")
        batch = next(iter(loader.raw_batches()))
        # A byte written by the agent into its mapping shows in the client's view.
        agent.ring[128] = (int(batch.images.reshape(-1)[0]) + 1) % 256
        self.assertEqual(int(batch.images.reshape(-1)[0]), agent.ring[128])


class BatchTest(AgentTest):

    def test_batches_labels_and_ids_round_trip(self):
        agent = self.agent(samples=10, batch_size=4)
        loader = self.loader(with_ids=True)
        got = list(loader)
        self.assertEqual(len(got), 3)
        for index, (images, labels, ids) in enumerate(got):
            want_images, want_labels, want_ids = self.expected(agent, 0, index)
            self.assertEqual(images.dtype, torch.float32)
            self.assertEqual(tuple(images.shape), (len(want_labels), 3, 8, 12))
            self.assertTrue(same_bytes(images.numpy(), reference_float(want_images, IMAGENET)))
            self.assertEqual(labels.dtype, torch.int64)
            self.assertEqual(labels.tolist(), want_labels)
            self.assertEqual(ids.dtype, torch.int64)
            self.assertEqual(ids.tolist(), want_ids)
        self.assertEqual(agent.violations, [])

    def test_without_ids_yields_pairs(self):
        self.agent()
        self.assertTrue(all(len(item) == 2 for item in self.loader()))

    def test_lut_equals_numpy_and_torchvision_byte_for_byte(self):
        agent = self.agent(samples=6, batch_size=3)
        images = torch.cat([images for images, _ in self.loader()])
        raw = np.stack([agent.image(s) for s in agent.order(0)])
        self.assertTrue(same_bytes(images.numpy(), reference_float(raw, IMAGENET)))
        tv = torch.stack([TF.normalize(TF.to_tensor(img), IMAGENET["mean"], IMAGENET["std"])
                          for img in raw])
        self.assertTrue(same_bytes(images.numpy(), tv.numpy()))

    def test_lut_covers_every_byte_in_scalar_float32(self):
        table = finish.lut(3, True, IMAGENET)
        for c in range(3):
            for v in (0, 1, 127, 128, 254, 255):
                want = (np.float32(v) / np.float32(255) - np.float32(IMAGENET["mean"][c])) \
                    / np.float32(IMAGENET["std"][c])
                self.assertEqual(table[c, v].view(np.uint32), want.view(np.uint32))

    def test_torch_lut_path_equals_numpy_path(self):
        table = finish.lut(3, True, IMAGENET)
        raw = np.random.default_rng(1).integers(0, 256, (2, 5, 7, 3), dtype=np.uint8)
        by_numpy = finish.apply_numpy(table, raw)
        by_torch = finish.apply_torch(torch.from_numpy(table.reshape(-1)), torch.from_numpy(raw))
        self.assertTrue(by_torch.is_contiguous())
        self.assertTrue(same_bytes(by_numpy.numpy(), by_torch.numpy()))

    def test_to_tensor_without_normalize_divides_by_255(self):
        agent = self.agent(samples=4, batch_size=4, normalize=None)
        images, _ = next(iter(self.loader()))
        raw = np.stack([agent.image(s) for s in agent.order(0)])
        self.assertTrue(same_bytes(images.numpy(), reference_float(raw, None)))

    def test_without_to_tensor_images_stay_uint8_nhwc(self):
        agent = self.agent(samples=4, batch_size=4, to_tensor=False)
        images, _ = next(iter(self.loader()))
        self.assertEqual(images.dtype, torch.uint8)
        np.testing.assert_array_equal(images.numpy(), self.expected(agent, 0, 0)[0])

    def test_float32_mode_views_nchw_rows(self):
        agent = self.agent(samples=6, batch_size=4, dtype="float32")
        got = list(self.loader(dtype="float32"))
        self.assertEqual([tuple(images.shape) for images, _ in got], [(4, 3, 8, 12), (2, 3, 8, 12)])
        for index, (images, labels) in enumerate(got):
            want_images, want_labels, _ = self.expected(agent, 0, index)
            self.assertTrue(same_bytes(images.numpy(), reference_float(want_images, IMAGENET)))
            self.assertEqual(labels.tolist(), want_labels)

    def test_len_is_batches_per_epoch(self):
        self.agent(samples=10, batch_size=4, drop_last=True)
        loader = self.loader()
        self.assertEqual(len(loader), 2)
        self.assertEqual(len(list(loader)), 2)


class EmptyBatchTest(AgentTest):
    def test_every_sample_failed(self):
        """A batch the agent sends with no rows (every sample it could fill
        it with failed under --on-error skip) is skipped, with a warning, and
        still counts in the state; yield_empty=True yields it, so the loop
        sees len(loader) batches, as a DDP loop needs."""
        for dtype in ("uint8", "float32"):
            for yield_empty in (False, True):
                with self.subTest(dtype=dtype, yield_empty=yield_empty):
                    if os.path.exists(self.path):
                        os.unlink(self.path)
                    agent = self.agent(samples=10, batch_size=4, dtype=dtype, failed_batches={1})
                    loader = self.loader(yield_empty=yield_empty)
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        got = [(images.shape, labels.shape) for images, labels in loader]
                    skipped = [w for w in caught if "has no rows" in str(w.message)]
                    self.assertEqual(loader.state_dict()["batches"], len(loader))
                    if yield_empty:
                        self.assertEqual(len(got), len(loader))
                        self.assertEqual([s[0][0] for s in got], [4, 0, 2])
                        self.assertEqual(got[1][0][1:], got[0][0][1:])
                        self.assertEqual(got[1][1], (0,))
                        self.assertEqual(skipped, [])
                    else:
                        self.assertEqual([s[0][0] for s in got], [4, 2])
                        self.assertEqual(len(skipped), 1)
                        self.assertIs(skipped[0].category, RuntimeWarning)
                        self.assertIn("batch 1 of epoch 0", str(skipped[0].message))
                    # Every slot went back, the skipped one too.
                    wait_for(lambda: len(agent.releases) == 3)
                    self.assertEqual(sorted(r["batch"] for r in agent.releases), [0, 1, 2])
                    loader.close()
                    agent.stop()

    def test_raw_batches_skip_empty_too(self):
        agent = self.agent(samples=10, batch_size=4, failed_batches={0, 2})
        loader = self.loader()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = [(b.batch, b.rows) for b in loader.raw_batches()]
        self.assertEqual(got, [(1, 4)])
        loader.close()
        agent.stop()


class CopyTest(AgentTest):

    def test_copy_releases_at_once_and_owns_its_tensors(self):
        agent = self.agent(samples=12, batch_size=4, dtype="float32")
        it = iter(self.loader(copy=True))
        images, labels = next(it)
        self.assertTrue(wait_for(lambda: any(r["batch"] == 0 for r in agent.releases)))
        before = images.clone()
        agent.ring[128:132] = np.float32(123.5).tobytes()
        self.assertTrue(torch.equal(images, before))
        self.assertEqual(labels.tolist(), self.expected(agent, 0, 0)[1])

    def test_zero_copy_views_the_slot_until_the_next_batch(self):
        agent = self.agent(samples=12, batch_size=4, dtype="float32")
        it = iter(self.loader(copy=False))
        images, labels = next(it)
        agent.ring[128:132] = np.float32(123.5).tobytes()
        self.assertEqual(float(images[0, 0, 0, 0]), 123.5)
        time.sleep(0.1)
        self.assertFalse(any(r["batch"] == 0 for r in agent.releases))
        next(it)
        self.assertTrue(wait_for(lambda: any(r["batch"] == 0 for r in agent.releases)))

    def test_zero_copy_uint8_normalised_batch_releases_at_once(self):
        agent = self.agent(samples=12, batch_size=4)
        # Holds the iterator: a dropped one closes the connection, and the
        # agent, still sending, may then never read the RELEASE.
        it = iter(self.loader(copy=False))
        images, _ = next(it)
        self.assertTrue(wait_for(lambda: any(r["batch"] == 0 for r in agent.releases)))
        self.assertEqual(images.dtype, torch.float32)

    def test_release_carries_the_wait(self):
        agent = self.agent(samples=12, batch_size=4, script={0: [("sleep", 0.3)]})
        list(self.loader())
        self.assertTrue(wait_for(lambda: len(agent.releases) == 3))
        waits = {r["batch"]: r["wait_ns"] for r in agent.releases}
        self.assertGreater(waits[0], 0.25e9)
        self.assertLess(waits[0], 5e9)
        self.assertLess(waits[2], 0.25e9)

    def test_raw_batches_are_slot_views_released_on_advance(self):
        agent = self.agent(samples=12, batch_size=4, dtype="uint8")
        loader = self.loader()
        it = loader.raw_batches()
        first = next(it)
        self.assertEqual(first.images.dtype, np.uint8)
        self.assertEqual(first.images.shape, (4, 8, 12, 3))
        np.testing.assert_array_equal(first.images, self.expected(agent, 0, 0)[0])
        self.assertEqual(first.positions.tolist(), [0, 1, 2, 3])
        self.assertEqual(first.ids.tolist(), self.expected(agent, 0, 0)[2])
        time.sleep(0.1)
        self.assertEqual(agent.releases, [])
        second = next(it)
        self.assertEqual((second.epoch, second.batch), (0, 1))
        self.assertTrue(wait_for(lambda: [r["batch"] for r in agent.releases] == [0]))
        self.assertEqual(len(list(it)), 1)
        self.assertEqual(loader.state_dict()["batches"], 3)


class EpochTest(AgentTest):

    def test_epochs_auto_increment(self):
        agent = self.agent()
        loader = self.loader()
        for _ in range(3):
            list(loader)
        self.assertEqual([e["epoch"] for e in agent.epochs], [0, 1, 2])
        self.assertTrue(all(e["resume"] is None for e in agent.epochs))

    def test_set_epoch_takes_effect_on_the_next_iteration_and_stays(self):
        agent = self.agent()
        loader = self.loader(with_ids=True)
        loader.set_epoch(5)
        first = [ids.tolist() for _, _, ids in loader]
        list(loader)
        loader.set_epoch(6)
        list(loader)
        self.assertEqual([e["epoch"] for e in agent.epochs], [5, 5, 6])
        self.assertEqual(first[0], [agent.sample_id(s) for s in agent.batch_samples(5, 0)])
        self.assertFalse(loader.state_dict()["auto_epoch"])

    def test_break_abandons_the_epoch_and_the_next_iteration_restarts_it(self):
        agent = self.agent(samples=12, batch_size=4)
        loader = self.loader()
        for _ in loader:
            break
        self.assertEqual(loader.state_dict()["batches"], 1)
        self.assertEqual(len(list(loader)), 3)
        self.assertEqual(len(agent.hellos), 2)
        self.assertEqual([e["epoch"] for e in agent.epochs], [0, 0])
        self.assertEqual(agent.violations, [])


    def test_a_new_iteration_supersedes_an_unfinished_one(self):
        agent = self.agent(samples=12, batch_size=4)
        loader = self.loader()
        first = iter(loader)
        next(first)
        self.assertEqual(len(list(loader)), 3)
        with self.assertRaisesRegex(RuntimeError, "newer iteration"):
            next(first)
        self.assertEqual(len(agent.hellos), 2)


class StateTest(AgentTest):

    def consume(self, loader, n):
        """Takes ``n`` batches of an iteration and abandons it."""
        it = iter(loader)
        batches = [next(it) for _ in range(n)]
        it.close()
        return batches

    def test_strict_order_resume(self):
        agent = self.agent(samples=20, batch_size=4, strict_order=True)
        loader = self.loader(with_ids=True)
        self.consume(loader, 2)
        state = loader.state_dict()
        self.assertEqual(state, {"version": 1, "epoch": 0, "batches": 2, "strict_order": True,
                                 "rank": 0, "world": 1, "consumed": None, "auto_epoch": True})
        resumed = self.loader(with_ids=True)
        resumed.load_state_dict(state)
        rest = [ids.tolist() for _, _, ids in resumed]
        self.assertEqual(agent.epochs[-1], {"epoch": 0, "resume": {"batches": 2, "consumed": None}})
        self.assertEqual(rest, [[agent.sample_id(s) for s in agent.batch_samples(0, b)]
                                for b in range(2, 5)])
        self.assertEqual(resumed.state_dict()["batches"], 5)
        list(resumed)
        self.assertEqual(agent.epochs[-1], {"epoch": 1, "resume": None})

    def test_completion_order_bitmap_and_resume(self):
        agent = self.agent(samples=20, batch_size=4, strict_order=False)
        loader = self.loader(with_ids=True)
        self.consume(loader, 2)
        state = loader.state_dict()
        self.assertFalse(state["strict_order"])
        self.assertEqual(state["consumed"], bytes([0xFF, 0x00, 0x00]))
        resumed = self.loader(with_ids=True)
        resumed.load_state_dict(state)
        rest = [ids.tolist() for _, _, ids in resumed]
        self.assertEqual(agent.epochs[-1]["resume"], {"batches": 2, "consumed": "/wAA"})
        self.assertEqual(len(rest), 3)
        all_ids = sum(rest, [])
        self.assertEqual(all_ids, [agent.sample_id(s) for s in agent.order(0)[8:]])
        self.assertEqual(resumed.state_dict()["consumed"], bytes([0xFF, 0xFF, 0x0F]))

    def test_state_survives_torch_save(self):
        self.agent(samples=20, batch_size=4, strict_order=False)
        loader = self.loader()
        self.consume(loader, 3)
        buffer = io.BytesIO()
        torch.save(loader.state_dict(), buffer)
        buffer.seek(0)
        self.assertEqual(torch.load(buffer), loader.state_dict())

    def test_complete_saved_epoch_moves_on(self):
        agent = self.agent(samples=8, batch_size=4)
        loader = self.loader()
        list(loader)
        state = loader.state_dict()
        self.assertEqual((state["epoch"], state["batches"]), (0, 2))
        resumed = self.loader()
        resumed.load_state_dict(state)
        self.assertEqual(resumed.epoch, 1)
        list(resumed)
        self.assertEqual(agent.epochs[-1], {"epoch": 1, "resume": None})

    def test_complete_saved_epoch_with_set_epoch_yields_nothing(self):
        agent = self.agent(samples=8, batch_size=4)
        loader = self.loader()
        loader.set_epoch(2)
        list(loader)
        resumed = self.loader()
        resumed.load_state_dict(loader.state_dict())
        resumed.set_epoch(2)
        self.assertEqual(list(resumed), [])
        resumed.set_epoch(3)
        self.assertEqual(len(list(resumed)), 2)
        self.assertEqual([e["epoch"] for e in agent.epochs], [2, 3])

    def test_resume_applies_only_to_its_epoch(self):
        agent = self.agent(samples=20, batch_size=4)
        loader = self.loader()
        self.consume(loader, 2)
        resumed = self.loader()
        resumed.load_state_dict(loader.state_dict())
        resumed.set_epoch(4)
        self.assertEqual(len(list(resumed)), 5)
        self.assertEqual(agent.epochs[-1], {"epoch": 4, "resume": None})

    def test_load_state_dict_validates(self):
        loader = sophon.Loader(socket=self.path, rank=0, world=2)
        good = {"version": 1, "epoch": 0, "batches": 1, "strict_order": True, "rank": 0,
                "world": 2, "consumed": None, "auto_epoch": True}
        loader.load_state_dict(good)
        with self.assertRaisesRegex(ValueError, "version 2"):
            loader.load_state_dict(dict(good, version=2))
        with self.assertRaisesRegex(ValueError, "rank 1 of 2, this Loader is rank 0 of 2"):
            loader.load_state_dict(dict(good, rank=1))
        with self.assertRaisesRegex(ValueError, "rank 0 of 4"):
            loader.load_state_dict(dict(good, world=4))
        with self.assertRaisesRegex(ValueError, "positions bitmap"):
            loader.load_state_dict(dict(good, strict_order=False))
        with self.assertRaisesRegex(ValueError, "not a sophon.Loader state_dict"):
            loader.load_state_dict({"epoch": 0})

    def test_resume_against_another_order_is_a_mismatch(self):
        self.agent(samples=20, batch_size=4, strict_order=False)
        loader = self.loader()
        loader.load_state_dict({"version": 1, "epoch": 0, "batches": 2, "strict_order": True,
                                "rank": 0, "world": 1, "consumed": None, "auto_epoch": True})
        with self.assertRaisesRegex(sophon.MismatchError, "strict_order=True"):
            list(loader)


class ErrorTest(AgentTest):

    def test_agent_not_running(self):
        loader = sophon.Loader(socket=self.path)
        with self.assertRaises(sophon.AgentNotRunning) as caught:
            len(loader)
        self.assertIsInstance(caught.exception, ConnectionError)
        text = str(caught.exception)
        self.assertIn(f"no compute agent at {self.path}", text)
        self.assertIn(f"compute-agent --trainer-socket {self.path}", text)

    def test_socket_without_listener_is_not_running(self):
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(self.path)
        self.addCleanup(stale.close)
        with self.assertRaisesRegex(sophon.AgentNotRunning, "Connection refused"):
            len(sophon.Loader(socket=self.path))

    def test_agent_mismatch_error(self):
        self.agent(hello_error=("MISMATCH", "batch size 64, the agent serves 4"))
        with self.assertRaises(sophon.MismatchError) as caught:
            len(self.loader(batch_size=64))
        self.assertEqual(caught.exception.code, "MISMATCH")
        self.assertIn("batch size 64", str(caught.exception))

    def test_agent_dataset_error_is_a_mismatch(self):
        self.agent(hello_error=("DATASET", "fingerprint differs"))
        with self.assertRaisesRegex(sophon.MismatchError, "DATASET"):
            len(self.loader(fingerprint="other"))

    def test_welcome_contradicting_the_arguments(self):
        self.agent(batch_size=4)
        with self.assertRaisesRegex(sophon.MismatchError, "batch_size: asked 8, served 4"):
            len(self.loader(batch_size=8))

    def test_welcome_of_another_protocol(self):
        self.agent(welcome={"protocol": 2})
        with self.assertRaisesRegex(sophon.ProtocolError, "protocol 2"):
            len(self.loader())

    def test_timeout_names_socket_epoch_last_batch_and_status(self):
        self.agent(samples=20, batch_size=4,
                   script={2: [("status", "waiting for storage"), ("stall",)]})
        it = iter(self.loader(timeout=0.3))
        next(it), next(it)
        started = time.monotonic()
        with self.assertRaises(sophon.AgentTimeout) as caught:
            next(it)
        self.assertLess(time.monotonic() - started, 2)
        self.assertIsInstance(caught.exception, TimeoutError)
        text = str(caught.exception)
        for part in (self.path, "epoch 0", "last good batch 1", "waiting for storage"):
            self.assertIn(part, text)

    def test_timeout_before_any_batch(self):
        self.agent(script={0: [("stall",)]})
        with self.assertRaisesRegex(sophon.AgentTimeout, "last good batch none yet"):
            list(self.loader(timeout=0.2))

    def test_status_frames_keep_the_wait_alive(self):
        # STATUS every 0.05 s for 2.5 timeouts; the timeout leaves room for a
        # busy machine (at 0.3 s a loaded CI box missed it now and then).
        self.agent(samples=8, batch_size=4, script={1: [("status_for", 1.5, 0.05, "waiting")]})
        self.assertEqual(len(list(self.loader(timeout=0.6))), 2)

    def test_error_frame(self):
        self.agent(samples=20, batch_size=4, script={1: [("error", "FAILED", "bad sample 7")]})
        with self.assertRaises(sophon.AgentError) as caught:
            list(self.loader())
        self.assertNotIsInstance(caught.exception, sophon.MismatchError)
        self.assertEqual(caught.exception.code, "FAILED")
        self.assertIn("bad sample 7", str(caught.exception))
        self.assertIn("last good batch 0", str(caught.exception))

    def test_connection_closed_by_agent(self):
        self.agent(samples=20, batch_size=4, script={2: [("close",)]})
        with self.assertRaises(sophon.AgentError) as caught:
            list(self.loader())
        self.assertEqual(caught.exception.code, "CLOSED")
        self.assertIn(self.path, str(caught.exception))
        self.assertIn("last good batch 1", str(caught.exception))

    def test_end_before_every_batch_is_a_protocol_error(self):
        self.agent(samples=20, batch_size=4, script={3: [("end",)]})
        with self.assertRaisesRegex(sophon.ProtocolError, "after 3 READY frames, want 5"):
            list(self.loader())

    def test_slot_header_disagreeing_with_ready(self):
        def spoil(ring, offset, epoch, batch):
            if batch == 1:
                ring[offset:offset + 4] = bytes(4)
        self.agent(samples=12, batch_size=4, tamper=spoil)
        with self.assertRaisesRegex(sophon.ProtocolError,
                                    r"slot 1 header .*magic 0 \(want 1112035411\).*"
                                    "last good batch 0"):
            list(self.loader())

    def test_bad_arguments(self):
        with self.assertRaisesRegex(ValueError, "dtype"):
            sophon.Loader(dtype="float16")
        with self.assertRaisesRegex(ValueError, "rank 2 of 2"):
            sophon.Loader(rank=2, world=2)


class DatasetTest(AgentTest):

    def test_under_a_dataloader_with_no_workers(self):
        agent = self.agent(samples=10, batch_size=4)
        dataset = sophon.IterableDataset(socket=self.path)
        self.addCleanup(dataset.loader.close)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)
        self.assertEqual(len(loader), 3)
        labels = [batch[1].tolist() for batch in loader]
        self.assertEqual(labels, [self.expected(agent, 0, b)[1] for b in range(3)])
        dataset.set_epoch(4)
        list(loader)
        self.assertEqual(agent.epochs[-1]["epoch"], 4)
        self.assertEqual(dataset.state_dict()["epoch"], 4)

    def test_workers_are_refused(self):
        self.agent()
        dataset = sophon.IterableDataset(socket=self.path)
        self.addCleanup(dataset.loader.close)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
        with self.assertRaisesRegex(RuntimeError, r"num_workers=0\): the compute agent already"):
            list(loader)


class DeviceTest(AgentTest):

    @unittest.skipIf(torch.cuda.is_available(), "CUDA is available here")
    def test_cuda_degrades_to_cpu_with_a_warning(self):
        self.agent()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loader = self.loader(device="cuda")
        self.assertEqual([w.category for w in caught], [RuntimeWarning])
        self.assertIn("CUDA is not available", str(caught[0].message))
        images, labels = next(iter(loader))
        self.assertEqual((images.device.type, labels.device.type), ("cpu", "cpu"))

    @unittest.skipUnless(torch.cuda.is_available(), "no CUDA here")
    def test_cuda_batches_equal_cpu_batches(self):
        self.agent(samples=12, batch_size=4)
        on_gpu = [(i.cpu(), l.cpu()) for i, l in self.loader(device="cuda")]
        on_cpu = list(self.loader())
        for (gi, gl), (ci, cl) in zip(on_gpu, on_cpu):
            self.assertTrue(same_bytes(gi.numpy(), ci.numpy()))
            self.assertTrue(torch.equal(gl, cl))


if __name__ == "__main__":
    unittest.main()
