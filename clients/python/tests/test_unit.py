"""What needs no server: the exception classes against the proto's enum, the stream decoding."""
import builtins
import unittest

import grpc

import agent_workspace
from agent_workspace import errors, pb
from agent_workspace._common import BashEvents


def camel(name: str) -> str:
    return "".join(p[:1] + p[1:].lower() for p in name.split("_"))


class ReasonClasses(unittest.TestCase):
    def test_every_error_reason_has_its_class_named_after_it(self) -> None:
        values = [v for v in pb.errors.ErrorReason.DESCRIPTOR.values if v.number != 0]
        self.assertGreater(len(values), 50)
        for value in values:
            reason = value.name.removeprefix("ERROR_REASON_")
            cls = getattr(errors, camel(reason))
            self.assertTrue(issubclass(cls, errors.AgentWorkspaceError))
            self.assertEqual(cls.reason_name, reason)
            self.assertEqual(cls.reason_number, value.number)
            self.assertIs(errors.error_class(value.name), cls)
            self.assertIs(errors.error_class(reason), cls)
            self.assertIn(cls.__name__, errors.__all__)
            self.assertEqual(cls.__module__, "agent_workspace.errors")

    def test_no_class_shadows_a_builtin_or_derives_from_one(self) -> None:
        for name in errors.__all__:
            self.assertFalse(hasattr(builtins, name), name)
        self.assertFalse(issubclass(errors.FileNotFound, FileNotFoundError))
        self.assertFalse(issubclass(errors.NotADirectory, NotADirectoryError))

    def test_an_unknown_reason_name_gets_the_base_class(self) -> None:
        self.assertIs(errors.error_class("NO_SUCH_REASON"), errors.AgentWorkspaceError)

    def test_the_base_class_without_a_detail_says_unspecified(self) -> None:
        err = errors.AgentWorkspaceError("Deadline Exceeded", code=grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual((err.reason, err.metadata, err.closest_match, err.partial_output), ("UNSPECIFIED", {}, None, None))
        self.assertEqual(str(err), "Deadline Exceeded")


class StreamDecoding(unittest.TestCase):
    def message(self, **event: object) -> "pb.tool.StreamBashResponse":
        return pb.tool.StreamBashResponse(**event)

    def test_a_character_split_between_chunks_decodes_whole_per_stream(self) -> None:
        events = BashEvents("utf-8", "replace")
        euro = "€".encode()
        chunks = []
        for m in [
            self.message(started=pb.tool.BashStarted()),
            self.message(stdout=b"a" + euro[:1]),
            self.message(stderr=euro[:2]),  # the other stream's decoder is independent
            self.message(stdout=euro[1:] + b"b"),
            self.message(stderr=euro[2:]),
            self.message(exited=pb.tool.BashExited(exit_code=3)),
        ]:
            chunks.extend(events.feed(m))
        self.assertEqual([(c.stream, c.text) for c in chunks], [("stdout", "a"), ("stderr", ""), ("stdout", "€b"), ("stderr", "€")])
        self.assertEqual(events.exited.exit_code, 3)
        self.assertIsNotNone(events.started_at)

    def test_an_incomplete_character_at_the_end_becomes_a_replacement_character(self) -> None:
        events = BashEvents("utf-8", "replace")
        chunks = events.feed(self.message(stdout=b"x\xe2\x82"))
        chunks += events.feed(self.message(exited=pb.tool.BashExited()))
        self.assertEqual("".join(c.text for c in chunks), "x\ufffd")


class Urls(unittest.TestCase):
    def test_urls_and_secrets(self) -> None:
        from agent_workspace._common import parse_url

        self.assertEqual(parse_url("http://127.0.0.1:8080"), ("127.0.0.1:8080", False))
        self.assertEqual(parse_url("https://aw.example.com"), ("aw.example.com:443", True))
        self.assertEqual(parse_url("http://[::1]:9"), ("[::1]:9", False))
        self.assertEqual(parse_url("localhost:1"), ("localhost:1", False))
        with self.assertRaises(ValueError):
            parse_url("http://host:1/prefix")
        with agent_workspace.AgentWorkspace("http://127.0.0.1:1", api_key="key-never-shown") as client:
            self.assertNotIn("key-never-shown", repr(client))


class ServedElsewhere(unittest.TestCase):
    """Which refusals the clients follow to another server (agent_workspace._common.served_elsewhere)."""

    def refusal(self, url: str) -> errors.AgentWorkspaceError:
        return errors.WorkspaceServedElsewhere("served by another server", code=grpc.StatusCode.UNAVAILABLE, reason="WORKSPACE_SERVED_ELSEWHERE", metadata={"server_url": url})

    def test_an_http_url_is_followed_and_never_from_https_to_http(self) -> None:
        from agent_workspace._common import served_elsewhere

        self.assertEqual(served_elsewhere(self.refusal("http://10.0.0.2:8080/"), "http://10.0.0.1:8080"), "http://10.0.0.2:8080")
        self.assertEqual(served_elsewhere(self.refusal("https://b.internal"), "https://a.internal"), "https://b.internal")
        self.assertIsNone(served_elsewhere(self.refusal("http://b.internal"), "https://a.internal"))
        for bad in ("file:///etc/passwd", "unix:///run/x.sock", "", "not a url"):
            self.assertIsNone(served_elsewhere(self.refusal(bad), "http://a"), bad)

    def test_other_errors_are_not_followed(self) -> None:
        from agent_workspace._common import served_elsewhere

        other = errors.DatabaseUnavailable("down", code=grpc.StatusCode.UNAVAILABLE, reason="DATABASE_UNAVAILABLE", metadata={"server_url": "http://b"})
        self.assertIsNone(served_elsewhere(other, "http://a"))
