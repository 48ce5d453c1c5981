"""The sync client against a real server (see _server.py): sessions, bash, streams, files, grep,
background processes and exposed ports, an error of every reason family, cancellation."""
import random
import unittest

import grpc

from agent_workspace import AgentWorkspace, AgentWorkspaceError, errors, pb

from ._server import API_KEY, URL, require_server, unique


class SyncClient(unittest.TestCase):
    client: AgentWorkspace

    @classmethod
    def setUpClass(cls) -> None:
        require_server()
        cls.client = AgentWorkspace(URL, api_key=API_KEY, timeout=60)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()

    def setUp(self) -> None:
        self.ws = self.client.create_workspace(labels={"suite": "python-client"})
        self.addCleanup(self.ws.delete_workspace)

    # --- sessions -----------------------------------------------------------------------------

    def test_a_session_as_a_context_manager_is_ready_runs_tools_with_its_token_and_is_ended_on_exit(self) -> None:
        agent_type = unique("py-coder")
        self.client.create_agent_type(agent_type, workspace={"enabled": True, "tools": ["bash", "read", "write"], "setup_commands": ["echo set > up.txt"]})
        with self.client.start_session(agent_type, task={"pull_request_number": 7}) as session:
            self.assertTrue(session.id.startswith("sess-"))
            self.assertNotIn(session.token, repr(session))
            ready = session.wait_ready()
            self.assertEqual(pb.workspace.SessionStatus.Name(ready.status), "SESSION_STATUS_ACTIVE")
            self.assertTrue(ready.workspace_id)
            result = session.workspace.bash("cat up.txt; echo $AGENT_TASK_PULL_REQUEST_NUMBER")
            self.assertEqual(result.stdout, "set\n7\n")
            session.workspace.write("notes.txt", "from the session\n")
            self.assertEqual(self.client.workspace(ready.workspace_id).read("notes.txt").content, "1: from the session")
            # The replayed events: the status changes, and the setup command's stage.
            kinds = [e.WhichOneof("event") for e in session.events()]
            self.assertEqual(kinds[0], "status")
            self.assertIn("stage_ended", kinds)
            # The agent's summary, in its session's chain after its tool calls.
            posted = session.post_message("wrote notes.txt", summary=True)
            self.assertEqual(posted.session_id, session.id)
            token = session.token
        self.assertEqual(pb.workspace.SessionStatus.Name(self.client.session(session.id).info.status), "SESSION_STATUS_ENDED")
        with self.assertRaises(errors.Unauthenticated) as caught:
            session.workspace.bash("true")
        self.assertNotIn(token or "-", str(caught.exception))
        with AgentWorkspace(URL, session_token=token) as agent, self.assertRaises(errors.Unauthenticated):
            agent.workspace().read("notes.txt")

    # --- commands -----------------------------------------------------------------------------

    def test_bash_returns_output_and_a_non_zero_exit_as_a_result(self) -> None:
        self.ws.write("sub/keep.txt", "")
        result = self.ws.bash("echo out; echo err >&2; echo $GREETING from $(basename $PWD); exit 3", env={"GREETING": "hello"}, workdir="sub")
        self.assertEqual((result.stdout, result.stderr, result.exit_code), ("out\nhello from sub\n", "err\n", 3))
        self.assertEqual(result.stdout_total_bytes, len(result.stdout))

    def test_stream_bash_decodes_a_character_split_between_chunks_and_ends_with_the_exit(self) -> None:
        chunks = []
        with self.ws.stream_bash(r"printf 'a\xe2\x82'; sleep 0.3; printf '\xac\n'; echo done >&2; exit 4") as stream:
            for chunk in stream:
                chunks.append(chunk)
        self.assertEqual("".join(c.text for c in chunks if c.stream == "stdout"), "a€\n")
        self.assertEqual("".join(c.text for c in chunks if c.stream == "stderr"), "done\n")
        self.assertEqual(b"".join(c.data for c in chunks if c.stream == "stdout"), b"a\xe2\x82\xac\n")
        self.assertNotIn("\ufffd", "".join(c.text for c in chunks))
        self.assertEqual(stream.exit_code, 4)
        self.assertIsNotNone(stream.exited)
        self.assertFalse(stream.exited.timed_out)
        self.assertIsNotNone(stream.started_at)
        self.assertFalse(stream.cancelled)

    def test_stream_bash_collect_gathers_megabytes_in_order(self) -> None:
        output = self.ws.stream_bash("seq 1 200000").collect()
        self.assertEqual(output.stdout, "".join(f"{i}\n" for i in range(1, 200001)))
        self.assertEqual((output.exited.exit_code, output.exited.stdout_total_bytes), (0, len(output.stdout)))

    def test_a_cancelled_stream_kills_its_command_before_it_writes_its_marker(self) -> None:
        stream = self.ws.stream_bash("echo $$ > shell.pid; echo begun; sleep 8; echo late > marker")
        first = next(stream)
        self.assertEqual((first.stream, first.text), ("stdout", "begun\n"))
        stream.cancel()
        self.assertEqual(list(stream), [])
        self.assertTrue(stream.cancelled)
        self.assertIsNone(stream.exited)
        # The shell that would write the marker is gone (killed, not finished: the marker is absent).
        gone = self.ws.bash("p=$(cat shell.pid); for i in $(seq 200); do kill -0 $p 2>/dev/null || { echo gone; exit; }; sleep 0.05; done; echo alive")
        self.assertEqual(gone.stdout, "gone\n")
        self.assertEqual(self.ws.bash("test -e marker && echo written || echo absent").stdout, "absent\n")

    def test_leaving_the_with_block_of_a_stream_cancels_it(self) -> None:
        with self.ws.stream_bash("echo $$ > loop.pid; while :; do echo tick; sleep 0.1; done") as stream:
            for chunk in stream:
                if "tick" in chunk.text:
                    break
        self.assertTrue(stream.cancelled)
        gone = self.ws.bash("p=$(cat loop.pid); for i in $(seq 200); do kill -0 $p 2>/dev/null || { echo gone; exit; }; sleep 0.05; done; echo alive")
        self.assertEqual(gone.stdout, "gone\n")

    # --- files and search ---------------------------------------------------------------------

    def test_write_read_edit_patch_list_glob_delete(self) -> None:
        written = self.ws.write("src/app.py", "def main():\n    return 1\n")
        self.assertEqual((written.bytes_written, written.created), (25, True))
        read = self.ws.read("src/app.py")
        self.assertEqual(read.content, "1: def main():\n2:     return 1")
        self.assertEqual((read.total_lines, pb.tool.FileKind.Name(read.kind)), (2, "FILE_KIND_TEXT"))
        self.assertEqual(self.ws.read("src/app.py", offset=2, limit=1).content, "2:     return 1")
        edited = self.ws.edit("src/app.py", "return 1", "return 2")
        self.assertEqual((edited.replacements, edited.lines_changed), (1, 1))
        patched = self.ws.patch("src/app.py", [("def main", "def run"), ("return 2", "return 3")])
        self.assertEqual(patched.patches_applied, 2)
        self.assertEqual(self.ws.read("/workspace/src/app.py").content, "1: def run():\n2:     return 3")
        self.ws.write("src/util.py", "x = 1\n")
        self.assertEqual([f.path for f in self.ws.list("src").files], ["src/app.py", "src/util.py"])
        self.assertEqual([f.path for f in self.ws.list(pattern="**/*.py").files], ["src/app.py", "src/util.py"])
        self.assertEqual(sorted(self.ws.glob("**/*.py").paths), ["src/app.py", "src/util.py"])
        self.ws.delete("src/util.py")
        self.assertEqual(list(self.ws.glob("**/*.py").paths), ["src/app.py"])

    def test_grep_and_stream_grep_find_the_same_matches(self) -> None:
        for i in range(5):
            self.ws.write(f"m{i}.txt", f"alpha {i}\nbeta\nALPHA\n")
        found = self.ws.grep("alpha", glob="*.txt")
        self.assertEqual(sorted((m.path, m.line, m.content) for m in found.matches), [(f"m{i}.txt", 1, f"alpha {i}") for i in range(5)])
        self.assertFalse(found.truncated)
        self.assertEqual(len(self.ws.grep("alpha", case_sensitive=False).matches), 10)
        with self.ws.stream_grep("alpha", glob="*.txt") as stream:
            streamed = sorted((m.path, m.line, m.content) for m in stream)
        self.assertEqual(streamed, sorted((m.path, m.line, m.content) for m in found.matches))
        self.assertEqual((stream.done.match_count, stream.done.truncated), (5, False))
        limited = self.ws.stream_grep("alpha", case_sensitive=False, max_results=3)
        self.assertEqual(len(list(limited)), 3)
        self.assertTrue(limited.done.truncated)

    # --- background processes and exposed ports ------------------------------------------------

    def test_a_background_process_reads_its_stdin_and_is_read_attached_listed_and_waited_for(self) -> None:
        process = self.ws.processes.start('while read -r line; do echo "got $line"; done; echo bye', stdin=True)
        self.assertTrue(process.process_id.startswith("proc_"))
        self.assertEqual((pb.process.ProcessState.Name(process.state), process.stdin_open), ("PROCESS_STATE_RUNNING", True))
        self.assertEqual(self.ws.processes.write(process.process_id, "one\n"), 4)
        self.assertEqual(self.ws.processes.write(process.process_id, b"two\n", close=True), 4)
        waited = self.ws.processes.wait(process.process_id, timeout_ms=30_000)
        self.assertFalse(waited.timed_out)
        self.assertEqual((pb.process.ProcessState.Name(waited.process.state), waited.process.exit_code), ("PROCESS_STATE_EXITED", 0))
        output = self.ws.processes.read(process.process_id)
        self.assertEqual((output.stdout, output.stderr, output.next_stdout_offset), (b"got one\ngot two\nbye\n", b"", 20))
        with self.ws.processes.attach(process.process_id) as stream:
            events = list(stream)
        self.assertEqual([e.WhichOneof("event") for e in events][-1], "ended")
        self.assertEqual(b"".join(e.stdout.data for e in events if e.WhichOneof("event") == "stdout"), b"got one\ngot two\nbye\n")
        self.assertEqual((events[-1].ended.process_id, events[-1].ended.exit_code), (process.process_id, 0))
        self.assertIn(process.process_id, [p.process_id for p in self.ws.processes.list()])
        self.assertEqual(self.ws.processes.get(process.process_id).stdout_total_bytes, 20)
        with self.assertRaises(errors.ProcessNotRunning) as caught:
            self.ws.processes.signal(process.process_id, "TERM")
        self.assertEqual((caught.exception.code, caught.exception.reason), (grpc.StatusCode.FAILED_PRECONDITION, "PROCESS_NOT_RUNNING"))
        with self.assertRaises(errors.ProcessNotFound):
            self.ws.processes.get("proc_missing")

    def test_an_exposed_port_is_listed_and_unexposed(self) -> None:
        port = random.randint(20000, 40000)
        exposed = self.ws.processes.expose_port(port)
        self.assertEqual((exposed.port.port, exposed.port.path, exposed.listening), (port, f"/ports/{self.ws.id}/{port}/", False))
        self.assertEqual([(p.port, p.path) for p in self.ws.processes.list_exposed_ports()], [(port, f"/ports/{self.ws.id}/{port}/")])
        self.assertEqual(self.ws.processes.unexpose_port(port), 0)
        self.assertEqual(self.ws.processes.list_exposed_ports(), [])

    # --- errors, one per reason family --------------------------------------------------------

    def test_not_found(self) -> None:
        with self.assertRaises(errors.FileNotFound) as caught:
            self.ws.read("missing.txt")
        err = caught.exception
        self.assertEqual((err.code, err.reason, err.metadata, str(err)), (grpc.StatusCode.NOT_FOUND, "FILE_NOT_FOUND", {"path": "missing.txt"}, "File not found: missing.txt"))
        with self.assertRaises(errors.WorkspaceNotFound):
            self.client.workspace("ws-0000000000000000").bash("true")

    def test_command_not_allowed_under_an_agent_type_allowlist_and_a_tool_not_enabled(self) -> None:
        agent_type = unique("py-allowlist")
        self.client.create_agent_type(agent_type, workspace={"enabled": True, "tools": ["bash", "read"], "command_policy": {"allow": ["echo"]}})
        with self.client.create_workspace(agent_type=agent_type) as ws:
            self.assertEqual(ws.bash("echo allowed").stdout, "allowed\n")
            with self.assertRaises(errors.CommandNotAllowed) as caught:
                ws.bash("echo x > marker; ls")
            self.assertEqual((caught.exception.code, caught.exception.reason), (grpc.StatusCode.PERMISSION_DENIED, "COMMAND_NOT_ALLOWED"))
            with self.assertRaises(errors.CommandNotAllowed):
                next(ws.stream_bash("ls"))
            with self.assertRaises(errors.ToolNotEnabled) as denied:
                ws.write("a.txt", "x")
            self.assertEqual(str(denied.exception), "Tool 'write' is not enabled for this agent type")
            with self.assertRaises(errors.FileNotFound):
                ws.read("marker")  # the refused command never ran

    def test_invalid_argument(self) -> None:
        with self.assertRaises(errors.InvalidPattern) as pattern:
            self.ws.grep("(")
        self.assertEqual(pattern.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(errors.InvalidArgument) as argument:
            self.ws.bash("")
        self.assertEqual(argument.exception.metadata, {"field": "command"})
        with self.assertRaises(errors.UnknownTool) as tool:
            self.client.create_agent_type(unique("py-bad"), workspace={"tools": ["ssh"]})
        self.assertEqual(tool.exception.metadata["invalid"], "ssh")

    def test_failed_precondition(self) -> None:
        self.ws.write("twice.txt", "same\nsame\n")
        with self.assertRaises(errors.FindNotUnique) as caught:
            self.ws.edit("twice.txt", "same", "other")
        self.assertEqual((caught.exception.code, caught.exception.metadata["occurrences"]), (grpc.StatusCode.FAILED_PRECONDITION, "2"))
        self.ws.write("code.py", "import os\ndef compute(x):\n    return x\n")
        with self.assertRaises(errors.FindNotFound) as missing:
            self.ws.edit("code.py", "def compute(y):", "def compute(z):")
        match = missing.exception.closest_match
        self.assertIsNotNone(match)
        self.assertEqual((match.start_line, match.end_line, match.text), (2, 2, "def compute(x):"))
        self.ws.write("dir/file.txt", "x")
        with self.assertRaises(errors.IsDirectory):
            self.ws.write("dir", "x")

    def test_deadline_exceeded(self) -> None:
        with self.assertRaises(errors.CommandTimeout) as caught:
            self.ws.bash("echo begun; sleep 30", command_timeout=1)
        err = caught.exception
        self.assertEqual(err.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual(err.partial_output.stdout, "begun\n")
        # The client's own deadline: no detail arrives, the base class carries the code.
        with self.assertRaises(AgentWorkspaceError) as deadline:
            self.ws.bash("sleep 30", timeout=1)
        self.assertEqual((type(deadline.exception), deadline.exception.code, deadline.exception.reason), (AgentWorkspaceError, grpc.StatusCode.DEADLINE_EXCEEDED, "UNSPECIFIED"))
        timed_out = self.ws.stream_bash("echo begun; sleep 30", command_timeout=1)
        self.assertEqual(timed_out.collect().stdout, "begun\n")
        self.assertTrue(timed_out.exited.timed_out)

    def test_unauthenticated_without_a_key_or_with_a_wrong_one(self) -> None:
        wrong = "wrong-key-" + API_KEY[::-1]
        for key in (None, wrong):
            with AgentWorkspace(URL, api_key=key) as anonymous:
                with self.assertRaises(errors.Unauthenticated) as caught:
                    anonymous.create_workspace()
                err = caught.exception
                self.assertEqual((err.code, err.reason), (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED"))
                for text in (str(err), repr(err), repr(anonymous), str(err.metadata)):
                    self.assertNotIn(wrong, text)
                    self.assertNotIn(API_KEY, text)


if __name__ == "__main__":
    unittest.main()
